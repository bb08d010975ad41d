//! Child processes: the binaries measured, runs measured with wait4 and /proc (wall time,
//! peak RSS),
//! and /proc readings (RSS, CPU time, load).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The variable naming another rollguard binary to measure instead of the shipped build
/// (e.g. target/release/rollguard, to try a change without the shipped build's LTO).
pub const BIN_ENV: &str = "ROLLGUARD_BENCH_BIN";

static ROLLGUARD: OnceLock<PathBuf> = OnceLock::new();

/// Why there is no rollguard binary to measure.
#[derive(Debug, thiserror::Error)]
pub enum BinError {
    #[error("{BIN_ENV}={0} is not a file; point it at a built rollguard binary")]
    NotAFile(String),
    #[error("cannot run dist/build-static.sh")]
    Spawn(#[source] std::io::Error),
    #[error("dist/build-static.sh failed ({0}); its errors are above")]
    Build(std::process::ExitStatus),
    #[error("dist/build-static.sh printed no binary path (its last line: {0:?})")]
    NoPath(String),
}

/// Why kube-sim could not be built for the sim section.
#[derive(Debug, thiserror::Error)]
pub enum KubeSimBuildError {
    #[error("running cargo build -p kube-sim")]
    Spawn(#[source] std::io::Error),
    #[error("cargo build --profile bench -p kube-sim failed: {0}")]
    Build(std::process::ExitStatus),
    #[error("{} missing after the build", .0.display())]
    Missing(PathBuf),
}

/// Why a measured child process could not be run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A file to hold the child's stdout or stderr.
    #[error("{}", .path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `command` is the command's Debug form.
    #[error("spawning {command}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("wait4")]
    Wait(#[source] std::io::Error),
    #[error("joining the runner thread")]
    Join(#[source] tokio::task::JoinError),
}

/// The rollguard binary every section measures: the one [`prepare_rollguard`] chose.
pub fn rollguard_bin() -> PathBuf {
    ROLLGUARD
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rollguard")))
}

/// Chooses the binary to measure: `ROLLGUARD_BENCH_BIN` when set, else the binary that
/// ships, built by `dist/build-static.sh` (fat LTO, one codegen unit, no demo): users run
/// that one, and it differs from the bench profile's build in the figures the goals are
/// about (measured 2026-12-03 on 50 x 100 objects: 55-58 MB peak RSS against 64-66 MB, and
/// 12-22 % less CPU at 1,000 clusters). Returns the path and how it was obtained.
pub fn prepare_rollguard() -> Result<(PathBuf, String), BinError> {
    let (bin, how) = match std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(BinError::NotAFile(path.display().to_string()));
            }
            (path, format!("from {BIN_ENV}"))
        }
        None => {
            let started = Instant::now();
            let path = build_shipped()?;
            let how = format!(
                "the shipped build, dist/build-static.sh: {:.1} s; set {BIN_ENV} to measure another",
                started.elapsed().as_secs_f64()
            );
            (path, how)
        }
    };
    let _ = ROLLGUARD.set(bin.clone());
    Ok((bin, how))
}

/// Runs dist/build-static.sh (its last line of output is the binary's path).
fn build_shipped() -> Result<PathBuf, BinError> {
    let out = Command::new(workspace_root().join("dist/build-static.sh"))
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(BinError::Spawn)?;
    if !out.status.success() {
        return Err(BinError::Build(out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().trim();
    let bin = PathBuf::from(last);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(BinError::NoPath(last.to_string()))
    }
}

/// The workspace root (this bench belongs to the root package).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds `kube-sim` in the bench profile (release's, with the simulator optimised as the
/// other sections' in-process clusters are; release keeps it quick to build for the demo)
/// and returns its path. Cargo does not build other
/// packages' binaries for a bench, and building it into the bench's own target/release
/// makes cargo rebuild shared dependencies back and forth (different feature sets, same
/// profile directory), so it has a target directory of its own: target/bench-kube-sim.
pub fn build_kube_sim() -> Result<PathBuf, KubeSimBuildError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("bench-kube-sim");
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--profile",
            "bench",
            "--quiet",
            "-p",
            "kube-sim",
            "--bin",
            "kube-sim",
        ])
        .arg("--target-dir")
        .arg(&target)
        .stdin(Stdio::null())
        .status()
        .map_err(KubeSimBuildError::Spawn)?;
    if !status.success() {
        return Err(KubeSimBuildError::Build(status));
    }
    // The bench profile builds into release/.
    let bin = target.join("release").join("kube-sim");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(KubeSimBuildError::Missing(bin))
    }
}

/// What a finished child did.
#[derive(Debug)]
pub struct Finished {
    /// Exit code; None when killed by a signal (or by the deadline).
    pub code: Option<i32>,
    pub wall: Duration,
    /// The child's peak resident set (VmHWM), KiB: sampled from /proc every 5 ms while it
    /// runs. Not wait4's ru_maxrss: Linux carries the parent's high-water mark across
    /// fork/exec into it, so it would report the bench process (which hosts the clusters).
    pub max_rss_kib: u64,
    /// User + system CPU time the child used (wait4's rusage).
    pub cpu: Duration,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// When it ended.
    pub ended: Instant,
}

impl Finished {
    /// The tail of its output, for a SKIPPED/MISS explanation.
    pub fn tail(&self) -> String {
        let text = format!("{}{}", self.stdout, self.stderr);
        let lines: Vec<&str> = text.lines().rev().take(6).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

/// Runs `cmd` to its end (killed after `limit`), measuring wall time and peak RSS with
/// wait4(2). Blocking: call from a blocking thread when a runtime must go on meanwhile.
pub fn run_measured(
    mut cmd: Command,
    limit: Duration,
    scratch: &Path,
) -> Result<Finished, RunError> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let out_path = scratch.join(format!("child-{n}.out"));
    let err_path = scratch.join(format!("child-{n}.err"));
    let create = |path: &Path| {
        File::create(path).map_err(|source| RunError::Output {
            path: path.to_path_buf(),
            source,
        })
    };
    let out = create(&out_path)?;
    let err = create(&err_path)?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let started = Instant::now();
    let child = cmd.spawn().map_err(|source| RunError::Spawn {
        command: format!("{cmd:?}"),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    let done = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let done = done.clone();
        let killed = killed.clone();
        let peak = peak.clone();
        std::thread::spawn(move || {
            let until = started + limit;
            while Instant::now() < until {
                if done.load(Ordering::Acquire) {
                    return;
                }
                if let Some((_, hwm)) = rss_kib(pid as u32) {
                    peak.fetch_max(hwm, Ordering::AcqRel);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if !done.load(Ordering::Acquire) {
                killed.store(true, Ordering::Release);
                // SAFETY: plain syscall on our own child's pid, which is not reaped yet
                // (`done` is set only after wait4 returned).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        })
    };
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    let ended = Instant::now();
    done.store(true, Ordering::Release);
    let _ = watchdog.join();
    drop(child);
    if r != pid {
        return Err(RunError::Wait(std::io::Error::last_os_error()));
    }
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ok(Finished {
        code,
        wall: ended - started,
        max_rss_kib: peak.load(Ordering::Acquire),
        cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
        timed_out: killed.load(Ordering::Acquire),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        ended,
    })
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// `run_measured` on a blocking thread, for async callers.
pub async fn run_measured_async(
    cmd: Command,
    limit: Duration,
    scratch: &Path,
) -> Result<Finished, RunError> {
    let scratch = scratch.to_path_buf();
    tokio::task::spawn_blocking(move || run_measured(cmd, limit, &scratch))
        .await
        .map_err(RunError::Join)?
}

/// VmRSS and VmHWM of a live process, KiB.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time a live process has used.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Duration::from_secs_f64((utime + stime) as f64 / ticks))
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// Whether a program is on the PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
