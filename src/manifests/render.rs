//! The `render` command (kustomize, helm template, ...): run with `sh -c` under a deadline,
//! its whole process group killed past it; its stdout is the manifests.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::model::*;
use crate::util::bounded::{MAX_RENDER_OUTPUT, decode, size_text};

/// The origin file name of objects read from a render command's output.
pub const RENDER_ORIGIN: &str = "<render>";

/// How long a render command may run (kustomize and helm template finish in seconds).
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `command` with `sh -c` in `dir`; its stdout is the manifests.
pub fn render(command: &str, dir: &Path) -> Result<String, ManifestError> {
    render_with_timeout(command, dir, RENDER_TIMEOUT)
}

/// `render` with a deadline: past it the command's whole process group is killed.
pub fn render_with_timeout(
    command: &str,
    dir: &Path,
    timeout: Duration,
) -> Result<String, ManifestError> {
    let fail = |status: String, stderr: String| ManifestError::Render {
        command: command.to_string(),
        status,
        stderr,
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a timeout also stops what the shell started.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("could not start sh: {e}"), String::new()))?;
    // Pipes are drained on threads so a chatty command never blocks on a full pipe; stdout is
    // kept up to the cap (then the command is stopped), stderr only its last bytes.
    let over = Arc::new(AtomicBool::new(false));
    let stdout = {
        let pipe = child.stdout.take();
        let over = Arc::clone(&over);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let _ = p
                    .take(MAX_RENDER_OUTPUT.saturating_add(1))
                    .read_to_end(&mut buf);
            }
            if buf.len() as u64 > MAX_RENDER_OUTPUT {
                over.store(true, Ordering::Relaxed);
                buf = Vec::new();
            }
            buf
        })
    };
    let stderr = {
        let pipe = child.stderr.take();
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            if let Some(mut p) = pipe {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = p.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    tail.extend_from_slice(&chunk[..n]);
                    if tail.len() > STDERR_KEPT {
                        tail.drain(..tail.len() - STDERR_KEPT);
                    }
                }
            }
            tail
        })
    };
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() >= timeout => {
                kill_group(&mut child);
                let _ = child.wait();
                break Err(format!(
                    "did not finish within {}",
                    crate::util::duration::format_duration(timeout)
                ));
            }
            Ok(None) if over.load(Ordering::Relaxed) => {
                kill_group(&mut child);
                let _ = child.wait();
                break Err(format!(
                    "its output passed the {} cap on render output and it was stopped; render less (one app per config)",
                    size_text(MAX_RENDER_OUTPUT)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(format!("could not wait for it: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    // Its stderr may quote what it rendered (and the error message will show that stderr):
    // the scrubber learns the Secrets of whatever part of the output parses, first.
    learn_secrets(&String::from_utf8_lossy(&stdout));
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    // The end of stderr is where the reason usually is.
    let tail = {
        let lines: Vec<&str> = stderr.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    let status = status.map_err(|why| fail(why, tail.clone()))?;
    // It may have exited (SIGPIPE, 141) before the poll saw the cap passed.
    if over.load(Ordering::Relaxed) {
        return Err(fail(
            format!(
                "its output passed the {} cap on render output; render less (one app per config)",
                size_text(MAX_RENDER_OUTPUT)
            ),
            tail,
        ));
    }
    if !status.success() {
        return Err(fail(status.to_string(), tail));
    }
    decode(stdout).map_err(|e| fail(format!("its output {e}"), String::new()))
}

/// Bytes of stderr kept: enough for the last 20 lines of any real tool.
const STDERR_KEPT: usize = 64 * 1024;

/// Teaches the scrubber the Secret values of `text`, document by document, so that one
/// broken document does not hide the others.
fn learn_secrets(text: &str) {
    let origin = Path::new(RENDER_ORIGIN);
    match super::parse(text, origin) {
        Ok(objects) => crate::report::redact::learn(objects.iter().map(|o| &o.body)),
        Err(_) => {
            for document in text.split("\n---") {
                if let Ok(objects) = super::parse(document, origin) {
                    crate::report::redact::learn(objects.iter().map(|o| &o.body));
                }
            }
        }
    }
}

fn kill_group(child: &mut std::process::Child) {
    // The group id is the child's pid (process_group(0) above).
    if let Ok(pgid) = i32::try_from(child.id()) {
        crate::util::process_group::signal_group(pgid, libc::SIGKILL);
    }
    let _ = child.kill();
}
