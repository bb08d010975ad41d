//! The live progress view in a real pseudo-terminal of 80 columns: `rollguard demo` runs with
//! the pty as stdin, stdout and stderr, and every byte it writes is rendered by a terminal
//! emulator (the `vt100` crate), which is then read the way a person would read the screen.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// Tall enough for the final table, its details and the summary of the demo's second run.
const ROWS: u16 = 40;
const COLS: u16 = 80;
const TARGETS: [&str; 3] = ["eu", "us", "ap"];

/// What `rollguard demo` wrote to its terminal, and its JSON report of step 2.
struct Session {
    code: i32,
    bytes: Vec<u8>,
    report: serde_json::Value,
}

/// Runs `rollguard demo` on a new 80x40 pty with these extra variables.
fn demo_in_pty(dir: &Path, env: &[(&str, &str)]) -> Session {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let size = libc::winsize {
        ws_row: ROWS,
        ws_col: COLS,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two new fds into master and slave; the size is only read.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened by openpty and are owned here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let report_path = dir.join("report.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollguard"));
    // Time scale 5: the demo lasts long enough for several redraws (every 150 ms). At 20 it
    // took half a second once applies stopped waiting on Nagle, too short to redraw thrice.
    cmd.args(["demo", "--time-scale", "5", "--report"])
        .arg(&report_path)
        .current_dir(dir)
        .stdin(Stdio::from(slave.try_clone().expect("dup pty")))
        .stdout(Stdio::from(slave.try_clone().expect("dup pty")))
        .stderr(Stdio::from(slave))
        // The terminal's own width must win over a COLUMNS that says otherwise.
        .env("COLUMNS", "132")
        .env("TERM", "xterm-256color");
    for key in ["NO_COLOR", "RUST_LOG", "GITHUB_ACTIONS", "CI"] {
        cmd.env_remove(key);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("rollguard demo starts");
    // The parent's copies of the slave go with the Command: the reader then sees the end
    // when the child (the last holder) exits.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(master);
        let mut bytes = Vec::new();
        let mut buf = [0u8; 8192];
        // Linux answers EIO once every slave fd is closed: that is the end of the output.
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        bytes
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for rollguard") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rollguard demo did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let bytes = reader.join().expect("pty reader");
    let report = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| {
            panic!(
                "no JSON report; the terminal showed:\n{}",
                String::from_utf8_lossy(&bytes)
            )
        });
    Session {
        code: status.code().unwrap_or(-1),
        bytes,
        report,
    }
}

fn visible_rows(screen: &vt100::Screen) -> Vec<String> {
    screen.rows(0, COLS).collect()
}

/// The screen as text, for failure messages.
fn dump(screen: &vt100::Screen) -> String {
    visible_rows(screen)
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let wrapped = if screen.row_wrapped(i as u16) {
                " (wrapped)"
            } else {
                ""
            };
            format!("{i:2}|{r}|{wrapped}\n")
        })
        .collect()
}

/// Every occurrence of `needle` in `haystack`.
fn positions(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// Checks the screen at the moment the final table of step `step` starts: the live view
/// is the last thing drawn, one unwrapped row per target right below the step's heading,
/// with nothing left over from earlier frames.
fn check_live_view(screen: &vt100::Screen, step: usize) {
    let rows = visible_rows(screen);
    let heading = format!("== Step {step}:");
    let at = rows
        .iter()
        .rposition(|r| r.starts_with(&heading))
        .unwrap_or_else(|| panic!("no {heading} on screen:\n{}", dump(screen)));
    for i in 0..ROWS {
        assert!(
            !screen.row_wrapped(i),
            "row {i} wrapped during the live view of step {step}:\n{}",
            dump(screen)
        );
    }
    let (cursor_row, cursor_col) = screen.cursor_position();
    assert_eq!(cursor_col, 0, "{}", dump(screen));
    let live: Vec<&String> = rows[at + 1..usize::from(cursor_row)].iter().collect();
    assert_eq!(
        live.len(),
        TARGETS.len(),
        "step {step}: between the heading and the cursor there must be exactly one row per target:\n{}",
        dump(screen)
    );
    for (row, target) in live.iter().zip(TARGETS) {
        assert!(
            row.starts_with(&format!("{target}  ")),
            "step {step}: live row {row:?} is not {target}'s:\n{}",
            dump(screen)
        );
    }
}

/// Renders the whole session and checks both live views and the final report on screen.
fn check_screen(session: &Session) {
    let mut parser = vt100::Parser::new(
        ROWS.try_into().expect("rows"),
        COLS.try_into().expect("cols"),
        0,
    );
    // Each step's final table begins with this header: just before it, the live view is done.
    let tables = positions(&session.bytes, b"TARGET");
    assert_eq!(
        tables.len(),
        2,
        "two final tables expected:\n{}",
        String::from_utf8_lossy(&session.bytes)
    );
    let mut fed = 0;
    for (step, &at) in tables.iter().enumerate() {
        // The header may be preceded by its colour code: feed up to the line's start.
        let line_start = session.bytes[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        parser.process(&session.bytes[fed..line_start]);
        fed = line_start;
        check_live_view(parser.screen(), step + 1);
    }
    // Step 2's table is complete once the demo says how long the step took.
    let after = positions(&session.bytes, b"step 2 took");
    let end = *after.first().expect("step 2 took ...");
    parser.process(&session.bytes[fed..end]);
    let screen = parser.screen();
    // Wrapped rows (a long reason in the table) are joined again, as a person reads them.
    let text = screen.contents();
    let lines: Vec<&str> = text.lines().collect();
    let report = &session.report;
    for t in report["targets"].as_array().expect("targets") {
        let name = t["name"].as_str().expect("name");
        let outcome = t["outcome"].as_str().expect("outcome");
        assert!(
            // The HAPPENED column says the outcome in words: `rolled back 2 → 1 (as 3)`.
            lines.iter().any(|l| {
                l.split_whitespace().next() == Some(name)
                    && l[name.len()..]
                        .trim_start()
                        .starts_with(&outcome.replace('-', " "))
            }),
            "no table row `{name} {outcome}` on the final screen:\n{}",
            dump(screen)
        );
    }
    let summary = format!(
        "{}: {}",
        report["app"].as_str().expect("app"),
        report["summary"].as_str().expect("summary")
    );
    assert!(
        lines.contains(&summary.as_str()),
        "the summary line {summary:?} is not intact on the final screen:\n{}",
        dump(screen)
    );
    assert!(
        lines.iter().any(|l| l.starts_with("TARGET ")),
        "{}",
        dump(screen)
    );
}

/// A CSI sequence ending in `m` (colour) anywhere in the bytes.
fn has_sgr(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(start) = bytes[i..]
        .windows(2)
        .position(|w| w == b"\x1b[")
        .map(|p| p + i)
    {
        let rest = &bytes[start + 2..];
        let len = rest
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b';'))
            .unwrap_or(rest.len());
        if rest.get(len) == Some(&b'm') {
            return true;
        }
        i = start + 2;
    }
    false
}

#[test]
fn live_view_fits_80_columns_and_redraws_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = demo_in_pty(dir.path(), &[]);
    assert_eq!(
        session.code,
        0,
        "{}",
        String::from_utf8_lossy(&session.bytes)
    );
    assert!(
        positions(&session.bytes, b"\x1b[3F\x1b[J").len() > 2,
        "the live view redraws in place ({} times)",
        positions(&session.bytes, b"\x1b[3F\x1b[J").len()
    );
    assert!(has_sgr(&session.bytes), "colour on a capable terminal");
    check_screen(&session);
}

#[test]
fn no_color_keeps_the_redraw_and_drops_colour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = demo_in_pty(dir.path(), &[("NO_COLOR", "1")]);
    assert_eq!(
        session.code,
        0,
        "{}",
        String::from_utf8_lossy(&session.bytes)
    );
    assert!(
        positions(&session.bytes, b"\x1b[3F\x1b[J").len() > 2,
        "NO_COLOR keeps the cursor movement ({} redraws)",
        positions(&session.bytes, b"\x1b[3F\x1b[J").len()
    );
    assert!(
        !has_sgr(&session.bytes),
        "colour despite NO_COLOR:\n{:?}",
        String::from_utf8_lossy(&session.bytes)
    );
    check_screen(&session);
}

#[test]
fn dumb_terminal_gets_plain_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = demo_in_pty(dir.path(), &[("TERM", "dumb")]);
    assert_eq!(
        session.code,
        0,
        "{}",
        String::from_utf8_lossy(&session.bytes)
    );
    let text = String::from_utf8_lossy(&session.bytes);
    assert!(
        !text.contains('\u{1b}'),
        "an escape code on TERM=dumb:\n{text:?}"
    );
    // The plain lines say what the live view would have: every target's stages, in order.
    for target in TARGETS {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("] {target}")) && l.contains("deployed")),
            "no plain `deployed` line for {target}:\n{text}"
        );
    }
}
