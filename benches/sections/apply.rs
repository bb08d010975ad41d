//! Apply (issue 3): 500 objects to one cluster with 5 ms latency, rollguard vs
//! `kubectl apply --server-side` of the same files, same cluster, same run.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube_sim::faults::{
    DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT, DEFAULT_MAX_REQUESTS_INFLIGHT, THROTTLED,
};
use kube_sim::{Counters, Faults, SimOptions};

use crate::support::fixtures::{self, FixtureError, Mix};
use crate::support::procs::{self, RunError};
use crate::support::table::{Row, secs, why};

/// Why the apply figures could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("kubectl is not on the PATH")]
    NoKubectl,
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing the config.
    #[error(transparent)]
    Io(std::io::Error),
    /// Running kubectl.
    #[error(transparent)]
    Run(#[from] RunError),
    /// What went wrong (exit code, output).
    #[error("rollguard did not deploy: {0}")]
    NotDeployed(String),
    #[error("no apply phase in the report")]
    NoApplyPhase,
    /// The tail of kubectl's output.
    #[error("kubectl apply failed: {0}")]
    Kubectl(String),
}

const LATENCY_MS: u64 = 5;
const MIX: Mix = Mix {
    config_maps: 200,
    services: 150,
    deployments: 150,
};

fn requests(c: &Counters) -> String {
    let by = |v: &str| c.verb(v);
    format!(
        "{} requests (apply {}, get {}, list {}, watch {}, create {})",
        c.total(),
        by("apply"),
        by("get"),
        by("list"),
        by("watch"),
        by("create")
    )
}

/// Requests kube-sim's max-in-flight filter answered 429 (dry runs included).
fn throttled(c: &Counters) -> u64 {
    c.counts
        .iter()
        .filter(|(k, _)| k.verb == THROTTLED)
        .map(|(_, v)| v)
        .sum()
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match measure(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("apply", why(&e))],
    }
}

async fn measure(scratch: &Path) -> Result<Vec<Row>, ApplyError> {
    if !procs::on_path("kubectl") {
        return Err(ApplyError::NoKubectl);
    }
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: 1,
            time_scale: 10.0,
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let cluster = &sim.clusters()[0];
    cluster.set_faults(Faults {
        latency_ms: LATENCY_MS,
        ..Faults::default()
    });
    let image = "example.com/bench/app:v1";
    // The same object files in two folders; only the Namespace object's name differs.
    let rg = scratch.join("rollguard");
    fixtures::write_app(&rg.join("k8s"), Some("rg-apply"), MIX, image, 1)?;
    std::fs::write(
        rg.join("rollguard.yaml"),
        fixtures::config("apply", "rg-apply", "k8s/", &fixtures::contexts(1), 1, "3m"),
    )
    .map_err(ApplyError::Io)?;
    let kc = scratch.join("kubectl");
    fixtures::write_app(&kc, Some("kc-apply"), MIX, image, 1)?;

    cluster.reset_counters();
    let run = fixtures::deploy(&rg, &kubeconfig, &[], Duration::from_secs(120)).await?;
    let rg_counters = cluster.counters();
    if run.count("deployed") != 1 {
        return Err(ApplyError::NotDeployed(run.problem()));
    }
    let apply = run.phase_max("apply").ok_or(ApplyError::NoApplyPhase)?;
    let before_apply: f64 = ["connect", "discover", "lock"]
        .iter()
        .filter_map(|p| run.phase_max(p))
        .sum();

    cluster.reset_counters();
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(scratch.join("kube-cache"))
        .args(["apply", "--server-side", "-n", "kc-apply", "-f"])
        .arg(&kc)
        .env("HOME", scratch);
    let k = procs::run_measured_async(cmd, Duration::from_secs(120), scratch).await?;
    let kc_counters = cluster.counters();
    if k.code != Some(0) {
        return Err(ApplyError::Kubectl(k.tail()));
    }
    let kwall = k.wall.as_secs_f64();
    let ratio = kwall / apply;
    let rows = vec![
        Row::info(
            format!(
                "kubectl apply --server-side, {} objects + Namespace",
                MIX.total()
            ),
            format!("{} wall; {}", secs(kwall), requests(&kc_counters)),
        ),
        Row::goal(
            "rollguard apply phase (report), kubectl wall / rollguard",
            ">= 10 x",
            format!("{} = {ratio:.1} x", secs(apply)),
            ratio >= 10.0,
        ),
        Row::goal(
            "  429s kube-sim answered rollguard (max-in-flight)",
            "0",
            format!(
                "{} (kubectl: {}); limits: the real defaults, {DEFAULT_MAX_REQUESTS_INFLIGHT} reads, {DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT} writes in flight",
                throttled(&rg_counters),
                throttled(&kc_counters)
            ),
            throttled(&rg_counters) == 0,
        ),
        Row::info(
            "  rollguard connect+discover+lock+apply, ratio",
            format!(
                "{} = {:.1} x",
                secs(before_apply + apply),
                kwall / (before_apply + apply)
            ),
        ),
        Row::info(
            "  rollguard whole deploy (incl. wait for 150 Deployments)",
            format!(
                "{} wall; {}",
                secs(run.finished.wall.as_secs_f64()),
                requests(&rg_counters)
            ),
        ),
        Row::info(
            "  setup",
            format!(
                "{} ConfigMaps, {} Services, {} Deployments (1 replica); {LATENCY_MS} ms latency; HTTPS; time scale 10",
                MIX.config_maps, MIX.services, MIX.deployments
            ),
        ),
    ];
    fixtures::stop_sim(sim).await;
    Ok(rows)
}
