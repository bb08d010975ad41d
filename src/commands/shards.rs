//! A fleet split over a CI job matrix: `deploy --shard I/N` (its edges here: the flag or
//! `$ROLLGUARD_SHARD`, an empty shard, the report's `shard`), `rollguard report merge`
//! (the shards' reports as one, and the GitHub sinks the shards left out) and `rollguard
//! conclude` (the failure policy across shards: under `rollback-all`, the shards that
//! deployed roll back when another failed or never reported).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::cli::{ConcludeArgs, ConfigFiles, MergeArgs, RollbackArgs, Selection};
use crate::config::{self, Config, FailurePolicy, Overrides};
use crate::error::{Error, exit};
use crate::github::{self, context::GithubContext, deployments::Planned};
use crate::report::merge::{Merged, ShardFile, merge};
use crate::report::redact::print_err;
use crate::report::{self, COMMENT_LIMIT, FullReport, Report, TargetOutcome};
use crate::util::shard::Shard;

type Env = HashMap<String, String>;

/// How deep `report merge` and `conclude` look under each folder (an artifact download puts
/// each artifact in its own folder).
const MAX_DEPTH: usize = 4;

/// `--shard`, else `$ROLLGUARD_SHARD` (empty counts as unset), parsed as strictly.
pub fn resolve_shard(flag: Option<Shard>, env: &Env) -> Result<Option<Shard>, Error> {
    if flag.is_some() {
        return Ok(flag);
    }
    match env.get("ROLLGUARD_SHARD").map(|v| v.trim()) {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|e| Error::Usage(format!("$ROLLGUARD_SHARD: {e}"))),
    }
}

/// The one line a shard says about the sinks it leaves out.
pub fn say_sinks_left(shard: Shard, dry_run: bool) {
    print_err(&if dry_run {
        format!(
            "rollguard: shard {shard}: no plan comment from this job (it plans a slice); `rollguard diff` without --shard comments the whole fleet's plan"
        )
    } else {
        format!(
            "rollguard: shard {shard}: no PR comment, step summary or Deployments from this job; `rollguard report merge` posts them once for the whole fleet"
        )
    });
}

/// The config's targets in order with their waves.
fn fleet_of(config: &Config) -> Vec<(String, u32)> {
    config
        .targets
        .iter()
        .map(|t| (t.name.clone(), t.wave))
        .collect()
}

/// Every `*.json` under the folders (sorted, so the first file is the same in every run)
/// that is a shard's report; other JSON files, dry runs' reports and reports without
/// `shard` (a whole fleet's, a merged one) are skipped, saying so.
pub fn find_reports(dirs: &[PathBuf], out: Option<&Path>) -> Result<Vec<ShardFile>, Error> {
    let mut paths = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            return Err(Error::Usage(format!(
                "{}: no such folder; pass the folder the shards' reports were downloaded to",
                dir.display()
            )));
        }
        collect_json(dir, MAX_DEPTH, &mut paths);
    }
    paths.sort();
    paths.dedup();
    // `report merge --out` inside a folder it reads: the merged report of an earlier run is
    // not a shard's.
    let out = out.and_then(|p| p.canonicalize().ok());
    paths.retain(|p| out.is_none() || p.canonicalize().ok() != out);
    let mut files = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::Usage(format!(
                "{shown}: cannot read it ({e}); make the reports readable or leave it out"
            ))
        })?;
        match serde_json::from_str::<Report>(&text) {
            Ok(r) if r.dry_run => print_err(&format!(
                "rollguard: skipping {shown}: the report of a dry run, which deployed nothing"
            )),
            Ok(r) if r.shard.is_none() => print_err(&format!(
                "rollguard: skipping {shown}: the report of a run without --shard (a whole fleet's, or a merged one), not a shard's"
            )),
            Ok(report) => files.push(ShardFile {
                path: shown,
                report,
            }),
            Err(e) => print_err(&format!(
                "rollguard: skipping {shown}: not a rollguard report ({e})"
            )),
        }
    }
    Ok(files)
}

fn collect_json(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth > 0 {
            collect_json(&path, depth - 1, out);
        } else if path.extension().is_some_and(|e| e == "json") && path.is_file() {
            out.push(path);
        }
    }
}

/// The shards' reports of one deploy, combined; refusals and missing shards said.
fn read_and_merge(
    dirs: &[PathBuf],
    out: Option<&Path>,
    config: Option<&Config>,
) -> Result<Merged, Error> {
    let files = find_reports(dirs, out)?;
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    if files.is_empty() {
        let e = report::merge::MergeError::NoReports(shown.join(", "));
        return Err(Error::Usage(e.to_string()));
    }
    let fleet = config.map(fleet_of);
    let merged = merge(files, fleet.as_deref()).map_err(|e| Error::Usage(e.to_string()))?;
    for index in &merged.missing {
        print_err(&format!(
            "rollguard: shard {index}/{} wrote no report in {}: it counts as failed{}",
            merged.count,
            shown.join(", "),
            if config.is_some() {
                ", and so does each of its targets"
            } else {
                " (pass --config to name its targets)"
            }
        ));
    }
    Ok(merged)
}

/// `rollguard report merge DIR... --out PATH`: one report, the table, and the sinks a
/// whole-fleet deploy runs (step summary, outputs, PR comment, Deployments when the config
/// asks). Exit code as the deploy's.
pub async fn merge_reports(args: MergeArgs, env: Env) -> Result<i32, Error> {
    let lookup = |k: &str| env.get(k).cloned();
    let config = match &args.config {
        Some(path) => Some(config::load(path, &Overrides::default(), &lookup)?),
        None => None,
    };
    let merged = read_and_merge(&args.dirs, Some(&args.out), config.as_ref())?;
    let budget = config
        .as_ref()
        .map_or(github::context::DEFAULT_BUDGET, |c| c.github.timeout);
    let ctx = GithubContext::resolve(
        &crate::commands::deploy::github_flags(&args.github),
        &env,
        &|path| std::fs::read_to_string(path).ok(),
        budget,
    );
    let in_actions = ctx.in_actions;
    let mut report = merged.report;
    let deployments = config.as_ref().filter(|c| c.github.deployments).map(|c| {
        c.targets
            .iter()
            .filter(|t| report.targets.iter().any(|r| r.name == t.name))
            .map(|t| Planned {
                target: t.name.clone(),
                environment: github::deployments::environment(
                    &c.app,
                    &t.name,
                    t.environment.as_deref(),
                ),
            })
            .collect()
    });
    let sink = github::Sink::start(
        ctx,
        github::SinkOptions {
            app: report.app.clone(),
            deployments,
        },
    );
    report.run_url = sink.run_url();
    let written =
        crate::commands::deploy::finish_report(&report, Some(&args.out), &env, in_actions);
    let report_path = written.then(|| args.out.display().to_string());
    let scrub = crate::report::redact::scrub;
    if let Some(path) = &args.github.report_markdown {
        let full_report = FullReport {
            run_url: None,
            json_path: report_path.clone(),
        };
        let body = github::report_body(&report, COMMENT_LIMIT, full_report, &scrub);
        crate::commands::deploy::write_report_file(path, &body, in_actions);
    }
    sink.finish(github::Finish {
        report: &report,
        report_path: report_path.as_deref(),
        origin: &|_| None,
        logs: &|_| Vec::new(),
        scrub: &scrub,
    })
    .await;
    Ok(report::exit_code(&report))
}

/// What `conclude` does with one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Roll it back to its previous good release (its shard deployed it).
    RollBack,
    /// Nothing, and why.
    Leave(String),
}

/// The failure policy across shards, pure: under `rollback-all`, when any target failed
/// (a shard that never reported has failed rows), every target a shard deployed and
/// recorded rolls back; under any other policy each shard's own policy has decided.
pub fn decide(policy: FailurePolicy, report: &Report) -> Vec<(String, Step)> {
    let failed = report.targets.iter().find(|t| t.outcome.is_problem());
    report
        .targets
        .iter()
        .map(|t| {
            let step = match (policy, failed) {
                (FailurePolicy::RollbackAll, Some(_)) => match t.outcome {
                    TargetOutcome::Deployed if t.unchanged => {
                        Step::Leave("the deploy changed nothing there: nothing to roll back".into())
                    }
                    TargetOutcome::Deployed if t.revision.is_none() => {
                        Step::Leave("its shard recorded no revision: nothing to roll back".into())
                    }
                    TargetOutcome::Deployed => Step::RollBack,
                    TargetOutcome::Failed if t.revision.is_none() && t.message.as_deref().is_some_and(|m| m.contains("never reported")) => {
                        Step::Leave(format!(
                            "its shard never reported: look at that job's log and at `rollguard history --target {}`",
                            t.name
                        ))
                    }
                    other => Step::Leave(format!("{other} in its own shard, which settled it")),
                },
                (FailurePolicy::RollbackAll, None) => {
                    Step::Leave("every shard deployed: nothing to do".into())
                }
                (other, _) => Step::Leave(format!(
                    "on_failure is {other}: each shard's own policy decided"
                )),
            };
            (t.name.clone(), step)
        })
        .collect()
}

/// A step to roll back holds only while the target's newest release is still the one its
/// shard recorded, pure: after a later deploy, or a conclude that already ran (a re-run of
/// the job), rolling back again would undo a good release. `newest`: each target's newest
/// revision as read just now (absent: its history could not be read, said on stderr).
pub fn still_theirs(
    steps: Vec<(String, Step)>,
    report: &Report,
    newest: &HashMap<String, Option<u64>>,
) -> Vec<(String, Step)> {
    steps
        .into_iter()
        .map(|(name, step)| {
            if step != Step::RollBack {
                return (name, step);
            }
            let recorded = report.targets.iter().find(|t| t.name == name).and_then(|t| t.revision);
            let step = match (recorded, newest.get(&name)) {
                (_, None) => Step::Leave(
                    "its release history could not be read (see above): run `rollguard conclude` again once it can".into(),
                ),
                (Some(r), Some(Some(n))) if r == *n => Step::RollBack,
                (r, Some(n)) => Step::Leave(format!(
                    "its newest release is {}, not v{} that its shard deployed (a later deploy or rollback, or this conclude already ran): nothing rolled back",
                    n.map_or("none".into(), |n| format!("v{n}")),
                    r.map_or("?".into(), |r| r.to_string())
                )),
            };
            (name, step)
        })
        .collect()
}

/// The newest revision in the history of every target to roll back (a target whose history
/// cannot be read is absent; the problem is said on stderr).
async fn newest_revisions(
    config: &Config,
    steps: &[(String, Step)],
    env: &Env,
) -> HashMap<String, Option<u64>> {
    let mut config = config.clone();
    config.targets.retain(|t| {
        steps
            .iter()
            .any(|(n, s)| *n == t.name && *s == Step::RollBack)
    });
    if config.targets.is_empty() {
        return HashMap::new();
    }
    let (found, _) = crate::commands::release::for_each_target(&config, env, |c| async move {
        let records = c.store.list().await?;
        Ok(records.iter().map(|r| r.revision).max())
    })
    .await;
    found.into_iter().collect()
}

/// `rollguard conclude --reports DIR`: the failure policy across shards. Exit 0 when nothing
/// needed doing or every rollback worked, else 1.
pub async fn conclude(args: ConcludeArgs, env: Env) -> Result<i32, Error> {
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(args.files.config.as_deref(), &lookup);
    let overrides = Overrides {
        kubeconfig: args.files.kubeconfig.clone(),
        on_failure: args.on_failure,
        ..Default::default()
    };
    let config = config::load(&path, &overrides, &lookup)?;
    let merged = read_and_merge(&args.reports, None, Some(&config))?;
    let steps = decide(config.on_failure, &merged.report);
    // What set the policy off: the first target (in config order) that did not deploy.
    let trigger = merged
        .report
        .targets
        .iter()
        .find(|t| t.outcome.is_problem())
        .map_or(String::new(), |t| format!("{} {}", t.name, t.outcome));
    let newest = newest_revisions(&config, &steps, &env).await;
    let steps = still_theirs(steps, &merged.report, &newest);
    let mut to_roll_back = Vec::new();
    for (name, step) in &steps {
        match step {
            Step::RollBack => {
                println!(
                    "{name}: rolling back to its last good release: on_failure is rollback-all and {trigger} ({})",
                    merged.report.summary
                );
                to_roll_back.push(name.clone());
            }
            Step::Leave(why) => println!("{name}: nothing to do: {why}"),
        }
    }
    if to_roll_back.is_empty() {
        println!("rollguard conclude: nothing to roll back");
        return Ok(exit::OK);
    }
    let files = ConfigFiles {
        config: Some(path),
        kubeconfig: args.files.kubeconfig.clone(),
    };
    let code = roll_back(&files, to_roll_back, &env).await;
    Ok(if code == exit::OK {
        exit::OK
    } else {
        exit::FAILED
    })
}

/// The one call into the manual rollback (`rollguard rollback`, no prompt) for `targets`,
/// each to its last good release before the current one; prints what became of each target.
/// Returns the rollback's exit code.
async fn roll_back(files: &ConfigFiles, targets: Vec<String>, env: &Env) -> i32 {
    let scratch = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            print_err(&format!(
                "rollguard: cannot make a scratch folder for the rollback's report ({e}); set TMPDIR to a writable folder"
            ));
            return exit::FAILED;
        }
    };
    let report_path = scratch.path().join("rollback.json");
    let args = RollbackArgs {
        selection: Selection {
            files: files.clone(),
            targets,
        },
        revision: None,
        from_git: None,
        dry_run: false,
        yes: true,
        force: false,
        force_conflicts: false,
        report: Some(report_path.clone()),
        // conclude says per target what it did; the merge job's comment is the fleet's.
        github: crate::cli::GithubArgs {
            no_github: true,
            ..Default::default()
        },
    };
    let code = match crate::commands::release::rollback(args, env.clone()).await {
        Ok(code) => code,
        Err(e) => {
            print_err(&format!("rollguard: {e}"));
            e.exit_code()
        }
    };
    let done = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|t| serde_json::from_str::<Report>(&t).ok());
    for t in done.iter().flat_map(|r| &r.targets) {
        let to = t
            .rollback
            .as_ref()
            .and_then(|r| r.to_revision)
            .map_or(String::new(), |r| format!(" to v{r}"));
        let why = t.reason().map_or(String::new(), |r| format!(": {r}"));
        println!("{}: {}{to}{why}", t.name, t.outcome);
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::TargetReport;

    fn target(name: &str, outcome: TargetOutcome) -> TargetReport {
        TargetReport::new(name, outcome, jiff::Timestamp::UNIX_EPOCH)
    }

    fn report(targets: Vec<TargetReport>) -> Report {
        let at = jiff::Timestamp::UNIX_EPOCH;
        Report::new("shop", None, at, at, targets)
    }

    #[test]
    fn conclude_decides_by_policy_and_outcome() {
        use TargetOutcome::*;
        let mut unchanged = target("ap", Deployed);
        unchanged.unchanged = true;
        let mut eu = target("eu", Deployed);
        eu.revision = Some(2);
        let mut us = target("us", RolledBack);
        us.revision = Some(2);
        let mut lost = target("sa", Failed);
        lost.message = Some("shard 3/3 never reported (its job ...)".into());
        let failed = report(vec![eu.clone(), us, unchanged.clone(), lost]);
        let healthy = report(vec![eu, unchanged]);
        let steps = |policy, r: &Report| -> Vec<(String, bool)> {
            decide(policy, r)
                .into_iter()
                .map(|(n, s)| (n, s == Step::RollBack))
                .collect()
        };
        let names = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
            v.iter().map(|(n, b)| (n.to_string(), *b)).collect()
        };
        // (policy, report, per target: rolled back?)
        type Case<'a> = (FailurePolicy, &'a Report, Vec<(String, bool)>);
        let cases: [Case; 5] = [
            (
                FailurePolicy::RollbackAll,
                &failed,
                names(&[("eu", true), ("us", false), ("ap", false), ("sa", false)]),
            ),
            (
                FailurePolicy::RollbackFailed,
                &failed,
                names(&[("eu", false), ("us", false), ("ap", false), ("sa", false)]),
            ),
            (
                FailurePolicy::None,
                &failed,
                names(&[("eu", false), ("us", false), ("ap", false), ("sa", false)]),
            ),
            (
                FailurePolicy::RollbackIfAllFail,
                &failed,
                names(&[("eu", false), ("us", false), ("ap", false), ("sa", false)]),
            ),
            (
                FailurePolicy::RollbackAll,
                &healthy,
                names(&[("eu", false), ("ap", false)]),
            ),
        ];
        for (policy, r, want) in cases {
            assert_eq!(steps(policy, r), want, "{policy}");
        }
        let said = decide(FailurePolicy::RollbackAll, &failed);
        assert!(matches!(&said[3].1, Step::Leave(w) if w.starts_with("its shard never reported")));
        assert!(
            matches!(&said[1].1, Step::Leave(w) if w == "rolled-back in its own shard, which settled it")
        );
    }

    #[test]
    fn find_reports_takes_shards_reports_and_skips_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        let json = |r: &Report| serde_json::to_string(r).expect("serializes");
        let mut shard = report(vec![target("eu", TargetOutcome::Deployed)]);
        shard.shard = Some(crate::report::ShardInfo {
            index: 1,
            count: 2,
            digest: None,
        });
        let mut dry = shard.clone();
        dry.dry_run = true;
        // (file, text): an artifact per folder as download-artifact lays them out.
        write("a/rollguard-report-1/report-1.json", &json(&shard));
        write("a/rollguard-report-2/report-2.json", &json(&dry));
        write("a/merged.json", &json(&report(vec![])));
        write("a/other.json", "{\"not\": \"a report\"}");
        write("a/notes.txt", "not json at all");
        write("a/1/2/3/4/5/deep.json", &json(&shard));
        let found = find_reports(&[dir.path().join("a")], None).expect("the folder exists");
        let paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths.len(), 1, "{paths:?}");
        assert!(
            paths[0].ends_with("rollguard-report-1/report-1.json"),
            "{paths:?}"
        );
        // Its own --out is never read back.
        let out = dir.path().join("a/rollguard-report-1/report-1.json");
        assert!(find_reports(&[dir.path().join("a")], Some(&out)).is_ok_and(|f| f.is_empty()));
        let e = find_reports(&[dir.path().join("missing")], None).expect_err("no folder");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("no such folder"), "{e}");
    }

    #[test]
    fn shard_from_flag_then_environment() {
        let env = |v: &str| Env::from([("ROLLGUARD_SHARD".to_string(), v.to_string())]);
        let two = Some(Shard { index: 2, count: 3 });
        assert_eq!(resolve_shard(two, &env("1/3")).ok(), Some(two));
        assert_eq!(resolve_shard(None, &env(" 2/3 ")).ok(), Some(two));
        assert_eq!(resolve_shard(None, &env("")).ok(), Some(None));
        assert_eq!(resolve_shard(None, &Env::new()).ok(), Some(None));
        let e = resolve_shard(None, &env("4/3")).expect_err("out of range");
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().starts_with("$ROLLGUARD_SHARD: \"4/3\""),
            "{e}"
        );
    }

    #[test]
    fn a_rollback_holds_only_while_the_shards_release_is_the_newest() {
        let deployed = |name: &str, revision: u64| {
            let mut t = target(name, TargetOutcome::Deployed);
            t.revision = Some(revision);
            t
        };
        let r = report(vec![
            deployed("eu", 2),
            deployed("us", 2),
            deployed("ap", 2),
        ]);
        let steps: Vec<(String, Step)> = ["eu", "us", "ap"]
            .iter()
            .map(|n| (n.to_string(), Step::RollBack))
            .chain([("cn".to_string(), Step::Leave("failed".into()))])
            .collect();
        // eu: still v2 (its shard's); us: v3 (rolled back already, or a later deploy);
        // ap: unreadable; cn: left by the policy, not asked.
        let newest = HashMap::from([("eu".to_string(), Some(2)), ("us".to_string(), Some(3))]);
        let got = still_theirs(steps, &r, &newest);
        assert_eq!(got[0], ("eu".into(), Step::RollBack));
        assert!(
            matches!(&got[1].1, Step::Leave(why) if why.starts_with("its newest release is v3, not v2")),
            "{:?}",
            got[1]
        );
        assert!(
            matches!(&got[2].1, Step::Leave(why) if why.contains("could not be read")),
            "{:?}",
            got[2]
        );
        assert_eq!(got[3], ("cn".into(), Step::Leave("failed".into())));
    }
}
