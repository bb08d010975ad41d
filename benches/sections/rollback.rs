//! Rollback (issue 4): a bad deploy to three clusters (its image cannot be pulled in one),
//! under the default policy rollback-all: time from the deploy's start to every target
//! rolled back and healthy, and the API requests it took.

use std::path::Path;
use std::time::Duration;

use kube_sim::rules::{Behaviour, Rule};
use kube_sim::{Counters, SimOptions};

use crate::support::fixtures::{self, FixtureError};
use crate::support::table::{Row, secs, why};

/// Why the rollback figures could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing the app's folder, manifests or config.
    #[error(transparent)]
    Io(std::io::Error),
    /// What went wrong (exit code, output).
    #[error("the first (good) deploy did not succeed: {0}")]
    GoodDeploy(String),
}

const GOOD: &str = "example.com/shop/web:v1";
const BAD: &str = "example.com/shop/web:v2";
const REPLICAS: u32 = 3;

fn sum(counters: &[Counters]) -> Counters {
    let mut all = Counters::default();
    for c in counters {
        for (k, v) in &c.counts {
            *all.counts.entry(k.clone()).or_default() += v;
        }
    }
    all
}

fn describe(c: &Counters) -> String {
    let mut verbs: Vec<String> = [
        "get", "list", "watch", "apply", "create", "update", "patch", "delete",
    ]
    .iter()
    .filter(|v| c.verb(v) > 0)
    .map(|v| format!("{v} {}", c.verb(v)))
    .collect();
    let known: u64 = [
        "get", "list", "watch", "apply", "create", "update", "patch", "delete",
    ]
    .iter()
    .map(|v| c.verb(v))
    .sum();
    if c.total() > known {
        verbs.push(format!("other {}", c.total() - known));
    }
    format!(
        "{} ({}; writes {})",
        c.total(),
        verbs.join(", "),
        c.writes()
    )
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match measure(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("rollback", why(&e))],
    }
}

async fn measure(scratch: &Path) -> Result<Vec<Row>, RollbackError> {
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: 3,
            time_scale: 1.0,
            rules: vec![Rule {
                cluster: Some("sim-2".into()),
                image: BAD.into(),
                behaviour: Behaviour::ImagePullBackOff,
                times: None,
                message: None,
                after: None,
                logs: None,
                exit_code: None,
            }],
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let dir = scratch.join("shop");
    std::fs::create_dir_all(dir.join("k8s")).map_err(RollbackError::Io)?;
    std::fs::write(
        dir.join("rollguard.yaml"),
        fixtures::config("shop", "shop", "k8s/", &fixtures::contexts(3), 3, "2m"),
    )
    .map_err(RollbackError::Io)?;

    std::fs::write(
        dir.join("k8s/app.yaml"),
        fixtures::small_app("shop", GOOD, REPLICAS),
    )
    .map_err(RollbackError::Io)?;
    for c in sim.clusters() {
        c.reset_counters();
    }
    let good = fixtures::deploy(&dir, &kubeconfig, &[], Duration::from_secs(120)).await?;
    if good.count("deployed") != 3 {
        return Err(RollbackError::GoodDeploy(good.problem()));
    }
    let good_counters = sum(&sim
        .clusters()
        .iter()
        .map(|c| c.counters())
        .collect::<Vec<_>>());

    std::fs::write(
        dir.join("k8s/app.yaml"),
        fixtures::small_app("shop", BAD, REPLICAS),
    )
    .map_err(RollbackError::Io)?;
    for c in sim.clusters() {
        c.reset_counters();
    }
    let bad = fixtures::deploy(&dir, &kubeconfig, &[], Duration::from_secs(150)).await?;
    let bad_counters = sum(&sim
        .clusters()
        .iter()
        .map(|c| c.counters())
        .collect::<Vec<_>>());

    // Healthy means: the Deployment runs the good image again and all its replicas are
    // updated, ready and available, as the cluster itself says after rollguard exits.
    let mut healthy = 0;
    let mut states = Vec::new();
    for c in sim.clusters() {
        let (ok, state) = fixtures::deployment_healthy(&c.store(), "shop", "web", GOOD, REPLICAS);
        if ok {
            healthy += 1;
        }
        states.push(format!("{}: {state}", c.name()));
    }
    let rolled_back = bad.count("rolled-back");
    let mut rows = vec![
        Row::goal(
            "bad deploy -> every target rolled back and healthy",
            "3 of 3",
            format!(
                "{rolled_back} rolled-back, {healthy} healthy on {GOOD}; exit {}",
                bad.finished.code.map_or("signal".into(), |c| c.to_string())
            ),
            rolled_back == 3 && healthy == 3,
        ),
        Row::info(
            "  time from the bad deploy's start to the end (process wall)",
            secs(bad.finished.wall.as_secs_f64()),
        ),
        Row::info(
            "  API requests of the bad deploy + rollback, 3 clusters",
            describe(&bad_counters),
        ),
        Row::info(
            "  for comparison: the good deploy before it",
            format!(
                "{} wall; {} requests",
                secs(good.finished.wall.as_secs_f64()),
                good_counters.total()
            ),
        ),
        Row::info(
            "  setup",
            format!(
                "small app, Deployment of {REPLICAS} replicas; {BAD} cannot be pulled on sim-2; on_failure rollback-all (default); time scale 1"
            ),
        ),
    ];
    if rolled_back != 3 || healthy != 3 {
        rows.push(Row::info("  cluster state", states.join("; ")));
        rows.push(Row::info("  rollguard", bad.problem()));
    }
    fixtures::stop_sim(sim).await;
    Ok(rows)
}
