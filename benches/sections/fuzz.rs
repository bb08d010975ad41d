//! Fuzz: the hostile inputs of issue 9 through the real binary, one child process each (its
//! exit code, first error line and peak RSS, VmHWM sampled from /proc), then mutated inputs
//! through the config loader and the manifest parser in this process for a bounded time
//! (every input must give Ok or an error naming the file, never a panic).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rollguard::config::{self, Overrides};
use rollguard::manifests;

use crate::fuzz_inputs::{CONFIG, MANIFEST, Rng, mutate};
use crate::support::procs::{self, RunError};
use crate::support::table::{Row, mib, why};

/// Peak RSS allowed for a rollguard refusing a hostile file (a deploy of 50 clusters x 100
/// objects stays under 100 MiB; a refusal must not cost more).
const RSS_GOAL_KIB: u64 = 100 * 1024;
/// How long mutated inputs are fed to each parser.
const MUTATION_TIME: Duration = Duration::from_secs(20);

fn alias_bomb() -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    text
}

/// (what, bytes of k8s/x.yaml, or None for a 200 MB file, or Some render command).
fn hostile() -> Vec<(&'static str, Input)> {
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    // 2 KiB documents: 7,500 of them, under the document cap too, so the whole file parses.
    let filler = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a{{}}}}\ndata:\n  k: \"{}\"\n---\n",
        "x".repeat(1990)
    );
    vec![
        (
            "alias bomb (10^12 nodes)",
            Input::File(alias_bomb().into_bytes()),
        ),
        (
            "nesting 10,000 deep",
            Input::File(format!("x: {}{}\n", "[".repeat(10_000), "]".repeat(10_000)).into_bytes()),
        ),
        ("200 MB manifest file", Input::Sized(200 * 1024 * 1024)),
        (
            "15 MiB manifest file (just under the cap)",
            Input::File(
                (0..15 * 1024 * 1024 / filler.len())
                    .map(|i| filler.replace("a{}", &format!("a{i}")))
                    .collect::<String>()
                    .into_bytes(),
            ),
        ),
        (
            "100,000 tiny documents",
            Input::File("a: 1\n---\n".repeat(100_000).into_bytes()),
        ),
        (
            "invalid UTF-8",
            Input::File(b"apiVersion: v1\nkind: \xff\n".to_vec()),
        ),
        (
            "NUL bytes",
            Input::File(b"apiVersion: v1\nkind: Config\0Map\n".to_vec()),
        ),
        (
            "colliding keys (1 and \"1\")",
            Input::File(format!("{cm}data:\n  1: a\n  \"1\": b\n").into_bytes()),
        ),
        (
            "merge keys x 5,000",
            Input::File(
                format!(
                    "b: &b {{k: v}}\n{}",
                    (0..5_000)
                        .map(|i| format!("m{i}: {{<<: *b}}\n"))
                        .collect::<String>()
                )
                .into_bytes(),
            ),
        ),
        (
            "integer past i64",
            Input::File(format!("{cm}spec: {{replicas: 99999999999999999999999}}\n").into_bytes()),
        ),
        ("render: yes (endless output)", Input::Render("yes")),
    ]
}

/// Why a hostile input could not be run.
#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    /// Writing the input's folder, file, kubeconfig or config.
    #[error(transparent)]
    Io(std::io::Error),
    #[error(transparent)]
    Run(#[from] RunError),
}

enum Input {
    File(Vec<u8>),
    /// A sparse file of this size.
    Sized(u64),
    Render(&'static str),
}

pub async fn run(scratch: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, (what, input)) in hostile().into_iter().enumerate() {
        // A valid file under the caps parses and then finds no cluster: exit 1.
        let want = if what.starts_with("15 MiB") { 1 } else { 2 };
        rows.push(match one(scratch, i, &input).await {
            Ok((code, kib, wall, line)) => Row::goal(
                format!("{what}: exit {code} in {:.2} s: {line}", wall.as_secs_f64()),
                format!("exit {want}, < {}", mib(RSS_GOAL_KIB)),
                format!("peak RSS {}", mib(kib)),
                code == want && kib < RSS_GOAL_KIB,
            ),
            Err(e) => Row::skipped(what, why(&e)),
        });
    }
    rows.extend(
        tokio::task::spawn_blocking(mutations)
            .await
            .unwrap_or_else(|e| {
                vec![Row::skipped(
                    "mutations",
                    format!("the fuzz thread failed: {e}"),
                )]
            }),
    );
    rows
}

/// One hostile input: `rollguard deploy` on it (the cluster is never reached: the input is
/// refused first, exit 2).
async fn one(
    scratch: &Path,
    i: usize,
    input: &Input,
) -> Result<(i32, u64, Duration, String), FuzzError> {
    let dir = scratch.join(format!("hostile-{i}"));
    std::fs::create_dir_all(dir.join("k8s")).map_err(FuzzError::Io)?;
    let file = dir.join("k8s/x.yaml");
    let mut manifests = "manifests: [k8s/]".to_string();
    match input {
        Input::File(bytes) => std::fs::write(&file, bytes).map_err(FuzzError::Io)?,
        Input::Sized(len) => std::fs::File::create(&file)
            .and_then(|f| f.set_len(*len))
            .map_err(FuzzError::Io)?,
        Input::Render(command) => manifests = format!("render: {command:?}"),
    }
    std::fs::write(
        dir.join("kubeconfig"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: bench\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .map_err(FuzzError::Io)?;
    std::fs::write(
        dir.join("rollguard.yaml"),
        format!("app: fuzz\nnamespace: fuzz\n{manifests}\ntargets:\n  - name: c\n    context: c\n"),
    )
    .map_err(FuzzError::Io)?;
    let mut cmd = Command::new(procs::rollguard_bin());
    cmd.args(["deploy", "--config"])
        .arg(dir.join("rollguard.yaml"))
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["--timeout", "10s"])
        .current_dir(&dir)
        .env_clear();
    let done = procs::run_measured_async(cmd, Duration::from_secs(60), &dir).await?;
    let line = done
        .stderr
        .lines()
        .find(|l| l.contains("x.yaml") || l.contains("render") || l.contains("rollguard:"))
        .unwrap_or_else(|| done.stderr.lines().next().unwrap_or(""))
        .replace(&format!("{}/", dir.display()), "");
    let line: String = line.chars().take(110).collect();
    Ok((done.code.unwrap_or(-1), done.max_rss_kib, done.wall, line))
}

/// Mutated configs and manifests for [`MUTATION_TIME`] each.
fn mutations() -> Vec<Row> {
    let no_env = |_: &str| None;
    let mut rows = Vec::new();
    let seeds: [(&str, &str, u64); 2] = [
        ("config loader", CONFIG, 0x9E37_79B9_7F4A_7C15),
        ("manifest parser", MANIFEST, 0xD1B5_4A32_D192_ED03),
    ];
    for (what, seed, state) in seeds {
        let mut rng = Rng(state ^ 0x5eed);
        let started = Instant::now();
        let (mut cases, mut bad) = (0u64, Vec::new());
        while started.elapsed() < MUTATION_TIME {
            let text = mutate(&mut rng, seed);
            let named = std::panic::catch_unwind(|| {
                if what == "config loader" {
                    config::parse(
                        &text,
                        Path::new("rollguard.yaml"),
                        &Overrides::default(),
                        &no_env,
                    )
                    .err()
                    .is_none_or(|e| e.to_string().contains("rollguard.yaml"))
                } else {
                    manifests::parse(&text, Path::new("k8s/app.yaml"))
                        .err()
                        .is_none_or(|e| e.to_string().contains("k8s/app.yaml"))
                }
            });
            if !matches!(named, Ok(true)) && bad.len() < 3 {
                bad.push(format!("{text:?}"));
            }
            cases += 1;
        }
        rows.push(Row::goal(
            format!("{what}: mutated inputs for {} s", MUTATION_TIME.as_secs()),
            "0 panics, every error names the file",
            if bad.is_empty() {
                format!("{cases} inputs, 0 failures")
            } else {
                format!("{cases} inputs; failed on {}", bad.join(" | "))
            },
            bad.is_empty(),
        ));
    }
    rows
}
