//! Scale (issue 25): `rollguard deploy` of a small app to 1, 10, 50, 200 and 1,000 kube-sim
//! clusters at the default settings (no `concurrency:`: what the memory budget holds), each
//! with 20 ms of added latency; wall time and peak RSS of the rollguard process; the cost per
//! added target; and 50 clusters x 100 objects. kube-sim serves the 1,000 clusters from this
//! process: one listener per cluster on one tokio runtime, one TLS identity for all.

use std::path::Path;
use std::time::{Duration, Instant};

use kube_sim::{Faults, SimOptions};

use crate::support::fixtures::{self, DeployRun, FixtureError, Mix};
use crate::support::procs;
use crate::support::table::{Row, mib, secs, why};

/// Why the scale figures could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// Writing an app's folder, manifests or config.
    #[error(transparent)]
    Io(std::io::Error),
}

const SIZES: [usize; 5] = [1, 10, 50, 200, 1000];
const MOST: usize = 1000;
const LATENCY_MS: u64 = 20;
const LIMIT: Duration = Duration::from_secs(120);

/// File descriptors this process may open: 1,000 listeners and every connection rollguard
/// opens to them are this process's descriptors (and rollguard, a child, inherits the limit).
/// Raises the soft limit to the hard one; returns (before, after).
fn raise_nofile() -> (u64, u64) {
    // SAFETY: plain syscalls on a local, fully initialised struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return (0, 0);
        }
        let before = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return (before, before);
        }
        (before, lim.rlim_max)
    }
}

/// Adds a row and prints it at once: the section can run out of its budget (1,000 targets on
/// a loaded machine), and the table of a section that did is lost.
fn push(rows: &mut Vec<Row>, row: Row) {
    println!(
        "  .. {}: {} [{}] {}",
        row.metric.trim(),
        row.goal,
        row.verdict.word(),
        row.measured
    );
    rows.push(row);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// CPU time of this process (kube-sim's clusters run in it).
fn own_cpu() -> Duration {
    procs::cpu_time(std::process::id()).unwrap_or_default()
}

fn own_rss_kib() -> u64 {
    procs::rss_kib(std::process::id()).map_or(0, |(rss, _)| rss)
}

/// The config the fleet section writes, without its `concurrency:` line: the defaults.
fn default_config(app: &str, n: usize, timeout: &str) -> String {
    fixtures::config(app, app, "k8s/", &fixtures::contexts(n), n, timeout)
        .replace(&format!("concurrency: {n}\n"), "")
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    match scale(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("scale", why(&e))],
    }
}

/// One measured deploy of the small app to the first `n` clusters.
async fn small(
    scratch: &Path,
    kubeconfig: &Path,
    name: &str,
    n: usize,
    extra: &[&str],
) -> Result<DeployRun, ScaleError> {
    let dir = scratch.join(name);
    std::fs::create_dir_all(dir.join("k8s")).map_err(ScaleError::Io)?;
    std::fs::write(
        dir.join("k8s/app.yaml"),
        fixtures::small_app(name, "example.com/shop/web:v1", 2),
    )
    .map_err(ScaleError::Io)?;
    std::fs::write(dir.join("rollguard.yaml"), default_config(name, n, "2m"))
        .map_err(ScaleError::Io)?;
    Ok(fixtures::deploy(&dir, kubeconfig, extra, LIMIT).await?)
}

fn concurrency_of(run: &DeployRun) -> String {
    run.report
        .as_ref()
        .and_then(|r| r.concurrency.as_ref())
        .map_or_else(
            || "concurrency not in the report".into(),
            |c| c.reason.clone(),
        )
}

async fn scale(scratch: &Path) -> Result<Vec<Row>, ScaleError> {
    let mut rows = Vec::new();
    let (nofile_before, nofile) = raise_nofile();
    let rss_before = own_rss_kib();
    let started = Instant::now();
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: MOST,
            time_scale: 1.0,
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let start_time = started.elapsed().as_secs_f64();
    for c in sim.clusters() {
        c.set_faults(Faults {
            latency_ms: LATENCY_MS,
            ..Faults::default()
        });
    }
    let rss_idle = own_rss_kib();
    let fds_idle = open_fds();
    // (n, wall s, peak RSS KiB)
    let mut curve: Vec<(usize, f64, u64)> = Vec::new();
    for n in SIZES {
        let sim_cpu = own_cpu();
        let run = small(scratch, &kubeconfig, &format!("scale-{n}"), n, &[]).await?;
        let sim_cpu = own_cpu().saturating_sub(sim_cpu);
        let deployed = run.count("deployed");
        let wall = run.finished.wall.as_secs_f64();
        let peak = run.finished.max_rss_kib;
        if deployed != n {
            push(
                &mut rows,
                Row::goal(
                    format!("{n} cluster(s), small app"),
                    format!("{n} deployed"),
                    format!(
                        "{deployed} of {n} deployed after {}; {}",
                        secs(wall),
                        run.problem()
                    ),
                    false,
                ),
            );
            continue;
        }
        curve.push((n, wall, peak));
        let one = curve.first().filter(|c| c.0 == 1).map(|c| c.1);
        for row in size_rows(n, &run, sim_cpu, one) {
            push(&mut rows, row);
        }
    }
    if let Some(row) = cost_row(&curve) {
        push(&mut rows, row);
    }
    if curve.last().is_some_and(|c| c.0 == MOST) {
        rows.extend(reads(scratch, &kubeconfig).await?);
    }
    // Every target in flight at once: the memory of one target in flight, from which
    // engine::budget's constants come.
    let all = small(
        scratch,
        &kubeconfig,
        "scale-all",
        MOST,
        &["--concurrency", "1000"],
    )
    .await?;
    push(
        &mut rows,
        all_in_flight_row(&all, curve.first().map_or(0, |c| c.2)),
    );
    rows.extend(hundred_objects(scratch, &kubeconfig).await?);
    push(
        &mut rows,
        Row::info(
            "  kube-sim (this process)",
            format!(
                "{MOST} clusters started in {}; RSS {} before, {} with {MOST} idle clusters ({:.1} KiB each), {} at the end; {} open fds idle, {} at the end; RLIMIT_NOFILE soft {} -> {} (raised by the bench)",
                secs(start_time),
                mib(rss_before),
                mib(rss_idle),
                rss_idle.saturating_sub(rss_before) as f64 / MOST as f64,
                mib(own_rss_kib()),
                fds_idle,
                open_fds(),
                nofile_before,
                nofile
            ),
        ),
    );
    push(
        &mut rows,
        Row::info(
            "  setup",
            format!(
                "small app: Namespace, ConfigMap, Service, Deployment (2 replicas); {LATENCY_MS} ms latency per request; HTTPS; time scale 1; default settings (no concurrency set); kube-sim in-process: one listener per cluster on one runtime, one TLS identity"
            ),
        ),
    );
    // Freed here, not by the runtime's workers while the next section runs (it slowed the
    // apply section's discovery from 0.6 s to 3 s).
    let stopping = Instant::now();
    fixtures::stop_sim(sim).await;
    push(
        &mut rows,
        Row::info(
            "  kube-sim stopped",
            format!(
                "{MOST} clusters stopped and freed in {}, before the next section",
                secs(stopping.elapsed().as_secs_f64())
            ),
        ),
    );
    Ok(rows)
}

/// One fleet size's rows: its wall time against one cluster's (`one`), with the floor that
/// both processes' CPU puts under it beside it; at 1,000 also the peak RSS goal.
fn size_rows(n: usize, run: &DeployRun, sim_cpu: Duration, one: Option<f64>) -> Vec<Row> {
    let wall = run.finished.wall.as_secs_f64();
    let peak = run.finished.max_rss_kib;
    let ratio = one.map_or(f64::NAN, |one| wall / one);
    // Rollguard and the simulated clusters share the machine's CPUs: their CPU time
    // over the CPUs is a floor under the wall time that no schedule goes below.
    let cpu = run.finished.cpu.as_secs_f64() + sim_cpu.as_secs_f64();
    let cpus = procs::nproc().max(1);
    let floor = cpu / cpus as f64;
    let measured = format!(
        "{} = {ratio:.2} x wall(1); peak RSS {}; CPU rollguard {:.2} s, kube-sim {:.2} s (over {} CPUs: {} = {:.2} x wall(1)); {}",
        secs(wall),
        mib(peak),
        run.finished.cpu.as_secs_f64(),
        sim_cpu.as_secs_f64(),
        cpus,
        secs(floor),
        one.map_or(f64::NAN, |one| floor / one),
        concurrency_of(run)
    );
    let metric = format!("{n} cluster(s), small app: wall / wall(1)");
    let mut rows = vec![match n {
        200 => Row::goal(metric, "<= 1.5 x", measured, ratio <= 1.5),
        1000 => Row::goal(metric, "<= 3 x", measured, ratio <= 3.0),
        _ => Row::info(metric, measured),
    }];
    if n == MOST {
        rows.push(Row::goal(
            "  1000 clusters, small app: rollguard peak RSS",
            "<= 256 MiB",
            mib(peak),
            peak <= 256 * 1024,
        ));
    }
    rows
}

/// Every target in flight at once, beside one cluster's peak (`one_peak`, KiB): the memory
/// of a target in flight.
fn all_in_flight_row(all: &DeployRun, one_peak: u64) -> Row {
    Row::info(
        "  1000 clusters, --concurrency 1000 (all in flight)",
        format!(
            "{} of 1000 deployed in {}; peak RSS {} = {:.3} MiB per target over 1 cluster's",
            all.count("deployed"),
            secs(all.finished.wall.as_secs_f64()),
            mib(all.finished.max_rss_kib),
            (all.finished.max_rss_kib as f64 - one_peak as f64) / 1024.0 / 999.0
        ),
    )
}

/// The cost of each target added from the first size of the curve (n, wall s, peak KiB) to
/// its last.
fn cost_row(curve: &[(usize, f64, u64)]) -> Option<Row> {
    let (first, last) = (curve.first()?, curve.last()?);
    if last.0 <= first.0 {
        return None;
    }
    let added = (last.0 - first.0) as f64;
    Some(Row::info(
        format!("  cost per added target ({} -> {})", first.0, last.0),
        format!(
            "{:.2} ms and {:.3} MiB per target (wall {} -> {}, peak RSS {} -> {})",
            (last.1 - first.1) * 1000.0 / added,
            (last.2 as f64 - first.2 as f64) / 1024.0 / added,
            secs(first.1),
            secs(last.1),
            mib(first.2),
            mib(last.2)
        ),
    ))
}

/// `rollguard status` and `history` of the 1,000 targets just deployed (one revision each):
/// the read-only commands at the fleet's size.
async fn reads(scratch: &Path, kubeconfig: &Path) -> Result<Vec<Row>, ScaleError> {
    let dir = scratch.join(format!("scale-{MOST}"));
    let mut rows = Vec::new();
    for command in ["status", "history"] {
        let mut cmd = std::process::Command::new(procs::rollguard_bin());
        cmd.arg(command)
            .arg("--config")
            .arg(dir.join("rollguard.yaml"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG")
            .env_remove("ROLLGUARD_CONFIG");
        let run = procs::run_measured_async(cmd, LIMIT, &dir)
            .await
            .map_err(FixtureError::from)?;
        // One line per target says its revision "deployed" (a row, or a history entry).
        let said = run
            .stdout
            .lines()
            .filter(|l| l.contains("deployed"))
            .count();
        push(
            &mut rows,
            Row::info(
                format!("  rollguard {command}, {MOST} targets"),
                format!(
                    "{}, peak RSS {} (exit {}; {said} of {MOST} targets' lines say deployed)",
                    secs(run.wall.as_secs_f64()),
                    mib(run.max_rss_kib),
                    run.code
                        .map_or_else(|| "by a signal".into(), |c| c.to_string()),
                ),
            ),
        );
    }
    Ok(rows)
}

/// 50 clusters x 100 objects at the defaults, with the same latency.
async fn hundred_objects(scratch: &Path, kubeconfig: &Path) -> Result<Vec<Row>, ScaleError> {
    let dir = scratch.join("scale-objects");
    // 1 Namespace + 99 objects = 100 per cluster.
    let mix = Mix {
        config_maps: 60,
        services: 20,
        deployments: 19,
    };
    fixtures::write_app(
        &dir.join("k8s"),
        Some("scale-objects"),
        mix,
        "example.com/bench/app:v1",
        1,
    )?;
    std::fs::write(
        dir.join("rollguard.yaml"),
        default_config("scale-objects", 50, "3m"),
    )
    .map_err(ScaleError::Io)?;
    let run = fixtures::deploy(&dir, kubeconfig, &[], LIMIT).await?;
    let deployed = run.count("deployed");
    let peak = run.finished.max_rss_kib;
    let mut rows = Vec::new();
    push(
        &mut rows,
        Row::goal(
            "50 clusters x 100 objects: rollguard peak RSS",
            "<= 64 MiB",
            format!(
                "{} ({deployed} of 50 deployed in {}; {})",
                mib(peak),
                secs(run.finished.wall.as_secs_f64()),
                concurrency_of(&run)
            ),
            peak <= 64 * 1024 && deployed == 50,
        ),
    );
    if deployed != 50 {
        push(&mut rows, Row::info("  problem", run.problem()));
    }
    Ok(rows)
}
