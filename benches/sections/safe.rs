//! Time to safe state (issue 22): a bad deploy under `on_failure: rollback-all` to a fleet
//! of 3 and of 50 in which one cluster cannot pull the new image and another rolls it out
//! healthily but slowly (about 60 simulated seconds). Measured from the first pod event with
//! ImagePullBackOff on the bad cluster to every target rolled back and healthy (the latest
//! `finished_at` in the JSON report, same wall clock), beside the bad cluster's own rollback
//! (its `rollback` phase). With ROLLGUARD_BENCH_BEFORE set to another rollguard binary (an
//! older build), the same scenario runs with it too and its figures print beside these.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube_sim::rules::{Behaviour, Rule};
use kube_sim::{EventKind, SimOptions};
use rollguard::report::Report;

use crate::support::fixtures::{self, FixtureError};
use crate::support::procs;
use crate::support::table::{Row, Verdict, secs, why};

const GOOD: &str = "example.com/shop/web:v1";
const BAD: &str = "example.com/shop/web:v2";
const REPLICAS: u32 = 3;
/// Simulated seconds per real second: the slow rollout's 60 sim-s take 6 s.
pub const TIME_SCALE: f64 = 10.0;
/// How long each of the slow cluster's new pods takes to be Ready (simulated seconds). The
/// rolling update (maxSurge 1, maxUnavailable 0 for 3 replicas) starts them one at a time,
/// so the rollout takes 3 x (0.5 + 20) = 61.5 simulated seconds: the 60 s rollout.
const SLOW_READY_SECS: u64 = 20;
/// The slow cluster's whole v2 rollout (simulated seconds), for the labels.
const SLOW_ROLLOUT_SECS: f64 = 61.5;
/// The cluster whose new image cannot be pulled (target t2) and the slow one (target t3).
const BAD_CLUSTER: &str = "sim-2";
const SLOW_CLUSTER: &str = "sim-3";
const FLEETS: [usize; 2] = [3, 50];
/// The goal's allowance over the bad cluster's own rollback.
const ALLOWANCE_SECS: f64 = 1.0;
/// The variable naming the rollguard binary of the "before" column.
pub const BEFORE_ENV: &str = "ROLLGUARD_BENCH_BEFORE";

/// Why a time-to-safe-state figure could not be measured, or the before column's binary
/// could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SafeError {
    #[error(
        "{BEFORE_ENV}={} is not a file; point it at a built rollguard binary",
        .0.display()
    )]
    BeforeNotAFile(PathBuf),
    #[error("{}", .path.display())]
    Scratch {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing the app's folder, manifests or config.
    #[error(transparent)]
    Io(std::io::Error),
    /// What went wrong (exit code, output).
    #[error("the first (good) deploy did not succeed: {0}")]
    GoodDeploy(String),
    #[error("no bad cluster")]
    NoBadCluster,
    #[error("the bench saw no ImagePullBackOff on the bad cluster")]
    NoBackoff,
    /// What went wrong (exit code, output).
    #[error("bad deploy: {0}")]
    BadDeploy(String),
    #[error("the report has no target {0}")]
    NoTarget(String),
    #[error("the bad target {name} has no rollback phase (outcome {outcome})")]
    NoRollbackPhase { name: String, outcome: String },
    #[error("the report has no targets")]
    NoTargets,
}

/// What one bad deploy did, from the bench's view and the report.
struct Outcome {
    /// First ImagePullBackOff on the bad cluster -> the last target's `finished_at`.
    safe: f64,
    /// The bad target's `rollback` phase.
    own_rollback: f64,
    /// First ImagePullBackOff -> the bad target's rollback started (detection and decision).
    /// None when the build's report does not record when a rollback started (older builds).
    decided: Option<f64>,
    /// First ImagePullBackOff -> the first and the last other target's rollback started.
    others_started: Option<(f64, f64)>,
    /// The longest rollback of another target (its start -> its `finished_at`).
    others_longest: Option<f64>,
    /// First ImagePullBackOff -> the slow target's `finished_at`, and its outcome.
    slow_done: f64,
    slow_outcome: String,
    targets: usize,
    rolled_back: usize,
    healthy: usize,
    /// Clusters not healthy on the good image afterwards (first few).
    unhealthy: Vec<String>,
    exit: Option<i32>,
    wall: f64,
    /// CPU seconds during the bad deploy: rollguard's, and the bench process's (which hosts
    /// the simulated clusters).
    cpu_rollguard: f64,
    cpu_sim: f64,
}

impl Outcome {
    fn all_safe(&self) -> bool {
        self.rolled_back == self.targets && self.healthy == self.targets
    }

    fn limit(&self) -> f64 {
        self.own_rollback + ALLOWANCE_SECS
    }
}

fn is_backoff(pod: &serde_json::Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["state"]["waiting"]["reason"] == "ImagePullBackOff")
        })
}

fn rules() -> Vec<Rule> {
    vec![
        Rule {
            cluster: Some(BAD_CLUSTER.into()),
            image: BAD.into(),
            behaviour: Behaviour::ImagePullBackOff,
            times: None,
            message: None,
            after: None,
            logs: None,
            exit_code: None,
        },
        Rule {
            cluster: Some(SLOW_CLUSTER.into()),
            image: BAD.into(),
            behaviour: Behaviour::SlowStart,
            times: None,
            message: None,
            after: Some(Duration::from_secs(SLOW_READY_SECS)),
            logs: None,
            exit_code: None,
        },
    ]
}

fn config(fleet: usize) -> String {
    // Every target takes part at once, so every one receives the new revision.
    fixtures::config(
        "shop",
        "shop",
        "k8s/",
        &fixtures::contexts(fleet),
        fleet,
        "3m",
    )
    .replacen("targets:\n", "on_failure: rollback-all\ntargets:\n", 1)
}

/// The rollguard binary of the "before" column: Ok(None) when the variable is not set.
fn before_bin() -> Result<Option<PathBuf>, SafeError> {
    match std::env::var_os(BEFORE_ENV) {
        None => Ok(None),
        Some(p) if p.is_empty() => Ok(None),
        Some(p) => {
            let path = PathBuf::from(p);
            if path.is_file() {
                Ok(Some(path))
            } else {
                Err(SafeError::BeforeNotAFile(path))
            }
        }
    }
}

/// `rollguard --version` of a binary, for the column's label.
fn version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "version unknown".into())
}

/// A good deploy then the bad one, on fresh clusters, with `bin`.
async fn scenario(bin: &Path, fleet: usize, scratch: &Path) -> Result<Outcome, SafeError> {
    std::fs::create_dir_all(scratch).map_err(|source| SafeError::Scratch {
        path: scratch.to_path_buf(),
        source,
    })?;
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: fleet,
            time_scale: TIME_SCALE,
            rules: rules(),
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let dir = scratch.join("shop");
    std::fs::create_dir_all(dir.join("k8s")).map_err(SafeError::Io)?;
    std::fs::write(dir.join("rollguard.yaml"), config(fleet)).map_err(SafeError::Io)?;
    let app = dir.join("k8s/app.yaml");
    std::fs::write(&app, fixtures::small_app("shop", GOOD, REPLICAS)).map_err(SafeError::Io)?;
    let good = fixtures::deploy_with(bin, &dir, &kubeconfig, &[], Duration::from_secs(120)).await?;
    if good.count("deployed") != fleet {
        return Err(SafeError::GoodDeploy(good.problem()));
    }

    std::fs::write(&app, fixtures::small_app("shop", BAD, REPLICAS)).map_err(SafeError::Io)?;
    let bad_cluster = sim
        .clusters()
        .iter()
        .find(|c| c.name() == BAD_CLUSTER)
        .ok_or(SafeError::NoBadCluster)?;
    let mut events = bad_cluster.store().subscribe();
    let watcher = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let event = match tokio::time::timeout(Duration::from_secs(1), events.recv()).await {
                Ok(Ok(e)) => e,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) | Err(_) => continue,
                Ok(Err(_)) => break,
            };
            if event.kind != EventKind::Deleted
                && event.resource.resource == "pods"
                && event.object["metadata"]["namespace"] == "shop"
                && is_backoff(&event.object)
            {
                return Some(jiff::Timestamp::now());
            }
        }
        None
    });
    let sim_cpu = || procs::cpu_time(std::process::id()).unwrap_or_default();
    let cpu_before = sim_cpu();
    let run = fixtures::deploy_with(bin, &dir, &kubeconfig, &[], Duration::from_secs(150)).await?;
    let cpu_sim = (sim_cpu().saturating_sub(cpu_before)).as_secs_f64();
    watcher.abort();
    let backoff = match watcher.await {
        Ok(Some(at)) => at,
        _ => return Err(SafeError::NoBackoff),
    };
    let Some(report) = &run.report else {
        return Err(SafeError::BadDeploy(run.problem()));
    };
    let mut outcome = measure(report, backoff, &run, &sim, fleet)?;
    outcome.cpu_sim = cpu_sim;
    fixtures::stop_sim(sim).await;
    Ok(outcome)
}

fn since(backoff: jiff::Timestamp, at: jiff::Timestamp) -> f64 {
    (at.as_nanosecond() - backoff.as_nanosecond()) as f64 / 1e9
}

fn measure(
    report: &Report,
    backoff: jiff::Timestamp,
    run: &fixtures::DeployRun,
    sim: &kube_sim::Sim,
    fleet: usize,
) -> Result<Outcome, SafeError> {
    let target = |context: &str| {
        let name = format!("t{}", context.trim_start_matches("sim-"));
        report
            .targets
            .iter()
            .find(|t| t.name == name)
            .ok_or(SafeError::NoTarget(name))
    };
    let bad = target(BAD_CLUSTER)?;
    let slow = target(SLOW_CLUSTER)?;
    let own_rollback = bad
        .phases
        .iter()
        .filter(|p| p.name == "rollback")
        .map(|p| p.seconds)
        .reduce(f64::max)
        .ok_or_else(|| SafeError::NoRollbackPhase {
            name: bad.name.clone(),
            outcome: bad.outcome.as_str().to_string(),
        })?;
    let started = |t: &rollguard::report::TargetReport| {
        t.rollback
            .as_ref()
            .and_then(|r| r.started_at)
            .map(|at| since(backoff, at))
    };
    let decided = started(bad);
    let others: Vec<(f64, f64)> = report
        .targets
        .iter()
        .filter(|t| t.name != bad.name)
        .filter_map(|t| started(t).map(|s| (s, since(backoff, t.finished_at) - s)))
        .collect();
    let others_started = (!others.is_empty()).then(|| {
        others
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), (s, _)| {
                (lo.min(*s), hi.max(*s))
            })
    });
    let others_longest = others.iter().map(|(_, d)| *d).reduce(f64::max);
    let last = report
        .targets
        .iter()
        .map(|t| t.finished_at)
        .max()
        .ok_or(SafeError::NoTargets)?;
    let mut healthy = 0;
    let mut unhealthy = Vec::new();
    for c in sim.clusters() {
        let (ok, state) = fixtures::deployment_healthy(&c.store(), "shop", "web", GOOD, REPLICAS);
        if ok {
            healthy += 1;
        } else if unhealthy.len() < 3 {
            unhealthy.push(format!("{}: {state}", c.name()));
        }
    }
    Ok(Outcome {
        safe: since(backoff, last),
        own_rollback,
        decided,
        others_started,
        others_longest,
        slow_done: since(backoff, slow.finished_at),
        slow_outcome: slow.outcome.as_str().to_string(),
        targets: fleet,
        rolled_back: run.count("rolled-back"),
        healthy,
        unhealthy,
        exit: run.finished.code,
        wall: run.finished.wall.as_secs_f64(),
        cpu_rollguard: run.finished.cpu.as_secs_f64(),
        cpu_sim: 0.0,
    })
}

/// For a figure the build's report has no timestamps for (an older build's report does not
/// say when each rollback started).
fn not_recorded() -> String {
    "not in this build's report".into()
}

fn started_range(o: &Outcome) -> String {
    o.others_started.map_or_else(not_recorded, |(first, last)| {
        format!("{} - {}", secs(first), secs(last))
    })
}

fn sim_s(real: f64) -> String {
    format!("{} = {:.1} sim-s", secs(real), real * TIME_SCALE)
}

/// One line of the table with an "after" and a "before" figure, padded into two columns
/// when the section's rows are put together.
struct Line {
    metric: String,
    goal: String,
    after: String,
    before: String,
    verdict: Verdict,
}

fn line(metric: &str, after: String, before: String) -> Line {
    Line {
        metric: metric.into(),
        goal: "-".into(),
        after,
        before,
        verdict: Verdict::Info,
    }
}

/// The rows of one fleet size; `before` is None when the before column is not run.
fn fleet_lines(
    fleet: usize,
    after: &Result<Outcome, SafeError>,
    before: Option<&Result<Outcome, SafeError>>,
) -> Vec<Line> {
    let after = Some(after);
    let figure = |r: Option<&Result<Outcome, SafeError>>, f: &dyn Fn(&Outcome) -> String| match r {
        Some(Ok(o)) => f(o),
        Some(Err(e)) => why(e),
        None => "-".into(),
    };
    let safe = |o: &Outcome| {
        format!(
            "{} ({} limit {})",
            sim_s(o.safe),
            if o.all_safe() && o.safe <= o.limit() {
                "within"
            } else {
                "past"
            },
            secs(o.limit())
        )
    };
    let mut head = line(
        &format!("fleet of {fleet}: first ImagePullBackOff -> all rolled back and healthy"),
        figure(after, &safe),
        figure(before, &safe),
    );
    head.goal = format!("<= own rollback + {ALLOWANCE_SECS:.0} s");
    head.verdict = match after {
        Some(Ok(o)) => Verdict::of(o.all_safe() && o.safe <= o.limit()),
        _ => Verdict::Skipped,
    };
    let mut lines = vec![head];
    if !matches!(after, Some(Ok(_))) && !matches!(before, Some(Ok(_))) {
        return lines;
    }
    lines.push(line(
        "  the bad cluster's own rollback (its rollback phase)",
        figure(after, &|o| sim_s(o.own_rollback)),
        figure(before, &|o| sim_s(o.own_rollback)),
    ));
    lines.push(line(
        "  the bad cluster's rollback decided (its rollback started)",
        figure(after, &|o| o.decided.map_or_else(not_recorded, sim_s)),
        figure(before, &|o| o.decided.map_or_else(not_recorded, sim_s)),
    ));
    lines.push(line(
        "  the other targets' rollbacks started (first - last)",
        figure(after, &started_range),
        figure(before, &started_range),
    ));
    lines.push(line(
        "  the longest other rollback (started -> healthy)",
        figure(after, &|o| {
            o.others_longest.map_or_else(not_recorded, sim_s)
        }),
        figure(before, &|o| {
            o.others_longest.map_or_else(not_recorded, sim_s)
        }),
    ));
    lines.push(line(
        &format!("  slow cluster ({SLOW_CLUSTER}, v2 rollout {SLOW_ROLLOUT_SECS} sim-s): done"),
        figure(after, &|o| {
            format!("{}, {}", sim_s(o.slow_done), o.slow_outcome)
        }),
        figure(before, &|o| {
            format!("{}, {}", sim_s(o.slow_done), o.slow_outcome)
        }),
    ));
    let state = |o: &Outcome| {
        let mut s = format!(
            "{} of {} rolled back, {} healthy on v1; exit {}",
            o.rolled_back,
            o.targets,
            o.healthy,
            o.exit.map_or("signal".into(), |c| c.to_string())
        );
        if !o.unhealthy.is_empty() {
            s.push_str(&format!(" ({})", o.unhealthy.join("; ")));
        }
        s
    };
    lines.push(line(
        "  targets rolled back and healthy afterwards",
        figure(after, &state),
        figure(before, &state),
    ));
    lines.push(line(
        "  bad deploy's process wall time",
        figure(after, &|o| secs(o.wall)),
        figure(before, &|o| secs(o.wall)),
    ));
    let cpu = |o: &Outcome| {
        format!(
            "rollguard {:.2} s, kube-sim {:.2} s",
            o.cpu_rollguard, o.cpu_sim
        )
    };
    lines.push(line(
        "  CPU during the bad deploy (the clusters share the machine)",
        figure(after, &cpu),
        figure(before, &cpu),
    ));
    lines
}

/// Pads the after figures into one column, the before figures beside them (a line without
/// a before figure is not padded).
fn rows(lines: Vec<Line>) -> Vec<Row> {
    let width = lines
        .iter()
        .filter(|l| !l.before.is_empty())
        .map(|l| l.after.chars().count())
        .max()
        .unwrap_or(0);
    lines
        .into_iter()
        .map(|l| Row {
            measured: if l.before.is_empty() {
                l.after
            } else {
                format!("{:<width$} | {}", l.after, l.before)
            },
            metric: l.metric,
            goal: l.goal,
            verdict: l.verdict,
        })
        .collect()
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    let now = procs::rollguard_bin();
    let before = before_bin();
    let before_label = match &before {
        Ok(Some(bin)) => format!("before: {} ({})", bin.display(), version(bin)),
        Ok(None) => format!("before: not run (set {BEFORE_ENV})"),
        Err(e) => format!("before: not run ({})", why(e)),
    };
    let mut lines = vec![line(
        "engine",
        format!("after: this build ({})", version(&now)),
        before_label,
    )];
    let mut afters = Vec::new();
    for fleet in FLEETS {
        let after = scenario(&now, fleet, &scratch.join(format!("after-{fleet}"))).await;
        let before_run = match &before {
            Ok(Some(bin)) => {
                Some(scenario(bin, fleet, &scratch.join(format!("before-{fleet}"))).await)
            }
            Ok(None) | Err(_) => None,
        };
        lines.extend(fleet_lines(fleet, &after, before_run.as_ref()));
        afters.push(after);
    }
    if let [Ok(small), Ok(big)] = afters.as_slice() {
        lines.push(line(
            "  after: time to safe state, fleet of 50 - fleet of 3",
            format!("{:+.3} s", big.safe - small.safe),
            String::new(),
        ));
    }
    lines.push(line(
        "  setup",
        format!(
            "Deployment of {REPLICAS} replicas, v1 then v2; v2 unpullable on {BAD_CLUSTER}, pods Ready {SLOW_READY_SECS} sim-s after start on {SLOW_CLUSTER} (rollout {SLOW_ROLLOUT_SECS} sim-s); rollback-all; concurrency = fleet; time scale {TIME_SCALE}; fresh clusters per run"
        ),
        String::new(),
    ));
    rows(lines)
}
