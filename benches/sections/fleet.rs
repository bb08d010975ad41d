//! Fleet (issue 3): `rollguard deploy` of a small app to 1, 10 and 50 clusters, each with
//! 20 ms of added latency; and peak memory for 50 clusters x 100 objects.

use std::path::Path;
use std::time::Duration;

use kube_sim::{Faults, Sim, SimOptions};

use crate::support::fixtures::{self, FixtureError, Mix};
use crate::support::table::{Row, mib, secs, why};

/// Why a fleet or memory figure could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing the app's folder, manifests or config.
    #[error(transparent)]
    Io(std::io::Error),
    /// The deploy did not deploy its one target: what went wrong (exit code, output).
    #[error("{0}")]
    NotDeployed(String),
}

const SIZES: [usize; 3] = [1, 10, 50];
const LATENCY_MS: u64 = 20;

async fn start(
    clusters: usize,
    time_scale: f64,
    scratch: &Path,
) -> Result<(Sim, std::path::PathBuf), FixtureError> {
    let options = SimOptions {
        clusters,
        time_scale,
        ..SimOptions::default()
    };
    fixtures::start_sim(options, scratch).await
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match fleet(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("fleet", why(&e))],
    }
}

async fn fleet(scratch: &Path) -> Result<Vec<Row>, FleetError> {
    let (sim, kubeconfig) = start(50, 1.0, scratch).await?;
    for c in sim.clusters() {
        c.set_faults(Faults {
            latency_ms: LATENCY_MS,
            ..Faults::default()
        });
    }
    let mut rows = Vec::new();
    let mut time_one = None;
    for n in SIZES {
        let name = format!("fleet-{n}");
        let dir = scratch.join(&name);
        std::fs::create_dir_all(dir.join("k8s")).map_err(FleetError::Io)?;
        std::fs::write(
            dir.join("k8s/app.yaml"),
            fixtures::small_app(&name, "example.com/shop/web:v1", 2),
        )
        .map_err(FleetError::Io)?;
        std::fs::write(
            dir.join("rollguard.yaml"),
            fixtures::config(&name, &name, "k8s/", &fixtures::contexts(n), n, "2m"),
        )
        .map_err(FleetError::Io)?;
        let run = fixtures::deploy(&dir, &kubeconfig, &[], Duration::from_secs(120)).await?;
        let deployed = run.count("deployed");
        let wall = run.finished.wall.as_secs_f64();
        if deployed != n {
            rows.push(Row::goal(
                format!("{n} cluster(s): wall time of rollguard deploy"),
                format!("{n} deployed"),
                format!(
                    "{deployed} of {n} deployed after {}; {}",
                    secs(wall),
                    run.problem()
                ),
                false,
            ));
            continue;
        }
        let phases = ["connect", "discover", "lock", "apply", "wait"]
            .iter()
            .filter_map(|p| run.phase_max(p).map(|s| format!("{p} {s:.2}")))
            .collect::<Vec<_>>()
            .join(", ");
        match (n, time_one) {
            (1, _) => {
                time_one = Some(wall);
                rows.push(Row::info(
                    "1 cluster: wall time of rollguard deploy",
                    format!("{} (slowest target's phases, s: {phases})", secs(wall)),
                ));
            }
            (_, Some(one)) => {
                let ratio = wall / one;
                let measured = format!(
                    "{} = {ratio:.2} x time(1); peak RSS {}; phases max: {phases}",
                    secs(wall),
                    mib(run.finished.max_rss_kib)
                );
                if n == 50 {
                    rows.push(Row::goal(
                        "50 clusters: wall time / time(1)",
                        "<= 1.5 x",
                        measured,
                        ratio <= 1.5,
                    ));
                } else {
                    rows.push(Row::info(
                        format!("{n} clusters: wall time / time(1)"),
                        measured,
                    ));
                }
            }
            _ => rows.push(Row::skipped(
                format!("{n} clusters"),
                "no time(1) to compare with",
            )),
        }
    }
    rows.push(Row::info(
        "  setup",
        format!(
            "app: Namespace, ConfigMap, Service, Deployment (2 replicas); {LATENCY_MS} ms latency per request; time scale 1; concurrency = number of clusters"
        ),
    ));
    fixtures::stop_sim(sim).await;
    Ok(rows)
}

/// Peak memory of rollguard for 50 clusters x 100 objects.
pub async fn memory(scratch: &Path) -> Vec<Row> {
    match memory_inner(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("peak memory", why(&e))],
    }
}

async fn memory_inner(scratch: &Path) -> Result<Vec<Row>, FleetError> {
    let (sim, kubeconfig) = start(50, 10.0, scratch).await?;
    let dir = scratch.join("memory");
    // 1 Namespace + 99 objects = 100 per cluster.
    let mix = Mix {
        config_maps: 60,
        services: 20,
        deployments: 19,
    };
    fixtures::write_app(
        &dir.join("k8s"),
        Some("mem"),
        mix,
        "example.com/bench/app:v1",
        1,
    )?;
    std::fs::write(
        dir.join("rollguard.yaml"),
        fixtures::config("mem", "mem", "k8s/", &fixtures::contexts(50), 50, "3m"),
    )
    .map_err(FleetError::Io)?;
    let run = fixtures::deploy(&dir, &kubeconfig, &[], Duration::from_secs(150)).await?;
    let deployed = run.count("deployed");
    let peak = run.finished.max_rss_kib;
    let mut rows = vec![Row::goal(
        format!(
            "rollguard peak RSS, 50 clusters x {} objects",
            mix.total() + 1
        ),
        "< 100 MiB",
        format!(
            "{} (VmHWM, /proc every 5 ms; {deployed} of 50 deployed in {})",
            mib(peak),
            secs(run.finished.wall.as_secs_f64())
        ),
        peak < 100 * 1024 && deployed == 50,
    )];
    if deployed != 50 {
        rows.push(Row::info("  problem", run.problem()));
    }
    rows.push(Row::info(
        "  requests and connections per target",
        per_target(sim.clusters()),
    ));
    // Where the memory goes: the same deploy with dryRun=All (no records, no wait).
    let dry = fixtures::deploy(&dir, &kubeconfig, &["--dry-run"], Duration::from_secs(120)).await?;
    rows.push(Row::info(
        "  same with --dry-run (apply only: no records, no wait)",
        format!(
            "{} ({} of 50 deployed)",
            mib(dry.finished.max_rss_kib),
            dry.count("deployed")
        ),
    ));
    fixtures::stop_sim(sim).await;
    rows.extend(connections(scratch).await);
    Ok(rows)
}

/// Requests and connections per target of the clusters' deploy (issue 25.3), averaged
/// over the clusters, from kube-sim's counters.
fn per_target(clusters: &[kube_sim::Cluster]) -> String {
    let n = clusters.len().max(1) as f64;
    let requests: u64 = clusters.iter().map(|c| c.counters().total()).sum();
    let (mut accepted, mut http2) = (0, 0);
    for c in clusters {
        let k = c.connections();
        accepted += k.accepted;
        http2 += k.http2;
    }
    format!(
        "{:.1} requests, {:.2} connections ({:.2} of them HTTP/2)",
        requests as f64 / n,
        accepted as f64 / n,
        http2 as f64 / n
    )
}

/// One target, 100 objects: requests and connections of its deploy over HTTP/2, against a
/// server that offers HTTP/1.1 only, and with the rollguard binary ROLLGUARD_BENCH_BEFORE
/// names (an older build) when set.
async fn connections(scratch: &Path) -> Vec<Row> {
    let before = std::env::var_os(crate::sections::safe::BEFORE_ENV).map(std::path::PathBuf::from);
    let mut cases = vec![
        (
            "this build, server with h2",
            crate::support::procs::rollguard_bin(),
            false,
        ),
        (
            "this build, HTTP/1.1-only server",
            crate::support::procs::rollguard_bin(),
            true,
        ),
    ];
    if let Some(before) = before {
        cases.push(("ROLLGUARD_BENCH_BEFORE, server with h2", before, false));
    }
    let mut rows = Vec::new();
    for (i, (label, binary, http1_only)) in cases.into_iter().enumerate() {
        let metric = format!("  1 target x 100 objects, {label}");
        match one_target(scratch, i, &binary, http1_only).await {
            Ok(measured) => rows.push(Row::info(metric, measured)),
            Err(e) => rows.push(Row::skipped(metric, why(&e))),
        }
    }
    rows
}

async fn one_target(
    scratch: &Path,
    case: usize,
    binary: &Path,
    http1_only: bool,
) -> Result<String, FleetError> {
    let dir = scratch.join(format!("connections-{case}"));
    std::fs::create_dir_all(&dir).map_err(FleetError::Io)?;
    let options = SimOptions {
        clusters: 1,
        time_scale: 10.0,
        http1_only,
        ..SimOptions::default()
    };
    let (sim, kubeconfig) = fixtures::start_sim(options, &dir).await?;
    let mix = Mix {
        config_maps: 60,
        services: 20,
        deployments: 19,
    };
    fixtures::write_app(
        &dir.join("k8s"),
        Some("conn"),
        mix,
        "example.com/bench/app:v1",
        1,
    )?;
    std::fs::write(
        dir.join("rollguard.yaml"),
        fixtures::config("conn", "conn", "k8s/", &fixtures::contexts(1), 1, "2m"),
    )
    .map_err(FleetError::Io)?;
    let run =
        fixtures::deploy_with(binary, &dir, &kubeconfig, &[], Duration::from_secs(60)).await?;
    if run.count("deployed") != 1 {
        return Err(FleetError::NotDeployed(run.problem()));
    }
    let connections = per_target(sim.clusters());
    fixtures::stop_sim(sim).await;
    Ok(connections)
}
