//! Detection (issue 3): from the moment kube-sim puts the new pod into ImagePullBackOff to
//! rollguard's verdict, beside `kubectl rollout status` on the same cluster and Deployment.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kube_sim::{EventKind, SimOptions};

use crate::support::fixtures::{self, FixtureError};
use crate::support::procs::{self, Finished};
use crate::support::table::{Row, median, why};

const RUNS: usize = 5;
/// Simulated seconds per real second in this section's cluster.
pub const TIME_SCALE: f64 = 2.0;
/// The Deployment's progress deadline (simulated seconds).
pub const PROGRESS_DEADLINE: u64 = 30;

/// Why the detection figures could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing a run's folder, manifests or config.
    #[error(transparent)]
    Io(std::io::Error),
    /// The task watching the cluster.
    #[error(transparent)]
    Watcher(tokio::task::JoinError),
    /// Every run's problem, joined.
    #[error("no usable run: {0}")]
    NoUsableRun(String),
}

/// What the bench saw in the cluster during one run.
#[derive(Default)]
struct Seen {
    deployment_created: Option<Instant>,
    backoff: Option<(Instant, jiff::Timestamp)>,
}

fn app(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  replicas: 2\n  progressDeadlineSeconds: {PROGRESS_DEADLINE}\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: example.com/shop/web:doesnotexist\n"
    )
}

fn is_backoff(pod: &serde_json::Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["state"]["waiting"]["reason"] == "ImagePullBackOff")
        })
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match measure(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("detection", why(&e))],
    }
}

async fn measure(scratch: &Path) -> Result<Vec<Row>, DetectError> {
    let kubectl = procs::on_path("kubectl");
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: 1,
            time_scale: TIME_SCALE,
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let store = sim.clusters()[0].store();

    let mut timings = Vec::new();
    let mut problems = Vec::new();
    let mut kubectl_runs = Vec::new();
    for i in 1..=RUNS {
        let ns = format!("det-{i}");
        let dir = scratch.join(&ns);
        std::fs::create_dir_all(dir.join("k8s")).map_err(DetectError::Io)?;
        std::fs::write(dir.join("k8s/app.yaml"), app(&ns)).map_err(DetectError::Io)?;
        std::fs::write(
            dir.join("rollguard.yaml"),
            fixtures::config(&ns, &ns, "k8s/", &fixtures::contexts(1), 1, "2m"),
        )
        .map_err(DetectError::Io)?;
        let watcher = watch_run(&store, &ns, &kubeconfig, &dir, kubectl);
        let run = fixtures::deploy(
            &dir,
            &kubeconfig,
            &["--on-failure", "none"],
            Duration::from_secs(90),
        )
        .await?;
        let (seen, kubectl_run) = watcher.await.map_err(DetectError::Watcher)?;
        if let Some(k) = kubectl_run {
            kubectl_runs.push((seen.backoff.map(|b| b.0), k));
        }
        match judge_run(&run, &seen) {
            Ok(timing) => timings.push(timing),
            Err(problem) => problems.push(format!("run {i}: {problem}")),
        }
    }
    if timings.is_empty() {
        return Err(DetectError::NoUsableRun(problems.join("; ")));
    }
    let (mut rows, rg_start) = rollguard_rows(&timings);
    rows.extend(kubectl_rows(kubectl_runs, rg_start).await);
    rows.push(Row::info(
        "  time scale",
        format!("{TIME_SCALE} sim-s per real s; rollguard's own timers run in real time"),
    ));
    for p in problems {
        rows.push(Row::info("  run problem", p));
    }
    fixtures::stop_sim(sim).await;
    Ok(rows)
}

/// A kubectl rollout status started on a run's Deployment: when, and its task.
type KubectlRun = (
    Instant,
    tokio::task::JoinHandle<Result<Finished, procs::RunError>>,
);

/// Watches the store in-process for one run in `ns`: when the Deployment appears, starts
/// kubectl on it (when on the PATH); notes the first ImagePullBackOff of one of its pods.
fn watch_run(
    store: &kube_sim::Store,
    ns: &str,
    kubeconfig: &Path,
    dir: &Path,
    kubectl: bool,
) -> tokio::task::JoinHandle<(Seen, Option<KubectlRun>)> {
    let mut events = store.subscribe();
    let watch_ns = ns.to_string();
    let kc = kubeconfig.to_path_buf();
    let kdir = dir.to_path_buf();
    tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut kubectl_run = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.backoff.is_none() && Instant::now() < deadline {
            let event = match tokio::time::timeout(Duration::from_secs(1), events.recv()).await {
                Ok(Ok(e)) => e,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) | Err(_) => {
                    continue;
                }
                Ok(Err(_)) => break,
            };
            if event.object["metadata"]["namespace"] != watch_ns.as_str() {
                continue;
            }
            match event.resource.resource.as_str() {
                "deployments" if event.kind == EventKind::Added => {
                    let at = Instant::now();
                    seen.deployment_created = Some(at);
                    if kubectl {
                        kubectl_run = Some((at, start_kubectl(&kc, &watch_ns, &kdir)));
                    }
                }
                "pods" if is_backoff(&event.object) => {
                    seen.backoff = Some((Instant::now(), jiff::Timestamp::now()));
                }
                _ => {}
            }
        }
        (seen, kubectl_run)
    })
}

/// `kubectl rollout status` on the run's Deployment, as a task.
fn start_kubectl(
    kubeconfig: &Path,
    ns: &str,
    dir: &Path,
) -> tokio::task::JoinHandle<Result<Finished, procs::RunError>> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["rollout", "status", "deployment/web", "-n"])
        .arg(ns)
        .arg("--timeout=5m")
        .env("HOME", dir);
    let dir = dir.to_path_buf();
    tokio::spawn(
        async move { procs::run_measured_async(cmd, Duration::from_secs(120), &dir).await },
    )
}

/// One run's figures: ImagePullBackOff to the verdict, to the process's exit, and the
/// rollout's start to the verdict (seconds).
struct Timing {
    verdict: f64,
    exit: f64,
    from_start: f64,
}

/// The run's figures, or why it does not count.
fn judge_run(run: &fixtures::DeployRun, seen: &Seen) -> Result<Timing, String> {
    let Some(report) = &run.report else {
        return Err(run.problem());
    };
    let Some(target) = report.targets.first() else {
        return Err("report without targets".into());
    };
    let reason_ok = target
        .failures
        .iter()
        .any(|f| f.reason == "ImagePullBackOff");
    if target.outcome.as_str() != "failed" || !reason_ok {
        return Err(format!(
            "outcome {} with failures {:?}",
            target.outcome.as_str(),
            target
                .failures
                .iter()
                .map(|f| f.reason.as_str())
                .collect::<Vec<_>>()
        ));
    }
    let (Some((backoff_at, backoff_ts)), Some(created)) = (seen.backoff, seen.deployment_created)
    else {
        return Err("the bench did not see the ImagePullBackOff".into());
    };
    let verdict = (target.finished_at.as_nanosecond() - backoff_ts.as_nanosecond()) as f64 / 1e9;
    Ok(Timing {
        verdict,
        exit: run
            .finished
            .ended
            .saturating_duration_since(backoff_at)
            .as_secs_f64(),
        from_start: (backoff_at - created).as_secs_f64() + verdict,
    })
}

/// rollguard's rows, and its median from the rollout's start (kubectl's is beside it).
fn rollguard_rows(timings: &[Timing]) -> (Vec<Row>, f64) {
    let verdicts: Vec<f64> = timings.iter().map(|t| t.verdict).collect();
    let med = median(&verdicts);
    let lo = verdicts.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = verdicts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let rg_start = median(&timings.iter().map(|t| t.from_start).collect::<Vec<_>>());
    let rows = vec![
        Row::goal(
            format!(
                "rollguard: ImagePullBackOff -> verdict (report finished_at), median of {}",
                verdicts.len()
            ),
            "<= 1 s",
            format!(
                "{med:.3} s (min {lo:.3}, max {hi:.3}) = {:.2} sim-s",
                med * TIME_SCALE
            ),
            med <= 1.0,
        ),
        Row::info(
            "  ImagePullBackOff -> rollguard process exit, median",
            format!(
                "{:.3} s",
                median(&timings.iter().map(|t| t.exit).collect::<Vec<_>>())
            ),
        ),
        Row::info(
            "  rollout start (Deployment created) -> rollguard verdict, median",
            format!("{rg_start:.3} s = {:.1} sim-s", rg_start * TIME_SCALE),
        ),
    ];
    (rows, rg_start)
}

/// kubectl's rows: each run's kubectl to its end, beside rollguard's `rg_start`.
async fn kubectl_rows(runs: Vec<(Option<Instant>, KubectlRun)>, rg_start: f64) -> Vec<Row> {
    if runs.is_empty() {
        return vec![Row::skipped(
            "kubectl rollout status",
            "kubectl is not on the PATH",
        )];
    }
    let mut k_start = Vec::new();
    let mut k_backoff = Vec::new();
    let mut k_problems = Vec::new();
    for (backoff_at, (started, handle)) in runs {
        let finished: Finished = match handle.await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                k_problems.push(why(&e));
                continue;
            }
            Err(e) => {
                k_problems.push(e.to_string());
                continue;
            }
        };
        let text = format!("{}{}", finished.stdout, finished.stderr);
        if finished.code != Some(1) || !text.contains("progress deadline") {
            k_problems.push(format!(
                "kubectl ended {:?}: {}",
                finished.code,
                finished.tail()
            ));
            continue;
        }
        k_start.push(
            finished
                .ended
                .saturating_duration_since(started)
                .as_secs_f64(),
        );
        if let Some(b) = backoff_at {
            k_backoff.push(finished.ended.saturating_duration_since(b).as_secs_f64());
        }
    }
    if k_start.is_empty() {
        return vec![Row::skipped(
            "kubectl rollout status",
            k_problems.join("; "),
        )];
    }
    let k = median(&k_start);
    vec![
        Row::info(
            format!(
                "kubectl rollout status: rollout start -> failure, median of {}",
                k_start.len()
            ),
            format!(
                "{k:.2} s = {:.0} sim-s (progressDeadlineSeconds {PROGRESS_DEADLINE})",
                k * TIME_SCALE
            ),
        ),
        Row::info(
            "  ImagePullBackOff -> kubectl verdict, median",
            format!("{:.2} s", median(&k_backoff)),
        ),
        Row::info(
            "  kubectl / rollguard, from rollout start",
            format!(
                "{:.1}x (with the default 600 s deadline kubectl needs 600 sim-s)",
                k / rg_start
            ),
        ),
    ]
}
