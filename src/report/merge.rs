//! `rollguard report merge`: the reports of one deploy's shards (`deploy --shard I/N`) as one
//! report, with the outcome and exit code computed as for a whole-fleet run. Pure: the
//! command reads the files and runs the sinks.

use super::model::{Report, TargetOutcome, TargetReport, overall_outcome, summary_line};
use crate::util::shard::owner;

/// One shard's report and the file it came from (named in every refusal).
#[derive(Debug, Clone)]
pub struct ShardFile {
    pub path: String,
    pub report: Report,
}

/// Why the reports cannot be one deploy's shards; each names the files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "no shard report in {0}: pass the folders the deploy jobs' `--report` files were downloaded to"
    )]
    NoReports(String),
    #[error(
        "{path} is the report of a run without --shard: `report merge` takes only the reports of `rollguard deploy --shard I/N`; leave it out of the folders"
    )]
    NotSharded { path: String },
    #[error(
        "{path} has {what} {found} but {first} has {want}: the folders hold reports of more than one deploy; pass only the reports of one run's shards"
    )]
    Mismatch {
        what: &'static str,
        first: String,
        want: String,
        path: String,
        found: String,
    },
    #[error(
        "{first} and {path} are both shard {shard}: keep only the report of the shard's last run"
    )]
    Duplicate {
        shard: String,
        first: String,
        path: String,
    },
}

/// The combined report and what was missing.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub report: Report,
    /// N, the number of shards.
    pub count: u32,
    /// The shards (1..=N) that wrote no report: each counts as failed.
    pub missing: Vec<u32>,
}

/// The config's targets in order, with their waves: orders the rows and names the targets
/// of a shard that never reported.
pub type Fleet<'a> = &'a [(String, u32)];

/// Combines the shards' reports; refuses files of different deploys. A shard with no
/// report counts as failed: with `fleet`, each of its targets (by the same rendezvous
/// hashing the deploy used) is a failed row; without, one failed row for the shard.
pub fn merge(files: Vec<ShardFile>, fleet: Option<Fleet<'_>>) -> Result<Merged, MergeError> {
    let first = files
        .first()
        .ok_or_else(|| MergeError::NoReports(String::new()))?;
    let Some(shard) = &first.report.shard else {
        return Err(MergeError::NotSharded {
            path: first.path.clone(),
        });
    };
    let count = shard.count;
    let mut seen: Vec<(u32, &str)> = Vec::new();
    for file in &files {
        check_same(first, file)?;
        let index = file.report.shard.as_ref().map_or(0, |s| s.index);
        if let Some((_, other)) = seen.iter().find(|(i, _)| *i == index) {
            return Err(MergeError::Duplicate {
                shard: format!("{index}/{count}"),
                first: other.to_string(),
                path: file.path.clone(),
            });
        }
        seen.push((index, &file.path));
    }
    let missing: Vec<u32> = (1..=count)
        .filter(|i| !seen.iter().any(|(s, _)| s == i))
        .collect();
    let started_at = files.iter().map(|f| f.report.started_at).min();
    let finished_at = files.iter().map(|f| f.report.finished_at).max();
    let (started_at, finished_at) = match (started_at, finished_at) {
        (Some(s), Some(f)) => (s, f),
        _ => (first.report.started_at, first.report.finished_at),
    };
    // A shard's own outcome may be more serious than its targets' (a cancelled run).
    let most_serious = files
        .iter()
        .map(|f| f.report.outcome)
        .max_by_key(|o| o.severity());
    let (app, commit) = (first.report.app.clone(), first.report.commit.clone());
    let mut targets: Vec<TargetReport> = files.into_iter().flat_map(|f| f.report.targets).collect();
    for &index in &missing {
        targets.extend(missing_rows(index, count, fleet, &targets, started_at));
    }
    sort_rows(&mut targets, fleet);
    let mut report = Report::new(app, commit, started_at, finished_at, targets);
    if let Some(outcome) = most_serious
        && outcome.severity() > report.outcome.severity()
    {
        report.outcome = outcome;
        report.summary = summary_line(&report);
    }
    debug_assert!(report.outcome.severity() >= overall_outcome(&report.targets).severity());
    Ok(Merged {
        report,
        count,
        missing,
    })
}

/// `file` is of the same deploy as `first`: app, commit, N and manifests.
fn check_same(first: &ShardFile, file: &ShardFile) -> Result<(), MergeError> {
    let Some(shard) = &file.report.shard else {
        return Err(MergeError::NotSharded {
            path: file.path.clone(),
        });
    };
    let first_shard = first.report.shard.as_ref();
    let sha = |r: &Report| {
        r.commit
            .as_ref()
            .map_or("no commit".to_string(), |c| format!("commit {}", c.sha))
    };
    let digests = (
        first_shard.and_then(|s| s.digest.clone()),
        shard.digest.clone(),
    );
    let differs: [(&'static str, String, String); 4] = [
        ("app", first.report.app.clone(), file.report.app.clone()),
        ("", sha(&first.report), sha(&file.report)),
        (
            "N =",
            first_shard.map_or(0, |s| s.count).to_string(),
            shard.count.to_string(),
        ),
        match digests {
            (Some(a), Some(b)) => ("manifests", a, b),
            _ => ("manifests", String::new(), String::new()),
        },
    ];
    for (what, want, found) in differs {
        if want != found {
            let what = if what.is_empty() { "the" } else { what };
            return Err(MergeError::Mismatch {
                what,
                first: first.path.clone(),
                want,
                path: file.path.clone(),
                found,
            });
        }
    }
    Ok(())
}

/// The failed rows of a shard that never reported: its targets (those of `fleet` it owns
/// that no report has), else one row for the shard.
fn missing_rows(
    index: u32,
    count: u32,
    fleet: Option<Fleet<'_>>,
    reported: &[TargetReport],
    at: jiff::Timestamp,
) -> Vec<TargetReport> {
    let why = format!(
        "shard {index}/{count} never reported (its job failed or was cancelled before it wrote its report): counted as failed; see that job's log"
    );
    let row = |name: &str, wave: u32| {
        let mut t = TargetReport::new(name, TargetOutcome::Failed, at);
        t.wave = wave;
        t.message = Some(why.clone());
        t
    };
    match fleet {
        Some(fleet) => fleet
            .iter()
            .filter(|(name, _)| owner(name, count) == index)
            .filter(|(name, _)| !reported.iter().any(|t| &t.name == name))
            .map(|(name, wave)| row(name, *wave))
            .collect(),
        None => vec![row(&format!("shard {index}/{count}"), 0)],
    }
}

/// The config's order when known (targets it lacks after, by wave then name), else by wave
/// then name.
fn sort_rows(targets: &mut [TargetReport], fleet: Option<Fleet<'_>>) {
    let position = |t: &TargetReport| {
        fleet
            .and_then(|f| f.iter().position(|(name, _)| *name == t.name))
            .unwrap_or(usize::MAX)
    };
    targets.sort_by(|a, b| (position(a), a.wave, &a.name).cmp(&(position(b), b.wave, &b.name)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::exit_code;
    use crate::report::model::ShardInfo;
    use crate::report::model::tests::{image_failure, report, target};

    fn shard(index: u32, count: u32, targets: Vec<TargetReport>) -> ShardFile {
        let mut r = report(targets);
        r.shard = Some(ShardInfo {
            index,
            count,
            digest: Some("d1".into()),
        });
        ShardFile {
            path: format!("shard-{index}/report.json"),
            report: r,
        }
    }

    fn names(r: &Report) -> Vec<(&str, TargetOutcome)> {
        r.targets
            .iter()
            .map(|t| (t.name.as_str(), t.outcome))
            .collect()
    }

    #[test]
    fn three_shards_make_one_report_in_config_order() {
        use TargetOutcome::*;
        let mut failed = target("us", RolledBack);
        failed.failures.push(image_failure());
        let files = vec![
            shard(2, 3, vec![failed, target("ap", RolledBack)]),
            shard(1, 3, vec![target("eu", Deployed)]),
            shard(3, 3, vec![]),
        ];
        let fleet: Vec<(String, u32)> = ["eu", "us", "ap"]
            .iter()
            .map(|n| (n.to_string(), 0))
            .collect();
        let merged = merge(files.clone(), Some(&fleet)).expect("one deploy");
        assert_eq!(
            names(&merged.report),
            [("eu", Deployed), ("us", RolledBack), ("ap", RolledBack)]
        );
        assert!(merged.missing.is_empty());
        assert_eq!(merged.report.outcome, RolledBack);
        assert_eq!(exit_code(&merged.report), 1);
        assert!(
            merged.report.summary.contains("us: ImagePullBackOff"),
            "{}",
            merged.report.summary
        );
        // Without the config: by wave, then name.
        let merged = merge(files, None).expect("one deploy");
        let order: Vec<&str> = merged
            .report
            .targets
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(order, ["ap", "eu", "us"]);
    }

    #[test]
    fn a_shard_that_never_reported_counts_as_failed() {
        use TargetOutcome::*;
        // Names the fleet puts in shards 1 and 3 of 3 (util::shard's pinned table).
        let fleet: Vec<(String, u32)> = ["us", "sa", "edge-0001", "ap"]
            .iter()
            .map(|n| (n.to_string(), 0))
            .collect();
        let files = vec![shard(
            1,
            3,
            vec![target("us", Deployed), target("ap", Deployed)],
        )];
        let merged = merge(files.clone(), Some(&fleet)).expect("one deploy");
        assert_eq!(merged.missing, [2, 3]);
        assert_eq!(
            names(&merged.report),
            [
                ("us", Deployed),
                ("sa", Failed),
                ("edge-0001", Failed),
                ("ap", Deployed)
            ]
        );
        let why = merged.report.targets[1].message.clone().unwrap_or_default();
        assert!(why.starts_with("shard 3/3 never reported"), "{why}");
        assert_eq!(exit_code(&merged.report), 1);
        // Without the config, a row per missing shard.
        let merged = merge(files, None).expect("one deploy");
        let rows: Vec<&str> = merged
            .report
            .targets
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(rows, ["ap", "shard 2/3", "shard 3/3", "us"]);
        assert_eq!(merged.report.outcome, Failed);
    }

    #[test]
    fn every_shard_deployed_is_exit_0() {
        use TargetOutcome::*;
        let files = vec![
            shard(1, 2, vec![target("eu", Deployed)]),
            shard(2, 2, vec![target("us", Deployed)]),
        ];
        let merged = merge(files, None).expect("one deploy");
        assert_eq!(merged.report.outcome, Deployed);
        assert_eq!(exit_code(&merged.report), 0);
        assert_eq!(merged.report.summary, "deployed to 2 of 2");
        assert_eq!(merged.report.shard, None);
    }

    #[test]
    fn reports_of_different_deploys_are_refused_by_name() {
        let base = || {
            vec![
                shard(1, 2, vec![target("eu", TargetOutcome::Deployed)]),
                shard(2, 2, vec![]),
            ]
        };
        // (what to change in the second file, the start of the refusal)
        type Change = fn(&mut ShardFile);
        let cases: [(Change, &str); 6] = [
            (
                |f| f.report.app = "cart".into(),
                "shard-2/report.json has app cart but shard-1/report.json has shop",
            ),
            (
                |f| {
                    if let Some(c) = f.report.commit.as_mut() {
                        c.sha = "feed".into()
                    }
                },
                "shard-2/report.json has the commit feed but",
            ),
            (
                |f| {
                    f.report.shard = Some(ShardInfo {
                        index: 2,
                        count: 3,
                        digest: None,
                    })
                },
                "shard-2/report.json has N = 3 but shard-1/report.json has 2",
            ),
            (
                |f| {
                    f.report.shard = Some(ShardInfo {
                        index: 2,
                        count: 2,
                        digest: Some("d2".into()),
                    })
                },
                "shard-2/report.json has manifests d2 but",
            ),
            (
                |f| {
                    f.report.shard = Some(ShardInfo {
                        index: 1,
                        count: 2,
                        digest: None,
                    })
                },
                "shard-1/report.json and shard-2/report.json are both shard 1/2",
            ),
            (
                |f| f.report.shard = None,
                "shard-2/report.json is the report of a run without --shard",
            ),
        ];
        for (change, want) in cases {
            let mut files = base();
            change(&mut files[1]);
            let e = merge(files, None).expect_err(want).to_string();
            assert!(e.starts_with(want), "{e}");
        }
        assert!(merge(base(), None).is_ok());
    }
}
