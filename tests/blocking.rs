//! Keeps blocking work off the async runtime's threads: a `render:` command waits up to
//! 300 s and git checkouts take seconds, and either would stall every target sharing the
//! thread. Child processes outside the allowed places go through `tokio::process`; the sync
//! functions that run `sh` or `git` are called from async code only inside `spawn_blocking`.

use std::path::{Path, PathBuf};

/// Where blocking process calls live (their callers are checked below).
const ALLOWED: &[&str] = &["src/manifests/", "src/util/git.rs"];
/// Blocking calls that must stay in the allowed places.
const BLOCKING: &[&str] = &[
    "std::thread::sleep",
    "std::process::Command",
    "thread::sleep(",
];
/// Sync functions that run `sh` or `git`: from an `async fn` only through `spawn_blocking`.
const BLOCKING_ENTRY_POINTS: &[&str] = &[
    "manifests::load(",
    "manifests_from_git(",
    "manifests_from_git_until(",
    "git::commit_info(",
    "git::detect_commit(",
    "Checkout::at(",
    "plan(&",
];

/// Whether `code` calls `entry` (not a longer name ending in it, like `dry_plan(`).
fn calls(code: &str, entry: &str) -> bool {
    code.match_indices(entry).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of a file before its `#[cfg(test)]` module (tests may block).
fn product_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .collect()
}

/// Whether the function around line `at` is an `async fn`: the nearest line above it that
/// declares a function at a lower indentation.
fn in_async_fn(lines: &[&str], at: usize) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let own = indent(lines[at]);
    lines[..at]
        .iter()
        .rev()
        .find(|l| indent(l) < own && l.contains("fn ") && !l.trim_start().starts_with("//"))
        .is_some_and(|l| l.contains("async fn"))
}

#[test]
fn no_blocking_calls_on_the_async_runtime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 20, "src/ not found under {}", root.display());
    let mut problems = Vec::new();
    let mut entry_calls = 0;
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).expect("readable");
        let lines = product_lines(&text);
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if !ALLOWED.iter().any(|a| rel.starts_with(a))
                && BLOCKING.iter().any(|b| code.contains(b))
            {
                problems.push(format!(
                    "{rel}:{}: blocking call outside {ALLOWED:?}: {}",
                    i + 1,
                    line.trim()
                ));
            }
            let calls_entry =
                BLOCKING_ENTRY_POINTS.iter().any(|e| calls(code, e)) && !code.contains("fn ");
            if calls_entry {
                entry_calls += 1;
                if in_async_fn(&lines, i) && !code.contains("spawn_blocking") {
                    problems.push(format!(
                        "{rel}:{}: a sync function that runs sh or git, called in an async fn outside spawn_blocking: {}",
                        i + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        entry_calls > 3,
        "the call sites were not found: the test is stale"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_an_async_caller() {
    let lines = [
        "pub async fn deploy() {",
        "    let plan = plan(&args, env)?;",
        "}",
        "fn sync() {",
        "    let plan = plan(&args, env)?;",
        "}",
    ];
    assert!(in_async_fn(&lines, 1));
    assert!(!in_async_fn(&lines, 4));
    assert!(calls("let plan = Arc::new(plan(&args, env)?);", "plan(&"));
    assert!(!calls("let p = dry_plan(&args);", "plan(&"));
}
