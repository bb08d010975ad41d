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

    let mut verdicts = Vec::new();
    let mut exits = Vec::new();
    let mut from_start = Vec::new();
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

        // Watch the store in-process: when the Deployment appears, start kubectl on it;
        // note the first ImagePullBackOff of one of its pods.
        let mut events = store.subscribe();
        let watch_ns = ns.clone();
        let kc = kubeconfig.clone();
        let kdir = dir.clone();
        let watcher = tokio::spawn(async move {
            let mut seen = Seen::default();
            let mut kubectl_run = None;
            let deadline = Instant::now() + Duration::from_secs(60);
            while seen.backoff.is_none() && Instant::now() < deadline {
                let event = match tokio::time::timeout(Duration::from_secs(1), events.recv()).await
                {
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
                            let mut cmd = Command::new("kubectl");
                            cmd.arg("--kubeconfig")
                                .arg(&kc)
                                .args(["rollout", "status", "deployment/web", "-n"])
                                .arg(&watch_ns)
                                .arg("--timeout=5m")
                                .env("HOME", &kdir);
                            let kdir = kdir.clone();
                            kubectl_run = Some((
                                at,
                                tokio::spawn(async move {
                                    procs::run_measured_async(cmd, Duration::from_secs(120), &kdir)
                                        .await
                                }),
                            ));
                        }
                    }
                    "pods" if is_backoff(&event.object) => {
                        seen.backoff = Some((Instant::now(), jiff::Timestamp::now()));
                    }
                    _ => {}
                }
            }
            (seen, kubectl_run)
        });

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
        let Some(report) = &run.report else {
            problems.push(format!("run {i}: {}", run.problem()));
            continue;
        };
        let Some(target) = report.targets.first() else {
            problems.push(format!("run {i}: report without targets"));
            continue;
        };
        let reason_ok = target
            .failures
            .iter()
            .any(|f| f.reason == "ImagePullBackOff");
        if target.outcome.as_str() != "failed" || !reason_ok {
            problems.push(format!(
                "run {i}: outcome {} with failures {:?}",
                target.outcome.as_str(),
                target
                    .failures
                    .iter()
                    .map(|f| f.reason.as_str())
                    .collect::<Vec<_>>()
            ));
            continue;
        }
        let (Some((backoff_at, backoff_ts)), Some(created)) =
            (seen.backoff, seen.deployment_created)
        else {
            problems.push(format!(
                "run {i}: the bench did not see the ImagePullBackOff"
            ));
            continue;
        };
        let verdict_ns = target.finished_at.as_nanosecond() - backoff_ts.as_nanosecond();
        verdicts.push(verdict_ns as f64 / 1e9);
        exits.push(
            run.finished
                .ended
                .saturating_duration_since(backoff_at)
                .as_secs_f64(),
        );
        let verdict_after_start = (backoff_at - created).as_secs_f64() + verdict_ns as f64 / 1e9;
        from_start.push(verdict_after_start);
    }

    let mut rows = Vec::new();
    if verdicts.is_empty() {
        return Err(DetectError::NoUsableRun(problems.join("; ")));
    }
    let med = median(&verdicts);
    let lo = verdicts.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = verdicts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    rows.push(Row::goal(
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
    ));
    rows.push(Row::info(
        "  ImagePullBackOff -> rollguard process exit, median",
        format!("{:.3} s", median(&exits)),
    ));
    let rg_start = median(&from_start);
    rows.push(Row::info(
        "  rollout start (Deployment created) -> rollguard verdict, median",
        format!("{rg_start:.3} s = {:.1} sim-s", rg_start * TIME_SCALE),
    ));

    if kubectl_runs.is_empty() {
        rows.push(Row::skipped(
            "kubectl rollout status",
            "kubectl is not on the PATH",
        ));
    } else {
        let mut k_start = Vec::new();
        let mut k_backoff = Vec::new();
        let mut k_problems = Vec::new();
        for (backoff_at, (started, handle)) in kubectl_runs {
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
            rows.push(Row::skipped(
                "kubectl rollout status",
                k_problems.join("; "),
            ));
        } else {
            let k = median(&k_start);
            rows.push(Row::info(
                format!(
                    "kubectl rollout status: rollout start -> failure, median of {}",
                    k_start.len()
                ),
                format!(
                    "{k:.2} s = {:.0} sim-s (progressDeadlineSeconds {PROGRESS_DEADLINE})",
                    k * TIME_SCALE
                ),
            ));
            rows.push(Row::info(
                "  ImagePullBackOff -> kubectl verdict, median",
                format!("{:.2} s", median(&k_backoff)),
            ));
            rows.push(Row::info(
                "  kubectl / rollguard, from rollout start",
                format!(
                    "{:.1}x (with the default 600 s deadline kubectl needs 600 sim-s)",
                    k / rg_start
                ),
            ));
        }
    }
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
