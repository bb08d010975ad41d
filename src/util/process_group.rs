//! Children in their own process group: one registry of live groups, one way to signal a
//! group, one check whether it is gone, one `PATH` lookup. Script stages and exec credential
//! plugins both use them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Process groups of running children (scripts, credential plugins), so that a second signal
/// (which exits at once) can still kill them. Process-wide on purpose: the signal handler
/// and the exit path (`kill_leftovers` in main.rs) must reach every child, whatever task
/// started it, and have no run context to reach them through.
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

/// The signal that cancelled this run, once one came.
pub fn cancel_signal() -> Option<&'static str> {
    CANCEL_SIGNAL.get().copied()
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

/// SIGKILL every running child's process group and everything they started (before a hard
/// exit).
pub fn kill_all_now() {
    live_groups(|groups| {
        for pgid in groups.drain() {
            signal_group(pgid, libc::SIGKILL);
        }
    });
    kill_leftovers();
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

/// One line of `/proc/<pid>/stat`: what the kill and sweep decisions need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
}

impl Stat {
    /// Zombies are dead, only not yet reaped by whoever inherited them.
    pub fn running(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Every process /proc shows (empty without /proc).
pub fn processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid: i32 = name.to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// Whether any process of group `pgid` is still running (zombies do not count).
pub fn group_alive(pgid: i32) -> bool {
    if std::path::Path::new("/proc/self/stat").exists() {
        return processes().iter().any(|p| p.pgrp == pgid && p.running());
    }
    // No /proc: ask the kernel (this counts zombies, so a group may look alive until the
    // grace is over; it is then SIGKILLed, which is harmless).
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// The state, parent and process group from the text of /proc/<pid>/stat. The command name
/// is in parentheses and may hold spaces or parentheses itself, so fields count from the
/// last ')'.
pub fn parse_stat(pid: i32, stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

/// Every running descendant of `root` (children, their children, ...), whatever session or
/// group they moved to: a `setsid` grandchild is still a descendant while its parent lives.
pub fn descendants(root: i32, procs: &[Stat]) -> Vec<i32> {
    let mut found = vec![root];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        for p in procs {
            if p.ppid == parent && p.running() && !found.contains(&p.pid) {
                found.push(p.pid);
            }
        }
        at += 1;
    }
    found.remove(0);
    found
}

/// The variable every child of the runner gets, with a value unique to that run, so that
/// whatever it started (also after `setsid`, also once orphaned) can be found by it.
pub const MARKER_VAR: &str = "ROLLGUARD_CHILD_ID";

/// Whether `environ` (NUL-separated, as in /proc/<pid>/environ) holds `marker` exactly, or
/// (with `prefix`) a value starting with it.
pub fn environ_has(environ: &[u8], marker: &str, prefix: bool) -> bool {
    let want = format!("{MARKER_VAR}={marker}");
    environ.split(|b| *b == 0).any(|entry| {
        if prefix {
            entry.starts_with(want.as_bytes())
        } else {
            entry == want.as_bytes()
        }
    })
}

/// Running processes whose environment carries `marker` (see [`MARKER_VAR`]).
pub fn marked(marker: &str, prefix: bool) -> Vec<Stat> {
    processes()
        .into_iter()
        .filter(|p| p.running())
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.pid))
                .is_ok_and(|env| environ_has(&env, marker, prefix))
        })
        .collect()
}

pub fn signal_pid(pid: i32, signal: i32) {
    // SAFETY: kill only sends a signal; pid is a process we started or that one of them did
    // (never 0, 1 or negative, which would address groups or every process).
    if pid > 1 {
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Reaps `pid` if it is a zombie we adopted (as child subreaper); never waits. True when
/// it is gone for us: reaped now, or not (or no longer) our child.
pub fn reap_adopted(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on one pid with WNOHANG; a pid that is not our child answers ECHILD.
    let answer = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    answer != 0
}

/// Makes rollguard the child subreaper of everything it starts: a grandchild whose parent
/// died (after `setsid`, a double fork) becomes rollguard's child instead of init's, so it can
/// still be found, killed and reaped. Linux only; elsewhere the marker alone finds them.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// SIGKILLs every process this rollguard started, directly or not, that is still running:
/// before a hard exit, and at the end of every command (nothing outlives rollguard).
pub fn kill_leftovers() {
    let me = std::process::id() as i32;
    let mut signalled = Vec::new();
    for _ in 0..3 {
        let procs = processes();
        let mut pids = descendants(me, &procs);
        pids.extend(marked(&format!("{me}-"), true).iter().map(|p| p.pid));
        pids.retain(|p| *p != me);
        if pids.is_empty() {
            break;
        }
        for pid in &pids {
            signal_pid(*pid, libc::SIGKILL);
            reap_adopted(*pid);
        }
        signalled.extend(pids);
    }
    for pid in signalled {
        reap_adopted(pid);
    }
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
            ("123 (sh) S 1 123 123 0 -1", Some(('S', 1, 123))),
            ("9 (we (ird) name) Z 1 77 77 0", Some(('Z', 1, 77))),
            ("garbage", None),
            ("1 (x) R 0 notanumber", None),
        ];
        for (stat, want) in cases {
            let got = parse_stat(5, stat).map(|s| (s.state, s.ppid, s.pgrp));
            assert_eq!(got, want, "{stat}");
        }
    }

    fn p(pid: i32, ppid: i32, state: char) -> Stat {
        Stat {
            pid,
            state,
            ppid,
            pgrp: pid,
        }
    }

    #[test]
    fn descendants_table() {
        // 10 -> 11 -> 12 (setsid, own group) -> 13; 14 is a zombie child; 20 is unrelated.
        let procs = [
            p(10, 1, 'S'),
            p(11, 10, 'S'),
            p(12, 11, 'S'),
            p(13, 12, 'R'),
            p(14, 10, 'Z'),
            p(20, 1, 'S'),
        ];
        let cases: [(i32, Vec<i32>); 4] = [
            (10, vec![11, 12, 13]),
            (12, vec![13]),
            (13, vec![]),
            (99, vec![]),
        ];
        for (root, want) in cases {
            assert_eq!(descendants(root, &procs), want, "{root}");
        }
    }

    #[test]
    fn environ_marker_table() {
        let env = b"PATH=/bin\0ROLLGUARD_CHILD_ID=42-7\0HOME=/h\0";
        let cases = [
            ("42-7", false, true),
            ("42-", true, true),
            ("42-", false, false),
            ("42-70", false, false),
            ("43-", true, false),
        ];
        for (marker, prefix, want) in cases {
            assert_eq!(environ_has(env, marker, prefix), want, "{marker} {prefix}");
        }
    }
}
