//! `kube-sim serve`: runs simulated clusters until SIGTERM/SIGINT.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube_sim::{Faults, Sim, SimOptions};

/// The allocator made for processes that host simulated clusters (see its reasons).
#[global_allocator]
static ALLOC: kube_sim::Allocator = kube_sim::Allocator {};

#[derive(Parser)]
#[command(
    name = "kube-sim",
    version,
    about = "A simulated Kubernetes API server with controllers and pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start clusters sim-1..sim-N, write their kubeconfig, print `ready`, run until stopped.
    Serve {
        /// Number of clusters.
        #[arg(long, default_value_t = 1)]
        clusters: usize,
        /// Where to write the kubeconfig (contexts sim-1..sim-N).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// YAML rules making images fail in chosen clusters.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Simulated time runs this many times faster (timestamps stay on the wall clock).
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        /// Serve plain HTTP instead of HTTPS.
        #[arg(long)]
        plain_http: bool,
        /// Serve HTTP/1.1 only (no h2 by ALPN), as a server or proxy without HTTP/2 would.
        #[arg(long)]
        http1_only: bool,
        /// Added latency per request in milliseconds, in every cluster (as the benchmarks do).
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-sim: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve {
            clusters,
            kubeconfig,
            rules,
            time_scale,
            plain_http,
            http1_only,
            latency_ms,
        } => {
            let opts = SimOptions {
                clusters,
                time_scale,
                rules_path: rules,
                rules: Vec::new(),
                tls: !plain_http,
                http1_only,
            };
            match runtime.block_on(serve(opts, kubeconfig, latency_ms)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kube-sim: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(
    opts: SimOptions,
    kubeconfig: PathBuf,
    latency_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    // The handlers before `ready`: a SIGTERM right after it must stop us cleanly, not kill us.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let sim = Sim::start(opts).await?;
    if latency_ms > 0 {
        for cluster in sim.clusters() {
            cluster.set_faults(Faults {
                latency_ms,
                ..Faults::default()
            });
        }
    }
    sim.write_kubeconfig(&kubeconfig)?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "ready")?;
        stdout.flush()?;
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    sim.shutdown();
    Ok(())
}
