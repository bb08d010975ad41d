//! Children in their own process group: one registry of live groups, one way to signal a
//! group, one check whether it is gone, one `PATH` lookup. Script stages and exec credential
//! plugins both use them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Process groups of running children (scripts, credential plugins), so that a second signal
/// (which exits at once) can still kill them.
static LIVE_GROUPS: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn live_groups(f: impl FnOnce(&mut HashSet<i32>)) {
    let mut guard = LIVE_GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashSet::new));
}

/// The signal that cancelled this run: process-wide, as the signal itself is, so that every
/// cancelled target can say which one came.
static CANCEL_SIGNAL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Notes the signal that cancels the run (the first one counts).
pub fn note_cancel_signal(name: &'static str) {
    let _ = CANCEL_SIGNAL.set(name);
}

/// How a cancelled target reads: "cancelled by SIGTERM", or "cancelled" when no signal came.
pub fn cancelled_words() -> String {
    cancelled_by(CANCEL_SIGNAL.get().copied())
}

/// [`cancelled_words`] for a given signal.
pub fn cancelled_by(signal: Option<&str>) -> String {
    match signal {
        Some(name) => format!("cancelled by {name}"),
        None => "cancelled".to_string(),
    }
}

/// SIGKILL every running child's process group (before a hard exit).
pub fn kill_all_now() {
    live_groups(|groups| {
        for pgid in groups.drain() {
            signal_group(pgid, libc::SIGKILL);
        }
    });
}

pub fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: killpg only sends a signal; pgid is the group of a child we started (never 0
    // or 1, which would address our own group or every process).
    if pgid > 1 {
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// A started child's process group, registered for [`kill_all_now`]. Dropped before
/// [`GroupGuard::done`] (its future was cancelled half-way, or the caller never waits for
/// leftovers), it SIGKILLs the group, so no child outlives its run.
pub struct GroupGuard {
    pgid: i32,
    done: bool,
}

impl GroupGuard {
    pub fn new(pgid: i32) -> GroupGuard {
        live_groups(|groups| {
            groups.insert(pgid);
        });
        GroupGuard { pgid, done: false }
    }

    /// The group is gone (reaped and checked): nothing to kill on drop.
    pub fn done(&mut self) {
        self.done = true;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if !self.done {
            signal_group(self.pgid, libc::SIGKILL);
        }
        let pgid = self.pgid;
        live_groups(|groups| {
            groups.remove(&pgid);
        });
    }
}

/// Whether any process of group `pgid` is still running (zombies do not count: they are
/// dead, only not yet reaped by whoever inherited them).
pub fn group_alive(pgid: i32) -> bool {
    if let Ok(entries) = std::fs::read_dir("/proc") {
        return entries.flatten().any(|entry| {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                return false;
            };
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parse_stat(&stat))
                .is_some_and(|(state, group)| group == pgid && state != 'Z' && state != 'X')
        });
    }
    // No /proc: ask the kernel (this counts zombies, so a group may look alive until the
    // grace is over; it is then SIGKILLed, which is harmless).
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// (state, process group) from the text of /proc/<pid>/stat. The command name is in
/// parentheses and may hold spaces or parentheses itself, so fields count from the last ')'.
pub fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Where `command` runs from: a path (it has a '/'), else the first `PATH` entry that has
/// an executable file of that name (as the shell finds it).
pub fn find_command(
    command: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            }
            #[cfg(not(unix))]
            {
                m.is_file()
            }
        })
    };
    if command.contains('/') {
        let path = PathBuf::from(command);
        return executable(&path).then_some(path);
    }
    let path = env("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| executable(p))
}
#[cfg(test)]
mod tests {
    #[test]
    fn cancel_words_name_the_signal() {
        assert_eq!(super::cancelled_by(Some("SIGTERM")), "cancelled by SIGTERM");
        assert_eq!(super::cancelled_by(Some("SIGINT")), "cancelled by SIGINT");
        assert_eq!(super::cancelled_by(None), "cancelled");
    }

    use super::*;

    #[test]
    fn stat_table() {
        let cases = [
            ("123 (sh) S 1 123 123 0 -1", Some(('S', 123))),
            ("9 (we (ird) name) Z 1 77 77 0", Some(('Z', 77))),
            ("garbage", None),
            ("1 (x) R 0 notanumber", None),
        ];
        for (stat, want) in cases {
            assert_eq!(parse_stat(stat), want, "{stat}");
        }
    }
}
