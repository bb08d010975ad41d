//! Benchmarks of issue 3 (a program, not a timed test), against in-process kube-sim clusters:
//!
//! - detection: from the moment kube-sim puts a pod into ImagePullBackOff to rollguard's
//!   verdict (median of N runs), beside `kubectl rollout status` on the same cluster;
//! - fleet: 1, 10 and 50 clusters with 20 ms latency each (wall time, ratio 50:1);
//! - apply: 500 objects to one cluster with 5 ms latency, rollguard beside
//!   `kubectl apply --server-side` (wall time and API requests);
//! - memory: peak RSS of the `rollguard` binary deploying 100 objects to 50 clusters.
//!
//! `cargo build --release && cargo run --release --example bench_deploy -- [runs]`
//! (kubectl on the PATH for the comparisons; the memory figure needs target/release/rollguard).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube_sim::{EventKind, Faults, Sim, SimOptions};
use rollguard::cli::DeployArgs;
use rollguard::progress::Progress;
use rollguard::report::{Report, TargetOutcome};
use tokio_util::sync::CancellationToken;

const TIME_SCALE: f64 = 30.0;

fn deployment(name: &str, image: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: {name}
          image: {image}
"
    )
}

fn config_maps(count: usize) -> String {
    (0..count)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  key: value-{i}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn config(app: &str, namespace: &str, clusters: usize) -> String {
    let mut text = format!(
        "app: {app}\nnamespace: {namespace}\nmanifests: [k8s/]\nwait:\n  timeout: 5m\ntargets:\n"
    );
    for i in 1..=clusters {
        text.push_str(&format!("  - name: c{i}\n    context: sim-{i}\n"));
    }
    text
}

struct Bench {
    dir: tempfile::TempDir,
    sim: Sim,
}

impl Bench {
    async fn start(clusters: usize, rules: &str, latency_ms: u64) -> Bench {
        let rules = kube_sim::rules::parse(rules).expect("rules");
        let sim = Sim::start(SimOptions {
            clusters,
            time_scale: TIME_SCALE,
            rules,
            ..Default::default()
        })
        .await
        .expect("kube-sim starts");
        for c in sim.clusters() {
            c.set_faults(Faults {
                latency_ms,
                ..Default::default()
            });
        }
        let dir = tempfile::tempdir().expect("tempdir");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        Bench { dir, sim }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, config_text: &str, manifests: &str) {
        std::fs::create_dir_all(self.path().join("k8s")).expect("mkdir");
        std::fs::write(self.path().join("rollguard.yaml"), config_text).expect("config");
        std::fs::write(self.path().join("k8s/app.yaml"), manifests).expect("manifests");
    }

    fn args(&self) -> DeployArgs {
        DeployArgs {
            config: Some(self.path().join("rollguard.yaml")),
            kubeconfig: Some(self.path().join("kubeconfig")),
            contexts: Vec::new(),
            timeout: None,
            commit: None,
            report: None,
            force_conflicts: false,
            dry_run: false,
            on_failure: Some("none".into()),
            concurrency: Some(64),
            lock_timeout: None,
        }
    }

    /// One deploy through the library, as `rollguard deploy` runs it.
    async fn deploy(&self) -> (Report, Duration) {
        let plan = rollguard::cli::plan(&self.args(), HashMap::new()).expect("plan");
        let started = Instant::now();
        let report =
            rollguard::fleet::deploy(Arc::new(plan), CancellationToken::new(), Progress::quiet())
                .await;
        (report, started.elapsed())
    }

    fn requests(&self) -> u64 {
        self.sim
            .clusters()
            .iter()
            .map(|c| c.counters().total())
            .sum()
    }

    fn reset_counters(&self) {
        for c in self.sim.clusters() {
            c.reset_counters();
        }
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(self.path().join("kubeconfig"))
            .arg("--context")
            .arg("sim-1");
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
        cmd
    }
}

/// Resolves with the wall-clock instant the first pod of `namespace` shows ImagePullBackOff.
fn first_backoff(sim: &Sim, namespace: &str) -> tokio::task::JoinHandle<Option<Timestamp>> {
    let mut events = sim.clusters()[0].store().subscribe();
    let namespace = namespace.to_string();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if event.resource.resource != "pods" || event.kind == EventKind::Deleted {
                continue;
            }
            let obj = &event.object;
            if obj["metadata"]["namespace"] != namespace.as_str() {
                continue;
            }
            let backoff = obj["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["state"]["waiting"]["reason"] == "ImagePullBackOff")
                });
            if backoff {
                return Some(Timestamp::now());
            }
        }
        None
    })
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn detection(runs: usize) {
    println!("== detection: ImagePullBackOff in kube-sim -> verdict (time scale {TIME_SCALE}) ==");
    let bench = Bench::start(1, "- {image: \"*:bad\", behaviour: ImagePullBackOff}\n", 0).await;
    let mut delays = Vec::new();
    for run in 0..runs {
        let namespace = format!("detect-{run}");
        bench.write(
            &config(&namespace, &namespace, 1),
            &deployment("web", "example.com/web:bad", 2),
        );
        let seen = first_backoff(&bench.sim, &namespace);
        let (report, _) = bench.deploy().await;
        let target = &report.targets[0];
        let verdict_reason = target
            .failures
            .first()
            .map(|f| f.reason.clone())
            .unwrap_or_default();
        seen.abort();
        match seen.await.ok().flatten() {
            Some(at) if target.outcome == TargetOutcome::Failed => {
                let delay = seconds(at, target.finished_at);
                println!(
                    "  run {run}: {verdict_reason} verdict {:.3}s after kube-sim set it",
                    delay
                );
                delays.push(delay);
            }
            _ => println!(
                "  run {run}: no ImagePullBackOff seen before the verdict ({verdict_reason})"
            ),
        }
    }
    println!(
        "  rollguard median: {:.3}s (goal: at most 1 s)",
        median(&mut delays)
    );

    // kubectl on the same cluster, same image: it waits for the progress deadline.
    let namespace = "detect-kubectl";
    std::fs::write(
        bench.path().join("kubectl.yaml"),
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\n{}",
            deployment("web", "example.com/web:bad", 2).replace(
                "  name: web\nspec",
                &format!("  name: web\n  namespace: {namespace}\nspec")
            )
        ),
    )
    .expect("write");
    let seen = first_backoff(&bench.sim, namespace);
    let applied = bench
        .kubectl(&["apply", "--server-side", "-f"])
        .arg(bench.path().join("kubectl.yaml"))
        .status();
    if !applied.is_ok_and(|s| s.success()) {
        println!("  kubectl: not available or apply failed; comparison skipped");
        return;
    }
    let mut rollout = bench.kubectl(&[
        "rollout",
        "status",
        "deploy/web",
        "-n",
        namespace,
        "--timeout=300s",
    ]);
    let status = tokio::task::spawn_blocking(move || rollout.status()).await;
    let done = Timestamp::now();
    let failed = status
        .ok()
        .and_then(Result::ok)
        .is_some_and(|s| !s.success());
    let at = seen.await.ok().flatten();
    if let Some(at) = at {
        let delay = seconds(at, done);
        println!(
            "  kubectl rollout status: {}{:.1}s real ({:.0}s simulated) after ImagePullBackOff; ratio {:.0}x",
            if failed { "failed " } else { "" },
            delay,
            delay * TIME_SCALE,
            delay / median(&mut delays).max(1e-3)
        );
    }
}

async fn fleet() {
    println!("== fleet: clusters with 20 ms latency, small app (2 replicas) ==");
    let mut times = Vec::new();
    for n in [1usize, 10, 50] {
        let bench = Bench::start(n, "", 20).await;
        bench.write(
            &config("fleet", "fleet", n),
            &deployment("web", "example.com/web:v1", 2),
        );
        let (report, took) = bench.deploy().await;
        let deployed = report
            .targets
            .iter()
            .filter(|t| t.outcome == TargetOutcome::Deployed)
            .count();
        println!(
            "  {n:>2} clusters: {:.2}s ({deployed}/{n} deployed)",
            took.as_secs_f64()
        );
        times.push(took.as_secs_f64());
    }
    println!(
        "  ratio 50:1 = {:.2} (goal: at most 1.5)",
        times[2] / times[0]
    );
}

async fn apply_500() {
    println!("== apply: 500 ConfigMaps to one cluster with 5 ms latency ==");
    let bench = Bench::start(1, "", 5).await;
    bench.write(&config("many", "many", 1), &config_maps(500));
    bench.reset_counters();
    let (report, took) = bench.deploy().await;
    let ours = took.as_secs_f64();
    println!(
        "  rollguard: {ours:.2}s, {} requests ({})",
        bench.requests(),
        report.targets[0].outcome
    );
    let file = bench.path().join("kubectl-many.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: many-kubectl\n---\n{}",
            config_maps(500).replace(
                "metadata:\n  name: cm-",
                "metadata:\n  namespace: many-kubectl\n  name: cm-"
            )
        ),
    )
    .expect("write");
    bench.reset_counters();
    let started = Instant::now();
    let mut cmd = bench.kubectl(&["apply", "--server-side", "-f"]);
    cmd.arg(&file);
    let status = tokio::task::spawn_blocking(move || cmd.status()).await;
    let theirs = started.elapsed().as_secs_f64();
    if status
        .ok()
        .and_then(Result::ok)
        .is_some_and(|s| s.success())
    {
        println!(
            "  kubectl apply --server-side: {theirs:.2}s, {} requests",
            bench.requests()
        );
        println!(
            "  ratio {:.1}x (goal: at least 5x)",
            theirs / ours.max(1e-3)
        );
    } else {
        println!("  kubectl: not available or failed; comparison skipped");
    }
}

fn release_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?; // target/release/examples -> target/release
    let bin = dir.join("rollguard");
    bin.is_file().then_some(bin)
}

async fn memory() {
    println!("== memory: 100 objects to 50 clusters, peak RSS of the rollguard process ==");
    let Some(bin) = release_binary() else {
        println!("  target/release/rollguard not built (cargo build --release); skipped");
        return;
    };
    let bench = Bench::start(50, "", 0).await;
    let manifests = format!(
        "{}---\n{}",
        config_maps(95),
        (0..5)
            .map(|i| deployment(&format!("web-{i}"), "example.com/web:v1", 1))
            .collect::<Vec<_>>()
            .join("---\n")
    );
    bench.write(&config("mem", "mem", 50), &manifests);
    let mut child = tokio::process::Command::new(bin)
        .args(["deploy", "--concurrency", "64", "--config"])
        .arg(bench.path().join("rollguard.yaml"))
        .arg("--kubeconfig")
        .arg(bench.path().join("kubeconfig"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rollguard runs");
    let pid = child.id().unwrap_or(0);
    let mut peak_kib = 0u64;
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            for line in text.lines().filter(|l| l.starts_with("VmHWM:")) {
                let kib = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                peak_kib = peak_kib.max(kib);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            println!(
                "  exit {:?} after {:.1}s; peak RSS {:.1} MiB (goal: under 100 MiB)",
                status.code(),
                started.elapsed().as_secs_f64(),
                peak_kib as f64 / 1024.0
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let runs = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    detection(runs).await;
    fleet().await;
    apply_500().await;
    memory().await;
}
