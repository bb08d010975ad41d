//! The rollguard binary: parse, set up logging, run, map the result to an exit code.

use clap::Parser;
use rollguard::cli::Cli;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// Upper bound on the async runtime's worker threads.
const MAX_WORKERS: usize = 4;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let args: Vec<String> = std::env::args().collect();
            // --help and --version are not refusals.
            let code = if e.use_stderr() {
                rollguard::error::exit::refused_command_line(&args)
            } else {
                e.exit_code()
            };
            std::process::exit(code);
        }
    };
    // Logs go to stderr (stdout carries the final table). Without RUST_LOG only rollguard's
    // own lines (report/log_filter.rs); RUST_LOG replaces that filter.
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stderr_layer = tracing_subscriber::fmt::layer()
        // Every event is scrubbed of the secret values the run knows before it is written.
        .with_writer(rollguard::report::redact::ScrubbingStderr)
        .with_ansi(rollguard::report::progress::color_allowed(
            stderr_is_terminal,
            std::env::var("TERM").ok().as_deref(),
            std::env::var("NO_COLOR").ok().as_deref(),
        ));
    let stderr_layer = match EnvFilter::try_from_default_env() {
        Ok(filter) => stderr_layer.with_filter(filter).boxed(),
        Err(_) => stderr_layer
            .with_filter(rollguard::report::log_filter::default_filter(
                stderr_is_terminal,
            ))
            .boxed(),
    };
    // Each target's info lines are also kept, whatever stderr shows, for the per-target log
    // groups at the end of a GitHub Actions run.
    let capture = rollguard::github::logs::capture_layer()
        .with_filter(Targets::new().with_target("rollguard", tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(stderr_layer)
        .with(capture)
        .init();
    // The work is waiting on clusters; more than a few workers only add per-thread malloc
    // arenas (measured on 2 cores, 50 targets: peak 84 MiB with 2 workers, 87 with 4, 99
    // with 8).
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(MAX_WORKERS));
    rollguard::util::memory::cap_malloc_arenas(workers);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rollguard: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    rollguard::error::install_panic_hook();
    // A grandchild that leaves its script's process group (setsid) and outlives its parent
    // becomes rollguard's child, so it can still be found and killed.
    rollguard::util::process_group::become_subreaper();
    let code = rollguard::commands::run_blocking(&runtime, cli);
    // Watches and renewals may still hold tasks: do not wait for them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    // Nothing rollguard started outlives it.
    rollguard::util::process_group::kill_leftovers();
    rollguard::stages::kubeconfig::remove_all_now();
    std::process::exit(code);
}
