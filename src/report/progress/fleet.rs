//! The progress of a fleet larger than the view: a tally of the targets by stage, and the
//! targets worth a line (under way, or failed) as many as there is room for. A live frame
//! taller than the terminal cannot be redrawn in place (the cursor cannot go above the
//! screen), and a CI log's summary of 1,000 targets every 10 s is 1,000 lines each time.

use std::collections::HashMap;

use super::stage::Stage;
use crate::report::TargetOutcome;

/// A line of the live view: a wave's heading, or a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LiveRow {
    Wave(u32),
    Target(String),
}

/// In-progress targets listed by name in a CI log's periodic summary; past it, a tally and
/// how many more.
pub(super) const SUMMARY_TARGETS: usize = 20;

/// The word a target in `stage` is counted under.
fn counted_as(stage: &Stage) -> &'static str {
    match stage {
        Stage::Queued => "queued",
        Stage::Connecting => "connecting",
        Stage::Preflight => "preflight",
        Stage::Applying { .. } => "applying",
        Stage::Waiting(_) => "waiting",
        Stage::Baking { .. } => "baking",
        Stage::Healthy => "healthy",
        Stage::Script(_) => "running a script",
        Stage::RollingBack(_) => "rolling back",
        Stage::Planned { .. } => "planned",
        Stage::Finished { outcome, .. } => outcome.as_str(),
    }
}

/// The words of [`counted_as`] in the order a target goes through them.
const ORDER: [&str; 16] = [
    "queued",
    "connecting",
    "preflight",
    "applying",
    "waiting",
    "baking",
    "healthy",
    "running a script",
    "rolling back",
    "planned",
    "deployed",
    "rolled-back",
    "failed",
    "rollback-failed",
    "skipped",
    "cancelled",
];

/// "1000 targets: 12 connecting, 600 waiting, 388 deployed": how many targets are in each
/// stage, in the order a target goes through them, none that no target is in.
pub(super) fn tally<'a>(stages: impl IntoIterator<Item = &'a Stage>) -> String {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    let mut total = 0usize;
    for stage in stages {
        *counts.entry(counted_as(stage)).or_default() += 1;
        total += 1;
    }
    let parts: Vec<String> = ORDER
        .iter()
        .filter_map(|word| counts.get(word).map(|n| format!("{n} {word}")))
        .collect();
    let noun = if total == 1 { "target" } else { "targets" };
    format!("{total} {noun}: {}", parts.join(", "))
}

/// Whether a target other than `target` has not ended nor become healthy: a healthy target
/// then waits for it (worth a line in a CI log; with nobody left to wait for, its end follows
/// at once).
pub(super) fn others_live(stages: &HashMap<String, Stage>, target: &str) -> bool {
    stages.iter().any(|(name, stage)| {
        name != target
            && !matches!(
                stage,
                Stage::Finished { .. } | Stage::Planned { .. } | Stage::Healthy
            )
    })
}

/// Whether a target keeps a line of its own when not every target fits: it is under way, or
/// it failed (the tally counts the others).
fn worth_a_row(stage: &Stage) -> bool {
    match stage {
        Stage::Queued | Stage::Planned { .. } | Stage::Healthy => false,
        Stage::Finished { outcome, .. } => {
            matches!(
                outcome,
                TargetOutcome::Failed | TargetOutcome::RollbackFailed
            )
        }
        _ => true,
    }
}

/// A line of a live frame.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FrameRow<'a> {
    Row(&'a LiveRow),
    /// Every target counted by stage ([`tally`]).
    Tally(String),
    /// Targets worth a row that found no room.
    More(usize),
}

/// The lines of a live frame with room for `room` of them: every row when they fit; else the
/// tally, then the targets worth a row in config order (wave headings left out) as many as
/// fit, and how many did not.
pub(super) fn fit<'a>(
    rows: &'a [LiveRow],
    stages: &HashMap<String, Stage>,
    room: usize,
) -> Vec<FrameRow<'a>> {
    if rows.len() <= room {
        return rows.iter().map(FrameRow::Row).collect();
    }
    let stage_of = |t: &str| stages.get(t).unwrap_or(&Stage::Queued);
    let targets = || {
        rows.iter().filter_map(|r| match r {
            LiveRow::Target(t) => Some((r, stage_of(t))),
            LiveRow::Wave(_) => None,
        })
    };
    let worth: Vec<&LiveRow> = targets()
        .filter(|(_, stage)| worth_a_row(stage))
        .map(|(r, _)| r)
        .collect();
    let mut frame = vec![FrameRow::Tally(tally(targets().map(|(_, s)| s)))];
    let space = room.saturating_sub(1);
    if worth.len() <= space {
        frame.extend(worth.into_iter().map(FrameRow::Row));
    } else {
        let shown = space.saturating_sub(1);
        frame.extend(worth[..shown].iter().copied().map(FrameRow::Row));
        frame.push(FrameRow::More(worth.len() - shown));
    }
    frame
}

/// The targets a CI log's periodic summary names (those waiting, applying, baking or rolling
/// back, in config order), at most [`SUMMARY_TARGETS`], and how many more there are.
pub(super) fn under_way<'a>(
    targets: &'a [String],
    stages: &'a HashMap<String, Stage>,
) -> (Vec<(&'a str, &'a Stage)>, usize) {
    let all: Vec<(&str, &Stage)> = targets
        .iter()
        .filter_map(|t| stages.get(t).map(|s| (t.as_str(), s)))
        .filter(|(_, s)| {
            matches!(
                s,
                Stage::Waiting(_)
                    | Stage::Baking { .. }
                    | Stage::Applying { .. }
                    | Stage::RollingBack(_)
            )
        })
        .collect();
    let more = all.len().saturating_sub(SUMMARY_TARGETS);
    (all.into_iter().take(SUMMARY_TARGETS).collect(), more)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::progress::stage::WaitProgress;

    fn finished(outcome: TargetOutcome) -> Stage {
        Stage::Finished {
            outcome,
            message: None,
        }
    }

    fn waiting() -> Stage {
        Stage::Waiting(WaitProgress {
            ready: 0,
            total: 2,
            waiting_for: None,
        })
    }

    #[test]
    fn a_tally_counts_every_stage_in_the_order_a_target_goes() {
        let cases: Vec<(Vec<Stage>, &str)> = vec![
            (vec![], "0 targets: "),
            (vec![Stage::Queued], "1 target: 1 queued"),
            (
                vec![
                    finished(TargetOutcome::Deployed),
                    waiting(),
                    Stage::Connecting,
                    waiting(),
                    finished(TargetOutcome::Failed),
                    Stage::Applying { done: 1, total: 4 },
                    Stage::Healthy,
                    Stage::Healthy,
                ],
                "8 targets: 1 connecting, 1 applying, 2 waiting, 2 healthy, 1 deployed, 1 failed",
            ),
            (
                vec![
                    finished(TargetOutcome::Cancelled),
                    finished(TargetOutcome::Skipped),
                    finished(TargetOutcome::RollbackFailed),
                    finished(TargetOutcome::RolledBack),
                    Stage::Planned { changes: 2 },
                    Stage::RollingBack("v1".into()),
                    Stage::Script("smoke".into()),
                    Stage::baking(std::time::Duration::from_secs(3)),
                    Stage::Preflight,
                ],
                "9 targets: 1 preflight, 1 baking, 1 running a script, 1 rolling back, \
                 1 planned, 1 rolled-back, 1 rollback-failed, 1 skipped, 1 cancelled",
            ),
        ];
        for (stages, want) in cases {
            assert_eq!(tally(&stages), want);
        }
    }

    /// A healthy target waits for the others while one has not ended nor become healthy.
    #[test]
    fn a_healthy_target_waits_while_another_is_live() {
        let cases: [(Vec<Stage>, bool); 6] = [
            (vec![Stage::Healthy], false),
            (vec![Stage::Healthy, Stage::Healthy], false),
            (vec![Stage::Healthy, finished(TargetOutcome::Failed)], false),
            (vec![Stage::Healthy, Stage::Planned { changes: 1 }], false),
            (vec![Stage::Healthy, waiting()], true),
            (vec![Stage::Healthy, Stage::RollingBack("v1".into())], true),
        ];
        for (stages, want) in cases {
            let stages: HashMap<String, Stage> = stages
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("t{i}"), s))
                .collect();
            assert_eq!(others_live(&stages, "t0"), want, "{stages:?}");
        }
    }

    fn fleet(stages: &[Stage]) -> (Vec<LiveRow>, HashMap<String, Stage>) {
        let rows = (0..stages.len())
            .map(|i| LiveRow::Target(format!("t{i}")))
            .collect();
        let map = stages
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("t{i}"), s.clone()))
            .collect();
        (rows, map)
    }

    fn names(frame: &[FrameRow<'_>]) -> Vec<String> {
        frame
            .iter()
            .map(|r| match r {
                FrameRow::Row(LiveRow::Target(t)) => t.clone(),
                FrameRow::Row(LiveRow::Wave(w)) => format!("wave {w}"),
                FrameRow::Tally(t) => t.clone(),
                FrameRow::More(n) => format!("+{n}"),
            })
            .collect()
    }

    #[test]
    fn a_frame_that_fits_is_every_row() {
        let rows = vec![
            LiveRow::Wave(0),
            LiveRow::Target("eu".into()),
            LiveRow::Wave(1),
            LiveRow::Target("us".into()),
        ];
        let frame = fit(&rows, &HashMap::new(), 4);
        assert_eq!(names(&frame), ["wave 0", "eu", "wave 1", "us"]);
    }

    #[test]
    fn a_frame_too_tall_keeps_the_tally_and_the_targets_under_way_or_failed() {
        let deployed = finished(TargetOutcome::Deployed);
        let (rows, stages) = fleet(&[
            deployed.clone(),
            waiting(),
            Stage::Queued,
            finished(TargetOutcome::Failed),
            deployed.clone(),
            finished(TargetOutcome::Skipped),
            Stage::Connecting,
        ]);
        let tally = "7 targets: 1 queued, 1 connecting, 1 waiting, 2 deployed, 1 failed, 1 skipped";
        // Room for the tally and every target worth a row.
        assert_eq!(names(&fit(&rows, &stages, 4)), [tally, "t1", "t3", "t6"]);
        // Not for all of them: as many as fit, then how many more.
        assert_eq!(names(&fit(&rows, &stages, 3)), [tally, "t1", "+2"]);
        assert_eq!(names(&fit(&rows, &stages, 2)), [tally, "+3"]);
        // A terminal of one line still gets the tally; none is never more than it has.
        assert_eq!(names(&fit(&rows, &stages, 1)), [tally, "+3"]);
        assert_eq!(names(&fit(&rows, &stages, 0)), [tally, "+3"]);
        let (rows, stages) = fleet(&[deployed.clone(), deployed.clone(), deployed]);
        assert_eq!(names(&fit(&rows, &stages, 2)), ["3 targets: 3 deployed"]);
    }

    #[test]
    fn a_summary_names_the_first_targets_under_way_and_counts_the_rest() {
        let mut stages: Vec<Stage> = vec![Stage::Connecting, finished(TargetOutcome::Deployed)];
        stages.extend((0..SUMMARY_TARGETS + 5).map(|_| waiting()));
        let (rows, map) = fleet(&stages);
        let targets: Vec<String> = rows
            .iter()
            .filter_map(|r| match r {
                LiveRow::Target(t) => Some(t.clone()),
                LiveRow::Wave(_) => None,
            })
            .collect();
        let (named, more) = under_way(&targets, &map);
        assert_eq!(named.len(), SUMMARY_TARGETS);
        assert_eq!(named.first().map(|n| n.0), Some("t2"));
        assert_eq!(more, 5);
        let (named, more) = under_way(&targets[..4], &map);
        assert_eq!(named.iter().map(|n| n.0).collect::<Vec<_>>(), ["t2", "t3"]);
        assert_eq!(more, 0);
    }
}
