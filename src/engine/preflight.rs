//! The preflight dry run: with every lock held and before the first write anywhere, the
//! whole set is sent to every target as server-side applies with `dryRun=All` (the requests
//! `rollguard diff` makes, through `cluster::diff`; without its reads of the live objects
//! and its diffs where no one reads the answers, [`Ask::Refusals`]), so that a field the server refuses (a wrong
//! type, an immutable selector, a quota, an admission webhook) stops the deploy with nothing
//! written, instead of surfacing mid-apply after earlier objects reached every target and
//! the fleet rolls back. `preflight: false` in the config skips it; `--dry-run` is already
//! this dry run and does not run it twice.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cluster::apply::NOT_APPLIED;
use crate::engine::plan::Plan;
use crate::engine::target_run::TargetRun;
use crate::report::plan::TargetPlan;
use crate::report::{Failure, TargetOutcome};
use crate::util::in_order::in_order;

/// What the preflight asks of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Nothing: the target has stopped, or holds no lock.
    Nothing,
    /// What the server refuses: one `dryRun=All` apply per object, no read of the live
    /// objects, no diff (what a deploy needs to know before its first write).
    Refusals,
    /// The refusals and the comparison with the live objects, as `diff` shows it: for a
    /// reader of the answers (the no-op check, the re-plan's display).
    Compare,
}

/// What the preflight of one target found.
#[derive(Debug)]
pub enum Checked {
    /// Not asked: the target had already stopped, or has no connection.
    NotAsked,
    /// Every object passed: with [`Ask::Compare`] the server's answers as `diff` would show
    /// them, else None (only refusals were asked about).
    Passed(Option<Box<TargetPlan>>),
    /// The server refused objects, or could not be asked about them.
    Refused(Vec<Failure>),
    Cancelled,
}

/// Asks every target that goes on (`asked[i]` not [`Ask::Nothing`]) about the whole set
/// with `dryRun=All`, up to the config's `concurrency` targets at once and, per target, the
/// apply's own in-flight bound. Results in the order of `runs`.
pub async fn dry_run_all(
    plan: &Arc<Plan>,
    runs: &[TargetRun],
    asked: &[Ask],
    cancel: &CancellationToken,
) -> Vec<Checked> {
    let checks = runs.iter().zip(asked).map(|(run, &ask)| async move {
        if ask == Ask::Nothing {
            return Checked::NotAsked;
        }
        let span = tracing::error_span!("target", target = %run.target.name);
        check_one(plan, run, ask, cancel).instrument(span).await
    });
    in_order(checks.collect(), plan.config.concurrency).await
}

async fn check_one(plan: &Plan, run: &TargetRun, ask: Ask, cancel: &CancellationToken) -> Checked {
    let (Some(access), Some(resolution)) = (run.access.as_ref(), run.resolution()) else {
        return Checked::NotAsked;
    };
    let default_namespace = plan
        .config
        .default_namespace(&run.target, &access.context_namespace);
    let deadline = Instant::now() + plan.config.wait.timeout;
    let name = &run.target.name;
    let (found, cancelled) = if ask == Ask::Compare {
        plan.server_dry_run(
            name,
            access,
            resolution,
            default_namespace,
            deadline,
            cancel,
        )
        .await
    } else {
        plan.server_check(
            name,
            access,
            resolution,
            default_namespace,
            deadline,
            cancel,
        )
        .await
    };
    if cancelled {
        return Checked::Cancelled;
    }
    if found.errors.is_empty() {
        Checked::Passed((ask == Ask::Compare).then(|| Box::new(found)))
    } else {
        tracing::info!(errors = found.errors.len(), "refused in the preflight");
        Checked::Refused(found.errors)
    }
}

/// Whether a preflight failure is the server's refusal of the object (bad input: exit 2),
/// not a target that could not be asked (unreachable, past its deadline, rate limited).
pub fn is_refusal(reason: &str) -> bool {
    !matches!(
        reason,
        "Unreachable" | "Timeout" | "RateLimited" | "Cancelled" | "KindNotServed"
    ) && reason != NOT_APPLIED
}

/// How the preflight ends the run, when it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightStop {
    /// Cancelled while asking: the targets end cancelled, nothing written.
    pub cancelled: bool,
    /// Some target's object was refused by its server (exit 2), not only unreachable.
    pub refused: bool,
    /// What every target that was not refused itself says.
    pub message: String,
    /// What a refused target says before its first failure's headline.
    pub refused_message: String,
}

/// Whether the preflight stops the run, and what each target then says (pure). `found` is
/// per target (name, what its preflight found). Under every failure policy: nothing was
/// written, so nothing rolls back and the fleet stays on one version.
pub fn preflight_verdict(found: &[(&str, &Checked)]) -> Option<PreflightStop> {
    if found.iter().any(|(_, c)| matches!(c, Checked::Cancelled)) {
        return Some(PreflightStop {
            cancelled: true,
            refused: false,
            message: "cancelled during the preflight dry run; nothing was written".into(),
            refused_message: String::new(),
        });
    }
    let stopped: Vec<(&str, &Vec<Failure>)> = found
        .iter()
        .filter_map(|(name, c)| match c {
            Checked::Refused(failures) => Some((*name, failures)),
            _ => None,
        })
        .collect();
    let (first_target, failures) = stopped.first()?;
    let refused = stopped
        .iter()
        .any(|(_, fs)| fs.iter().any(|f| is_refusal(&f.reason)));
    let what = if refused {
        "refused"
    } else {
        "could not check"
    };
    let first = failures
        .first()
        .map(|f| f.object.clone())
        .unwrap_or_else(|| "an object".into());
    let mut object_count: usize = stopped.iter().map(|(_, fs)| fs.len()).sum();
    object_count = object_count.saturating_sub(1);
    let more = match object_count {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let names: Vec<&str> = stopped.iter().map(|(n, _)| *n).collect();
    let see = if names.len() == 1 {
        format!("see {}", names[0])
    } else {
        format!("see {}", names.join(", "))
    };
    Some(PreflightStop {
        cancelled: false,
        refused,
        message: format!(
            "not deployed: the preflight dry run {what} {first} on {first_target}{more} ({see}); nothing was written anywhere, so nothing rolls back: fix it and run again (`preflight: false` skips the check)"
        ),
        refused_message: format!(
            "not deployed: the preflight dry run {what} it, nothing was written anywhere and nothing rolls back"
        ),
    })
}

/// The outcome of a target when the preflight stops the run.
pub fn stopped_outcome(stop: &PreflightStop, checked: &Checked) -> TargetOutcome {
    match checked {
        _ if stop.cancelled => TargetOutcome::Cancelled,
        Checked::Refused(_) => TargetOutcome::Failed,
        _ => TargetOutcome::Skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(object: &str, reason: &str) -> Checked {
        Checked::Refused(vec![Failure {
            object: object.into(),
            reason: reason.into(),
            message: "m".into(),
            ..Default::default()
        }])
    }

    #[test]
    fn refusals_are_told_from_targets_that_could_not_be_asked() {
        for (reason, want) in [
            ("Invalid", true),
            ("InvalidField", true),
            ("FieldNotDeclared", true),
            ("Forbidden", true),
            ("Conflict", true),
            ("Unreachable", false),
            ("Timeout", false),
            ("RateLimited", false),
            ("NotApplied", false),
        ] {
            assert_eq!(is_refusal(reason), want, "{reason}");
        }
    }

    #[test]
    fn the_preflight_stops_on_any_refusal_and_says_where() {
        let passed = || Checked::Passed(Some(Box::new(TargetPlan::new("x"))));
        // (per target, stops?, refused?, words in the others' message)
        type Case<'a> = (Vec<(&'a str, Checked)>, Option<(bool, &'a str)>);
        let cases: Vec<Case> = vec![
            (vec![("eu", passed()), ("us", passed())], None),
            (vec![("eu", passed()), ("us", Checked::NotAsked)], None),
            (vec![], None),
            (
                vec![
                    ("eu", passed()),
                    ("us", refused("Deployment shop/web", "Invalid")),
                    ("ap", passed()),
                ],
                Some((true, "refused Deployment shop/web on us (see us)")),
            ),
            (
                vec![
                    ("eu", refused("ConfigMap shop/a", "InvalidField")),
                    ("us", refused("ConfigMap shop/a", "InvalidField")),
                ],
                Some((true, "on eu and 1 more (see eu, us)")),
            ),
            (
                vec![("eu", passed()), ("us", refused("cluster", "Unreachable"))],
                Some((false, "could not check cluster on us")),
            ),
        ];
        for (found, want) in cases {
            let views: Vec<(&str, &Checked)> = found.iter().map(|(n, c)| (*n, c)).collect();
            let got = preflight_verdict(&views);
            match (want, got) {
                (None, None) => {}
                (Some((refused, part)), Some(stop)) => {
                    assert_eq!(stop.refused, refused, "{found:?}");
                    assert!(!stop.cancelled);
                    assert!(stop.message.contains(part), "{part}: {}", stop.message);
                    assert!(stop.message.contains("nothing was written anywhere"));
                    for (_, c) in &found {
                        let outcome = stopped_outcome(&stop, c);
                        let want = match c {
                            Checked::Refused(_) => TargetOutcome::Failed,
                            _ => TargetOutcome::Skipped,
                        };
                        assert_eq!(outcome, want);
                    }
                }
                (want, got) => panic!("{found:?}: want {want:?}, got {got:?}"),
            }
        }
        let cancelled = [("eu", Checked::Cancelled), ("us", passed())];
        let views: Vec<(&str, &Checked)> = cancelled.iter().map(|(n, c)| (*n, c)).collect();
        let stop = preflight_verdict(&views).expect("a stop");
        assert!(stop.cancelled);
        assert_eq!(
            stopped_outcome(&stop, &cancelled[1].1),
            TargetOutcome::Cancelled
        );
    }
}
