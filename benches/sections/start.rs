//! Start: time from spawning `rollguard deploy` to its first connection to a cluster (the
//! config, manifests and kubeconfig read and validated, the runtime and TLS set up), and the
//! binary's size. The "cluster" is a bare TCP listener on loopback: its accept() is the
//! moment of the first request, with no server work inside the figure.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::procs;
use crate::support::table::{Row, why};

/// Why one start could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("bind")]
    Bind(#[source] std::io::Error),
    /// The listener's address, the run's folder or the listener's mode.
    #[error(transparent)]
    Io(std::io::Error),
    /// `name`: the file, relative to the run's folder.
    #[error("{name}")]
    Write {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("spawn rollguard")]
    Spawn(#[source] std::io::Error),
    #[error("rollguard made no request within 10 s")]
    NoRequest,
    #[error("rollguard exited ({0}) before any request")]
    Exited(std::process::ExitStatus),
    #[error("accept")]
    Accept(#[source] std::io::Error),
}

/// Runs measured; the median is the figure, the maximum is shown beside it.
const RUNS: usize = 15;
/// Goal for the median start-to-first-request time.
const GOAL: Duration = Duration::from_millis(100);

pub async fn run(scratch: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    let bin = procs::rollguard_bin();
    match std::fs::metadata(&bin) {
        Ok(m) => rows.push(Row::info(
            "rollguard binary size (the binary measured: see the header)",
            format!("{:.1} MiB", m.len() as f64 / (1024.0 * 1024.0)),
        )),
        Err(e) => rows.push(Row::skipped(
            "binary size",
            format!("{}: {e}", bin.display()),
        )),
    }
    let mut times = Vec::new();
    for i in 0..RUNS {
        match first_request(scratch, i) {
            Ok(t) => times.push(t),
            Err(e) => {
                rows.push(Row::skipped("start to first request", why(&e)));
                return rows;
            }
        }
    }
    times.sort();
    let median = times[RUNS / 2];
    let max = times[RUNS - 1];
    rows.push(Row::goal(
        format!("process start -> first request to a cluster (median of {RUNS})"),
        format!("< {} ms", GOAL.as_millis()),
        format!(
            "{:.1} ms (max {:.1} ms)",
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        ),
        median < GOAL,
    ));
    rows
}

/// One run: a listener, a kubeconfig pointing at it, `rollguard deploy`, the time to accept().
fn first_request(scratch: &Path, i: usize) -> Result<Duration, StartError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(StartError::Bind)?;
    let port = listener.local_addr().map_err(StartError::Io)?.port();
    let dir = scratch.join(format!("run-{i}"));
    std::fs::create_dir_all(dir.join("k8s")).map_err(StartError::Io)?;
    let write = |name: &str, text: &str| {
        std::fs::File::create(dir.join(name))
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| StartError::Write {
                name: name.to_string(),
                source,
            })
    };
    write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: bench\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )?;
    write(
        "rollguard.yaml",
        "app: start\nnamespace: start\nmanifests: [k8s/]\ntargets:\n  - name: c\n    context: c\n",
    )?;
    write(
        "k8s/app.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: start\ndata:\n  a: b\n",
    )?;
    let started = Instant::now();
    let mut child = Command::new(procs::rollguard_bin())
        .args(["deploy", "--config"])
        .arg(dir.join("rollguard.yaml"))
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["--timeout", "5s"])
        .current_dir(&dir)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(StartError::Spawn)?;
    listener.set_nonblocking(true).map_err(StartError::Io)?;
    let result = loop {
        match listener.accept() {
            Ok(_) => break Ok(started.elapsed()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if started.elapsed() > Duration::from_secs(10) {
                    break Err(StartError::NoRequest);
                }
                if let Ok(Some(status)) = child.try_wait() {
                    break Err(StartError::Exited(status));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => break Err(StartError::Accept(e)),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    result
}
