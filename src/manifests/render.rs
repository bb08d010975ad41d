//! The `render` command (kustomize, helm template, ...): run with `sh -c` through the one
//! child-process runner (a deadline, its whole process group killed past it); its stdout is
//! the manifests.

use std::path::Path;
use std::time::Duration;

use super::model::*;
use crate::util::bounded::{MAX_RENDER_OUTPUT, decode, size_text};
use crate::util::runner::{Capture, End, Spec, run_blocking};

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
    let mut spec = Spec::new("sh", timeout).args(["-c", command]);
    spec.dir = Some(dir.to_path_buf());
    spec.stdout = Capture::Bytes(usize::try_from(MAX_RENDER_OUTPUT).unwrap_or(usize::MAX));
    // The end of stderr is where the reason usually is.
    spec.tail_lines = 20;
    let out = run_blocking(&spec, &|line| line.to_string());
    // Its stderr may quote what it rendered (and the error message will show that stderr):
    // the scrubber learns the Secrets of whatever part of the output parses, first.
    learn_secrets(&String::from_utf8_lossy(&out.stdout));
    let tail = out.tail.join("\n");
    if out.overflowed {
        return Err(fail(
            format!(
                "its output passed the {} cap on render output and it was stopped; render less (one app per config)",
                size_text(MAX_RENDER_OUTPUT)
            ),
            tail,
        ));
    }
    match out.end {
        End::Exited(0) => {}
        End::TimedOut => {
            return Err(fail(
                format!(
                    "did not finish within {}",
                    crate::util::duration::format_duration(timeout)
                ),
                tail,
            ));
        }
        End::NotStarted(why) => return Err(fail(format!("could not start sh: {why}"), tail)),
        End::Exited(code) => return Err(fail(format!("exit status: {code}"), tail)),
        End::Signalled(sig) => return Err(fail(format!("signal: {sig}"), tail)),
        End::Stopped => return Err(fail("was stopped".into(), tail)),
    }
    decode(out.stdout).map_err(|e| fail(format!("its output {e}"), String::new()))
}

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
