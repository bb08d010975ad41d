//! Preflight cost (issue 26): the same 500 objects to one cluster with 5 ms latency,
//! deployed with the preflight dry run (the default) and with `preflight: false`, side by
//! side in one run. Each deploy goes to a namespace of its own on the same cluster, so every
//! object is created by each; the two alternate, twice each, and the faster of each pair
//! counts (the first deploy of a run also warms the cluster's discovery).

use std::path::Path;
use std::time::Duration;

use kube_sim::{Faults, SimOptions};

use crate::support::fixtures::{self, FixtureError, Mix};
use crate::support::table::{Row, secs, why};

const LATENCY_MS: u64 = 5;
const MIX: Mix = Mix {
    config_maps: 200,
    services: 150,
    deployments: 150,
};
/// The goal: a deploy with the preflight takes at most this much longer.
const MAX_EXTRA: f64 = 0.30;
const ROUNDS: usize = 2;

/// Why the preflight figures could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing the config.
    #[error(transparent)]
    Io(std::io::Error),
    /// `problem`: what went wrong (exit code, output).
    #[error("{name}: the deploy did not succeed: {problem}")]
    NotDeployed { name: String, problem: String },
    /// `preflight`: whether the deploy ran with the preflight (and its report had no
    /// preflight phase), or without (and its report had one).
    #[error(
        "{name}: preflight {} but the report {} a preflight phase",
        on_off(.preflight),
        has(.preflight)
    )]
    PreflightPhase { name: String, preflight: bool },
    #[error("no apply phase in the report")]
    NoApplyPhase,
    #[error("no deploy ran")]
    NoDeploy,
}

fn on_off(preflight: &bool) -> &'static str {
    if *preflight { "on" } else { "off" }
}

/// What the report has, of a preflight phase, when it contradicts `preflight`.
fn has(preflight: &bool) -> &'static str {
    if *preflight { "has no" } else { "has" }
}

/// One deploy's figures: whole wall time, its preflight and apply phases.
#[derive(Clone, Copy)]
struct Figures {
    wall: f64,
    preflight: f64,
    apply: f64,
    /// rollguard's CPU seconds.
    cpu: f64,
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match measure(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("preflight", why(&e))],
    }
}

async fn deploy_once(
    scratch: &Path,
    kubeconfig: &Path,
    name: &str,
    preflight: bool,
) -> Result<Figures, PreflightError> {
    let dir = scratch.join(name);
    let image = "example.com/bench/app:v1";
    fixtures::write_app(&dir.join("k8s"), Some(name), MIX, image, 1)?;
    let mut config = fixtures::config("preflight", name, "k8s/", &fixtures::contexts(1), 1, "3m");
    if !preflight {
        config = format!("preflight: false\n{config}");
    }
    std::fs::write(dir.join("rollguard.yaml"), config).map_err(PreflightError::Io)?;
    let run = fixtures::deploy(&dir, kubeconfig, &[], Duration::from_secs(120)).await?;
    if run.count("deployed") != 1 {
        return Err(PreflightError::NotDeployed {
            name: name.to_string(),
            problem: run.problem(),
        });
    }
    let preflight_phase = run.phase_max("preflight");
    if preflight != preflight_phase.is_some() {
        return Err(PreflightError::PreflightPhase {
            name: name.to_string(),
            preflight,
        });
    }
    Ok(Figures {
        wall: run.finished.wall.as_secs_f64(),
        cpu: run.finished.cpu.as_secs_f64(),
        preflight: preflight_phase.unwrap_or(0.0),
        apply: run.phase_max("apply").ok_or(PreflightError::NoApplyPhase)?,
    })
}

fn fastest(runs: &[Figures]) -> Option<Figures> {
    runs.iter()
        .copied()
        .min_by(|a, b| a.wall.total_cmp(&b.wall))
}

async fn measure(scratch: &Path) -> Result<Vec<Row>, PreflightError> {
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: 1,
            time_scale: 10.0,
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    sim.clusters()[0].set_faults(Faults {
        latency_ms: LATENCY_MS,
        ..Faults::default()
    });
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        without.push(deploy_once(scratch, &kubeconfig, &format!("off-{round}"), false).await?);
        with.push(deploy_once(scratch, &kubeconfig, &format!("on-{round}"), true).await?);
    }
    fixtures::stop_sim(sim).await;
    let (Some(on), Some(off)) = (fastest(&with), fastest(&without)) else {
        return Err(PreflightError::NoDeploy);
    };
    let extra = on.wall / off.wall - 1.0;
    Ok(vec![
        Row::goal(
            format!(
                "deploy of {} objects: with the preflight vs without",
                MIX.total()
            ),
            format!("<= +{:.0} % wall", MAX_EXTRA * 100.0),
            format!(
                "{} vs {} = {:+.0} %",
                secs(on.wall),
                secs(off.wall),
                extra * 100.0
            ),
            extra <= MAX_EXTRA,
        ),
        Row::info(
            "  preflight phase beside the apply phase (with the preflight)",
            format!(
                "preflight {} + apply {} (apply without: {}); rollguard CPU {:.2} s vs {:.2} s",
                secs(on.preflight),
                secs(on.apply),
                secs(off.apply),
                on.cpu,
                off.cpu
            ),
        ),
        Row::info(
            "  setup",
            format!(
                "{} ConfigMaps, {} Services, {} Deployments (1 replica), a namespace per deploy; {LATENCY_MS} ms latency; HTTPS; time scale 10; fastest of {ROUNDS} alternating deploys each",
                MIX.config_maps, MIX.services, MIX.deployments
            ),
        ),
    ])
}
