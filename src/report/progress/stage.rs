//! Where a target is, and the words for it (the live view, the CI lines, the tally).

use std::time::Duration;

use crate::report::TargetOutcome;
use crate::util::duration::format_duration;

/// Progress of a wait, for the live display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitProgress {
    pub ready: usize,
    pub total: usize,
    /// The first object still in progress and why, e.g. "Deployment shop/web: 1/3 ready".
    pub waiting_for: Option<String>,
}

/// Where a target is.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    Queued,
    Connecting,
    /// Every object sent with `dryRun=All` before the first write (the preflight).
    Preflight,
    Applying {
        done: usize,
        total: usize,
    },
    Waiting(WaitProgress),
    /// Healthy, and its wave's bake runs with the pods still watched: this much of it is left
    /// (whole seconds, rounded up).
    Baking {
        left_secs: u64,
        /// The last value of each check (`checks:`), e.g. "error-rate 0.02, healthz 200".
        checks: Option<String>,
    },
    /// Healthy, baked, its pipeline done: it waits for the rest of the fleet (deployed once
    /// nothing can roll it back).
    Healthy,
    /// Rolling back (used by the rollback step).
    RollingBack(String),
    /// A script stage (or its rollback command) is running.
    Script(String),
    Finished {
        outcome: TargetOutcome,
        message: Option<String>,
    },
    /// A dry run's target was asked everything: it would change this many objects (a dry
    /// run never says "deployed").
    Planned {
        changes: usize,
    },
}

impl Stage {
    /// The bake's countdown with `left` of it, in whole seconds rounded up (a bake is never
    /// shown as over before it is).
    pub fn baking(left: Duration) -> Stage {
        Stage::baking_with(left, None)
    }

    /// [`Stage::baking`] with the checks' last values beside the countdown.
    pub fn baking_with(left: Duration, checks: Option<String>) -> Stage {
        let left_secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        Stage::Baking { left_secs, checks }
    }
}

/// The words for a stage, without color.
pub fn describe_stage(stage: &Stage) -> String {
    match stage {
        Stage::Queued => "queued".into(),
        Stage::Connecting => "connecting".into(),
        Stage::Preflight => "preflight: dry run of every object".into(),
        Stage::Applying { done, total } => format!("applying {done}/{total}"),
        Stage::Waiting(p) => match &p.waiting_for {
            Some(w) => format!("waiting {}/{} ready; {w}", p.ready, p.total),
            None => format!("waiting {}/{} ready", p.ready, p.total),
        },
        Stage::Baking { left_secs, checks } => {
            let left = match left_secs {
                0 => "0s".to_string(),
                secs => format_duration(Duration::from_secs(*secs)),
            };
            match checks {
                Some(checks) if !checks.is_empty() => format!("baking, {left} left; {checks}"),
                _ => format!("baking, {left} left"),
            }
        }
        Stage::Healthy => "healthy, waiting for the other targets".into(),
        Stage::RollingBack(what) => format!("rolling back: {what}"),
        Stage::Script(name) => format!("running script stage {name}"),
        Stage::Planned { changes: 0 } => "planned: no changes".into(),
        Stage::Planned { changes: 1 } => "planned: would change 1 object".into(),
        Stage::Planned { changes } => format!("planned: would change {changes} objects"),
        Stage::Finished { outcome, message } => {
            let word = outcome.as_str();
            match message {
                // "cancelled by SIGTERM", not "cancelled: cancelled by SIGTERM".
                Some(m) if m.starts_with(word) => m.clone(),
                Some(m) => format!("{word}: {m}"),
                None => word.to_string(),
            }
        }
    }
}
