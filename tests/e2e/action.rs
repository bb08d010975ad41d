//! `action.yml` run as the GitHub runner runs a composite action: each step's `env:` and
//! `run:` with the `${{ }}` expressions substituted, as `bash --noprofile --norc -eo
//! pipefail` with the runner's variables (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, ...), step
//! outputs read back from GITHUB_OUTPUT, and the action's outputs evaluated from them.
//! Used as `uses: ./`, the install step builds rollguard from source (dist/build-static.sh);
//! the deploy step `exec`s it, so a SIGINT to the step's process is a cancel that rolls back.
//!
//! Used as `uses: OWNER/rollguard@vX.Y.Z`, the install step downloads the release archive
//! and SHA256SUMS (here from a local stand-in for the release URLs), refuses a mismatch and
//! keeps a good binary in the tool cache.
//!
//! The source build runs cargo, which must not share the target folder of the `cargo test`
//! running this (cargo holds it locked): `ROLLGUARD_ACTION_TARGET_DIR` names another one.
//! .ci/run sets it to the folder where it already built the static binary, so the build is a
//! no-op there. Without it that test prints why it skips; with it, it never skips. The
//! release-path test needs nothing but bash, curl and tar, and always runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{TestEnv, config, list, small_app};

const TARGET_DIR_ENV: &str = "ROLLGUARD_ACTION_TARGET_DIR";

/// One step of the composite action.
struct Step {
    id: String,
    env: BTreeMap<String, String>,
    run: String,
}

/// What a runner knows while it runs the action.
struct Runner {
    repo: PathBuf,
    /// Where the runner keeps the action: the checkout for `uses: ./`, else
    /// `.../_actions/OWNER/REPO/REF`.
    action_path: PathBuf,
    action: Value,
    inputs: BTreeMap<String, String>,
    outputs: BTreeMap<String, BTreeMap<String, String>>,
    vars: BTreeMap<String, String>,
    dir: PathBuf,
}

impl Runner {
    fn new(dir: &Path, inputs: &[(&str, &str)], target_dir: &str) -> Runner {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(repo.join("action.yml")).expect("action.yml");
        let action: Value = serde_saphyr::from_str(&text).expect("action.yml is YAML");
        assert_eq!(action["runs"]["using"], "composite", "{action:#}");
        let declared = action["inputs"].as_object().expect("inputs");
        for (name, _) in inputs {
            assert!(
                declared.contains_key(*name),
                "action.yml has no input {name}"
            );
        }
        for name in declared.keys() {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "input {name} is not snake_case (INPUT_FOO-BAR cannot be read by a shell)"
            );
        }
        let mut runner = Runner {
            action_path: repo.clone(),
            repo,
            action: action.clone(),
            inputs: BTreeMap::new(),
            outputs: BTreeMap::new(),
            vars: BTreeMap::new(),
            dir: dir.to_path_buf(),
        };
        for (name, spec) in declared {
            let given = inputs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
            let value = match given {
                Some(v) => v.to_string(),
                None => runner.eval(spec["default"].as_str().unwrap_or("")),
            };
            runner.inputs.insert(name.clone(), value);
        }
        for sub in ["temp", "tool-cache", "home"] {
            std::fs::create_dir_all(dir.join(sub)).expect("runner folder");
        }
        std::fs::write(dir.join("event.json"), "{}").expect("event");
        let path = |sub: &str| dir.join(sub).display().to_string();
        // A loopback port with nothing listening: GitHub API calls fail fast, as offline.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let api = format!("http://{}", closed.local_addr().expect("addr"));
        drop(closed);
        let vars = [
            ("CI", "true".to_string()),
            ("GITHUB_ACTIONS", "true".to_string()),
            // `uses: ./`: the action is the workspace's checkout.
            ("GITHUB_WORKSPACE", runner.repo.display().to_string()),
            ("GITHUB_REPOSITORY", "acme/shop".to_string()),
            (
                "GITHUB_SHA",
                "4f2c0a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a".to_string(),
            ),
            ("GITHUB_REF", "refs/heads/main".to_string()),
            ("GITHUB_REF_NAME", "main".to_string()),
            ("GITHUB_EVENT_NAME", "push".to_string()),
            ("GITHUB_EVENT_PATH", path("event.json")),
            ("GITHUB_RUN_ID", "4242".to_string()),
            ("GITHUB_RUN_ATTEMPT", "1".to_string()),
            ("GITHUB_SERVER_URL", "https://github.com".to_string()),
            ("GITHUB_API_URL", api),
            ("RUNNER_OS", "Linux".to_string()),
            ("RUNNER_ARCH", "X64".to_string()),
            ("RUNNER_TEMP", path("temp")),
            ("RUNNER_TOOL_CACHE", path("tool-cache")),
            ("HOME", path("home")),
            ("CARGO_TARGET_DIR", target_dir.to_string()),
        ];
        for (k, v) in vars {
            runner.vars.insert(k.to_string(), v);
        }
        // The toolchain the machine has (cargo for the source build).
        for key in ["PATH", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"] {
            if let Some(v) = std::env::var(key).ok().or_else(|| default_home(key)) {
                runner.vars.insert(key.to_string(), v);
            }
        }
        runner
    }

    /// Substitutes every `${{ expr }}` this action uses; any other expression fails the test,
    /// so the action cannot grow one that this runner silently gets wrong.
    fn eval(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").expect("closing }}") + start;
            let expr = rest[start + 3..end].trim();
            let value = if let Some(name) = expr.strip_prefix("inputs.") {
                self.inputs
                    .get(name)
                    .unwrap_or_else(|| panic!("${{{{ {expr} }}}}: no such input"))
                    .clone()
            } else if let Some(path) = expr.strip_prefix("steps.") {
                let (id, output) = path.split_once(".outputs.").expect("steps.ID.outputs.NAME");
                self.outputs
                    .get(id)
                    .and_then(|o| o.get(output))
                    .cloned()
                    .unwrap_or_default()
            } else {
                match expr {
                    "github.action_path" => self.action_path.display().to_string(),
                    // `uses: ./`: the runner leaves both empty for a local action.
                    "github.action_ref" | "github.action_repository" => String::new(),
                    "github.token" => "ghs_test_token_not_a_secret".to_string(),
                    other => panic!("action.yml uses ${{{{ {other} }}}}, unknown to this test"),
                }
            };
            out.push_str(&value);
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    fn steps(&self) -> Vec<Step> {
        let steps = self.action["runs"]["steps"].as_array().expect("steps");
        steps
            .iter()
            .map(|s| {
                assert_eq!(s["shell"], "bash", "every step runs in bash: {s:#}");
                assert!(s.get("if").is_none(), "this runner knows no if: {s:#}");
                let run = s["run"].as_str().expect("a run: step");
                assert!(
                    !run.contains("${{"),
                    "run: must take inputs through env:, never by substitution (script injection): {run}"
                );
                // Evaluated when the step starts, as the runner does (steps.*.outputs).
                let env = s["env"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                Step {
                    id: s["id"].as_str().expect("every step has an id").to_string(),
                    env,
                    run: run.to_string(),
                }
            })
            .collect()
    }

    /// Starts a step as the runner does; returns the child and its GITHUB_OUTPUT and
    /// GITHUB_STEP_SUMMARY files.
    fn spawn(&self, step: &Step, cwd: &Path) -> (tokio::process::Child, PathBuf, PathBuf) {
        let script = self.dir.join(format!("temp/{}.sh", step.id));
        std::fs::write(&script, &step.run).expect("script");
        let output = self.dir.join(format!("temp/{}.output", step.id));
        let summary = self.dir.join(format!("temp/{}.summary", step.id));
        std::fs::write(&output, "").expect("output file");
        std::fs::write(&summary, "").expect("summary file");
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail"])
            .arg(&script)
            .current_dir(cwd)
            .env_clear()
            .envs(&self.vars)
            .env("GITHUB_ACTION_PATH", &self.action_path)
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("RUST_LOG", "rollguard=info")
            .envs(step.env.iter().map(|(k, v)| (k, self.eval(v))))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        (cmd.spawn().expect("bash runs"), output, summary)
    }

    /// Runs a step to its end and records its outputs; returns (exit code, output, summary).
    async fn run(&mut self, step: &Step, cwd: &Path, limit: Duration) -> (i32, String, String) {
        let (child, output, summary) = self.spawn(step, cwd);
        let out = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("step {} finished within {limit:?}", step.id))
            .expect("step ran");
        self.record(step, &output);
        (
            out.status.code().unwrap_or(-1),
            format!(
                "step {} exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
                step.id,
                out.status.code(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            std::fs::read_to_string(summary).expect("summary"),
        )
    }

    fn record(&mut self, step: &Step, output: &Path) {
        let text = std::fs::read_to_string(output).expect("output file");
        self.outputs.insert(step.id.clone(), parse_outputs(&text));
    }

    /// The action's outputs, evaluated from the steps' outputs.
    fn action_outputs(&self) -> BTreeMap<String, String> {
        self.action["outputs"]
            .as_object()
            .expect("outputs")
            .iter()
            .map(|(k, v)| (k.clone(), self.eval(v["value"].as_str().expect("value"))))
            .collect()
    }
}

fn default_home(key: &str) -> Option<String> {
    let home = std::env::var("HOME").ok()?;
    match key {
        "CARGO_HOME" => Some(format!("{home}/.cargo")),
        "RUSTUP_HOME" => Some(format!("{home}/.rustup")),
        _ => None,
    }
}

/// GITHUB_OUTPUT as GitHub reads it: `name=value` lines and `name<<DELIM` ... `DELIM` blocks.
fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delim)) = line.split_once("<<") {
            let mut value = Vec::new();
            for l in lines.by_ref() {
                if l == delim {
                    break;
                }
                value.push(l);
            }
            out.insert(name.to_string(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            out.insert(name.to_string(), value.to_string());
        } else if !line.is_empty() {
            panic!("GITHUB_OUTPUT line is neither name=value nor name<<DELIM: {line:?}");
        }
    }
    out
}

fn target_dir(test: &str) -> Option<String> {
    match std::env::var(TARGET_DIR_ENV).ok().filter(|v| !v.is_empty()) {
        Some(dir) => Some(dir),
        None => {
            kube_sim::skip_test(
                test,
                &format!(
                    "{TARGET_DIR_ENV} not set (the action's source build needs a cargo target folder other than this test's; .ci/run sets it)"
                ),
            );
            None
        }
    }
}

async fn web_image(env: &TestEnv, cluster: usize) -> String {
    let client = env.client(cluster).await;
    list(&client, "apps/v1", "Deployment", "deployments", "shop")
        .await
        .into_iter()
        .find(|d| d["metadata"]["name"] == "web")
        .and_then(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_from_source_deploys_two_targets_and_a_sigint_to_its_step_rolls_back() {
    let Some(target_dir) =
        target_dir("action_from_source_deploys_two_targets_and_a_sigint_to_its_step_rolls_back")
    else {
        return;
    };
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let runner_dir = env.path("runner");
    let kubeconfig = env.kubeconfig.display().to_string();
    let app = env.dir.path().display().to_string();
    let inputs = [
        ("working_directory", app.as_str()),
        ("kubeconfig", kubeconfig.as_str()),
        ("targets", "eu, us"),
        ("timeout", "60s"),
    ];
    let mut runner = Runner::new(&runner_dir, &inputs, &target_dir);
    let steps = runner.steps();
    let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["install", "deploy"], "the test knows these steps");
    let workspace = runner.repo.clone();

    let (code, out, _) = runner
        .run(&steps[0], &workspace, Duration::from_secs(1800))
        .await;
    assert_eq!(code, 0, "{out}");
    let binary = runner.outputs["install"]["path"].clone();
    assert!(
        binary.ends_with("/x86_64-unknown-linux-gnu/dist/rollguard")
            && Path::new(&binary).is_file(),
        "the source build's binary: {binary}\n{out}"
    );

    let (code, out, summary) = runner
        .run(&steps[1], &workspace, Duration::from_secs(120))
        .await;
    assert_eq!(code, 0, "{out}");
    let outputs = runner.action_outputs();
    assert_eq!(outputs["binary"], binary);
    assert_eq!(outputs["outcome"], "deployed", "{outputs:#?}\n{out}");
    assert_eq!(outputs["exit_code"], "0", "{outputs:#?}");
    assert_eq!(outputs["deployed"], "eu,us", "{outputs:#?}");
    let report_path = runner_dir.join("temp/rollguard-report.json");
    assert_eq!(
        outputs["report"],
        report_path.display().to_string(),
        "{outputs:#?}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("report"))
            .expect("json");
    let targets: Value = serde_json::from_str(&outputs["targets"]).expect("targets is JSON");
    for name in ["eu", "us"] {
        assert_eq!(targets[name], "deployed", "{targets:#}");
        let t = report["targets"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == name))
            .expect("target in report");
        assert_eq!(t["outcome"], "deployed", "{report:#}");
        assert!(
            summary.contains(name),
            "the step summary names {name}:\n{summary}"
        );
    }
    assert!(!outputs["summary"].is_empty(), "{outputs:#?}");
    assert!(
        !summary.contains("ghs_test_token_not_a_secret")
            && !out.contains("ghs_test_token_not_a_secret"),
        "the token leaked"
    );

    // A cancel: the runner sends SIGINT to the step's process. With `exec` that process is
    // rollguard, which rolls back and exits 130; a shell in between would swallow it.
    env.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let (child, _, _) = runner.spawn(&steps[1], &workspace);
    let deadline = Instant::now() + Duration::from_secs(60);
    while web_image(&env, 1).await != "example.com/web:neverready"
        || web_image(&env, 2).await != "example.com/web:neverready"
    {
        assert!(
            Instant::now() < deadline,
            "the new revision was never applied"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id().expect("step running");
    // SAFETY: kill has no memory preconditions; pid is our running child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the step ended after SIGINT")
        .expect("step ran");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{text}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("report"))
            .expect("json");
    for (i, cluster) in [1, 2].into_iter().enumerate() {
        assert_eq!(report["targets"][i]["outcome"], "cancelled", "{report:#}");
        assert_eq!(
            web_image(&env, cluster).await,
            "example.com/web:v1",
            "{text}"
        );
    }
}

/// A stand-in for a GitHub release's download URLs: serves `files` under
/// `/acme/rollguard/releases/download/TAG/`, 404 otherwise, and counts the requests.
struct Releases {
    url: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Releases {
    fn start(tag: &str, files: Vec<(String, Vec<u8>)>) -> Releases {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        let prefix = format!("/acme/rollguard/releases/download/{tag}/");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut line = String::new();
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                // The rest of the request head.
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let body = path
                    .strip_prefix(&prefix)
                    .and_then(|name| files.iter().find(|(n, _)| n == name))
                    .map(|(_, b)| b.clone());
                let (status, body) = match body {
                    Some(b) => ("200 OK", b),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        Releases { url, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A release archive as release.yml packs it: `rollguard` at the top of a .tar.gz.
fn release_archive(dir: &Path, binary_text: &str) -> Vec<u8> {
    let pack = dir.join("pack");
    std::fs::create_dir_all(&pack).expect("mkdir");
    let bin = pack.join("rollguard");
    std::fs::write(&bin, binary_text).expect("write");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let archive = dir.join("archive.tar.gz");
    let ok = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&pack)
        .arg(".")
        .status()
        .expect("tar runs")
        .success();
    assert!(ok, "tar");
    std::fs::read(archive).expect("archive")
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_install_checks_the_release_checksum_and_uses_the_tool_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = "v9.8.7";
    let asset = format!("rollguard-{tag}-x86_64-unknown-linux-gnu.tar.gz");
    let archive = release_archive(dir.path(), "#!/bin/sh\necho rollguard 9.8.7\n");
    let good_sums = format!("{}  {asset}\n", sha256_hex(&archive));
    let bad_sums = format!("{}  {asset}\n", sha256_hex(b"something else"));

    // As the runner keeps `uses: acme/rollguard@v9.8.7`; the workspace is elsewhere.
    let run_install = |sums: String, runner_dir: PathBuf| {
        let archive = archive.clone();
        let asset = asset.clone();
        async move {
            let releases = Releases::start(
                tag,
                vec![(asset, archive), ("SHA256SUMS".into(), sums.into_bytes())],
            );
            let mut runner = Runner::new(&runner_dir, &[], "unused");
            runner.action_path = runner_dir.join(format!("_actions/acme/rollguard/{tag}"));
            std::fs::create_dir_all(&runner.action_path).expect("action path");
            let workspace = runner_dir.join("workspace");
            std::fs::create_dir_all(&workspace).expect("workspace");
            runner
                .vars
                .insert("GITHUB_WORKSPACE".into(), workspace.display().to_string());
            runner
                .vars
                .insert("GITHUB_SERVER_URL".into(), releases.url.clone());
            let steps = runner.steps();
            let (code, out, _) = runner
                .run(&steps[0], &workspace, Duration::from_secs(60))
                .await;
            (
                code,
                out,
                runner.outputs["install"].clone(),
                releases.requests(),
            )
        }
    };

    let runner_dir = dir.path().join("runner");
    let cache = runner_dir.join("tool-cache/rollguard/9.8.7/x86_64-unknown-linux-gnu");

    let (code, out, _, _) = run_install(bad_sums, runner_dir.clone()).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("SHA256SUMS of v9.8.7 says"), "{out}");
    assert!(out.contains("not running it"), "{out}");
    assert!(
        !cache.exists(),
        "a binary that failed its check is never cached"
    );

    let (code, out, outputs, requests) = run_install(good_sums.clone(), runner_dir.clone()).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(requests, 2, "the archive and SHA256SUMS: {out}");
    let path = cache.join("rollguard");
    assert_eq!(outputs["path"], path.display().to_string(), "{out}");
    assert!(
        cache.with_extension("complete").exists(),
        "the tool cache's completion marker, as @actions/tool-cache writes it"
    );
    let ran = std::process::Command::new(&path)
        .output()
        .expect("the cached binary runs");
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "rollguard 9.8.7\n");

    // The next job on this runner takes it from the tool cache: no download.
    let (code, out, outputs, requests) = run_install(good_sums, runner_dir.clone()).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(requests, 0, "{out}");
    assert!(out.contains("from the tool cache"), "{out}");
    assert_eq!(outputs["path"], path.display().to_string());
}

/// The deploy step's command line for these inputs, from a stand-in binary that prints its
/// arguments one a line.
async fn deploy_step_args(dir: &Path, inputs: &[(&str, &str)]) -> Vec<String> {
    let bin = dir.join("print-args");
    std::fs::write(&bin, "#!/bin/sh\nprintf '%s\\n' \"$@\"\n").expect("write");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let runner_dir = dir.join("runner");
    let mut runner = Runner::new(&runner_dir, inputs, "unused");
    runner.outputs.insert(
        "install".into(),
        BTreeMap::from([("path".to_string(), bin.display().to_string())]),
    );
    let steps = runner.steps();
    let deploy = steps
        .iter()
        .find(|s| s.id == "deploy")
        .expect("a deploy step");
    let (code, out, _) = runner.run(deploy, dir, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{out}");
    let stdout = out
        .split("--- stdout\n")
        .nth(1)
        .and_then(|rest| rest.split("\n--- stderr").next())
        .unwrap_or_default();
    stdout.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_input_wave_is_the_wave_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = deploy_step_args(dir.path(), &[("wave", "1")]).await;
    let at = args.iter().position(|a| a == "--wave");
    assert_eq!(
        at.and_then(|i| args.get(i + 1)).map(String::as_str),
        Some("1"),
        "{args:?}"
    );
    assert_eq!(args.first().map(String::as_str), Some("deploy"), "{args:?}");
    // Empty, the default: no --wave, every wave in order.
    let args = deploy_step_args(dir.path(), &[]).await;
    assert!(!args.iter().any(|a| a == "--wave"), "{args:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_input_memory_budget_is_the_memory_budget_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = deploy_step_args(dir.path(), &[("memory_budget", "1GiB")]).await;
    let at = args.iter().position(|a| a == "--memory-budget");
    assert_eq!(
        at.and_then(|i| args.get(i + 1)).map(String::as_str),
        Some("1GiB"),
        "{args:?}"
    );
    // Empty, the default: no flag, so rollguard's own default (or ROLLGUARD_MEMORY_BUDGET).
    let args = deploy_step_args(dir.path(), &[]).await;
    assert!(!args.iter().any(|a| a == "--memory-budget"), "{args:?}");
}
