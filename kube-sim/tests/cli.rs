//! The command-line contract: `kube-sim serve` writes the kubeconfig, prints exactly one
//! line `ready` once every cluster listens, serves, and stops on SIGTERM.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `kube-sim serve --plain-http ARGS`, read until `ready`: the child, its stdout after that
/// line, its kubeconfig, and the folder holding it.
fn serve(
    args: &[&str],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    Value,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["serve", "--plain-http"])
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let config: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    (child, stdout, config, dir)
}

/// GET `path` from the `i`th cluster of `config` over plain HTTP: the whole response.
fn get(config: &Value, i: usize, path: &str) -> String {
    let server = config["clusters"][i]["cluster"]["server"].as_str().unwrap();
    let token = config["users"][i]["user"]["token"].as_str().unwrap();
    let address = server.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    use std::io::Write;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn serve_prints_ready_serves_and_stops_on_sigterm() {
    let (mut child, mut stdout, config, _dir) = serve(&["--clusters", "3", "--time-scale", "10"]);
    assert_eq!(config["current-context"], "sim-1");
    let names: Vec<&str> = config["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sim-1", "sim-2", "sim-3"]);
    // Each cluster answers on its own port with its own token.
    for i in 0..3 {
        let response = get(&config, i, "/api/v1/namespaces/default");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("\"name\":\"default\""), "{response}");
    }

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "kube-sim did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "only one line on stdout");
}

#[test]
fn serve_latency_ms_delays_every_answer_of_every_cluster() {
    let (mut child, _stdout, config, _dir) = serve(&["--clusters", "2", "--latency-ms", "400"]);
    for i in 0..2 {
        let started = Instant::now();
        let response = get(&config, i, "/api/v1/namespaces/default");
        // A lower bound only: the sleep guarantees it, a loaded machine only adds to it.
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "sim-{} answered in {:?}",
            i + 1,
            started.elapsed()
        );
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn serve_reports_a_bad_rules_file() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, "this: [is not a rules list").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["serve", "--kubeconfig"])
        .arg(dir.path().join("kc"))
        .arg("--rules")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rules"), "{stderr}");
}
