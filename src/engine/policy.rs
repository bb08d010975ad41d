//! The rollback decisions, as pure functions: which targets roll back under the failure
//! policy or on cancel, what a rollback leaves in place, which revision a manual rollback goes
//! to, and the summary line.
//!
//! A rollback never prunes: objects that the failed revision added and the last good one does
//! not have stay, and are listed so that a human can decide.

use std::collections::HashSet;

use crate::config::FailurePolicy;
use crate::release::{ObjectRef, ReleaseRecord, ReleaseStatus};
use crate::report::TargetOutcome;
use crate::stages::env::RollbackReason;

/// What the policy needs to know of one target after the deploy phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetState {
    /// At least one write of the new revision reached the cluster (it may be half-applied).
    pub received: bool,
    /// The target failed (apply error, fail-fast, timeout, unreachable).
    pub failed: bool,
}

/// For each target, whether it rolls back. A target that never received the new revision
/// has nothing to undo, whatever the policy.
pub fn targets_to_roll_back(policy: FailurePolicy, targets: &[TargetState]) -> Vec<bool> {
    let any_failed = targets.iter().any(|t| t.failed);
    let all_failed = !targets.is_empty() && targets.iter().all(|t| t.failed);
    targets
        .iter()
        .map(|t| {
            t.received
                && match policy {
                    FailurePolicy::RollbackAll => any_failed,
                    FailurePolicy::RollbackFailed => t.failed,
                    FailurePolicy::RollbackIfAllFail => all_failed,
                    FailurePolicy::None => false,
                }
        })
        .collect()
}

/// Why a target of a deploy rolls back, from its outcome before the rollback: its own
/// failure (`failed`, also one that happened before a cancel), else the policy
/// (`on_failure` because another target failed, or `on_cancel` for one a signal stopped).
pub fn rollback_reason(outcome: crate::report::TargetOutcome) -> RollbackReason {
    use crate::report::TargetOutcome::{Failed, RollbackFailed};
    match outcome {
        Failed | RollbackFailed => RollbackReason::Failed,
        _ => RollbackReason::Policy,
    }
}

/// On cancellation (`on_cancel`): roll back every target that received the new revision,
/// or leave everything as it is.
pub fn targets_to_roll_back_on_cancel(rollback: bool, targets: &[TargetState]) -> Vec<bool> {
    targets.iter().map(|t| rollback && t.received).collect()
}

/// Objects the failed revision applied that the last good one does not have: they stay in
/// place (never pruned) and are reported. Compared by group, kind, namespace and name.
pub fn left_in_place(failed: &[ObjectRef], last_good: &[ObjectRef]) -> Vec<ObjectRef> {
    let good: HashSet<_> = last_good.iter().map(ObjectRef::identity).collect();
    let mut seen = HashSet::new();
    failed
        .iter()
        .filter(|o| !good.contains(&o.identity()) && seen.insert(o.identity()))
        .cloned()
        .collect()
}

/// The result of one target's rollback, for the summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackResult {
    pub target: String,
    pub ok: bool,
    /// Why it failed (first line), or a note.
    pub message: Option<String>,
}

/// Why each target is rolled back that did not fail itself ("policy rollback-all: us
/// failed"), by index; None for the others. `names` in the order of `targets`.
pub fn policy_reasons(
    policy: FailurePolicy,
    targets: &[TargetState],
    decisions: &[bool],
    names: &[&str],
) -> Vec<Option<String>> {
    let failed: Vec<&str> = targets
        .iter()
        .zip(names)
        .filter(|(t, _)| t.failed)
        .map(|(_, n)| *n)
        .collect();
    targets
        .iter()
        .zip(decisions)
        .map(|(t, roll_back)| {
            (*roll_back && !t.failed && !failed.is_empty())
                .then(|| format!("policy {policy}: {} failed", failed.join(", ")))
        })
        .collect()
}

/// "rolled back 2 of 3; eu: connection refused" (empty when nothing rolled back).
pub fn summary(results: &[RollbackResult]) -> String {
    if results.is_empty() {
        return String::new();
    }
    let ok = results.iter().filter(|r| r.ok).count();
    let mut text = format!("rolled back {ok} of {}", results.len());
    for failed in results.iter().filter(|r| !r.ok) {
        let why = failed
            .message
            .as_deref()
            .and_then(|m| m.lines().next())
            .unwrap_or("rollback failed");
        text.push_str(&format!("; {}: {why}", failed.target));
    }
    text
}

/// Why a manual rollback was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollbackChoiceError {
    #[error("there is no release history for this app here: nothing to roll back to")]
    NoHistory,
    #[error(
        "there is no earlier good revision to roll back to (good = deployed or superseded); name one with --revision"
    )]
    NoEarlierGood,
    #[error("revision {0} does not exist (see `rollguard history`)")]
    Missing(u64),
    #[error(
        "revision {revision} is {status}, not a revision that ran healthy; add --force to roll back to it anyway"
    )]
    NotGood {
        revision: u64,
        status: ReleaseStatus,
    },
}

/// The revision a manual rollback goes to. `requested`: `--revision N`; default the newest good
/// revision (deployed or superseded) older than the current (newest) one whose manifests
/// differ from the current ones.
pub fn choose_manual_target(
    records: &[ReleaseRecord],
    requested: Option<u64>,
    force: bool,
) -> Result<u64, RollbackChoiceError> {
    if records.is_empty() {
        return Err(RollbackChoiceError::NoHistory);
    }
    if let Some(revision) = requested {
        let record = records
            .iter()
            .find(|r| r.revision == revision)
            .ok_or(RollbackChoiceError::Missing(revision))?;
        if !record.status.was_good() && !force {
            return Err(RollbackChoiceError::NotGood {
                revision,
                status: record.status,
            });
        }
        return Ok(revision);
    }
    // The current revision is the newest one, whatever its status: after a failure that was
    // left in place, going back means the last good one before it.
    let current = records
        .iter()
        .max_by_key(|r| r.revision)
        .ok_or(RollbackChoiceError::NoHistory)?;
    records
        .iter()
        .filter(|r| r.revision < current.revision && r.status.was_good())
        // Going "back" to the same manifests would change nothing (e.g. the revision an
        // automatic rollback re-applied).
        .filter(|r| r.digest.is_none() || current.digest.is_none() || r.digest != current.digest)
        .max_by_key(|r| r.revision)
        .map(|r| r.revision)
        .ok_or(RollbackChoiceError::NoEarlierGood)
}

/// What a rollback that did not end healthy leaves its target as. `sent_unverified`: the
/// run was cancelled before its rollout was seen healthy. Otherwise the rollback failed,
/// unless its apply stopped (`stopped_after`: what it had re-applied) having re-applied
/// every object the failed revision sent (`sent`): then nothing of the new revision stayed,
/// and what the rollback could not send never received it either (a 429 whose Retry-After
/// passed the deadline, on both): the target only failed.
pub fn unfinished_rollback_outcome(
    sent_unverified: bool,
    sent: &[ObjectRef],
    stopped_after: Option<&[ObjectRef]>,
) -> TargetOutcome {
    if sent_unverified {
        return TargetOutcome::Cancelled;
    }
    let Some(reapplied) = stopped_after else {
        return TargetOutcome::RollbackFailed;
    };
    let back: HashSet<_> = reapplied.iter().map(ObjectRef::identity).collect();
    if sent.iter().all(|o| back.contains(&o.identity())) {
        TargetOutcome::Failed
    } else {
        TargetOutcome::RollbackFailed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_reason_table() {
        use crate::report::TargetOutcome::*;
        for (outcome, want) in [
            (Failed, RollbackReason::Failed),
            (RollbackFailed, RollbackReason::Failed),
            (Deployed, RollbackReason::Policy),
            (Cancelled, RollbackReason::Policy),
            (Skipped, RollbackReason::Policy),
        ] {
            assert_eq!(rollback_reason(outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn an_unfinished_rollback_fails_its_target_only_when_something_of_the_new_revision_stayed() {
        let object = |kind: &str, name: &str| ObjectRef {
            api_version: if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            }
            .into(),
            kind: kind.into(),
            namespace: Some("shop".into()),
            name: name.into(),
        };
        let cm = object("ConfigMap", "web-config");
        let web = object("Deployment", "web");
        use TargetOutcome::{Cancelled, Failed, RollbackFailed};
        // (sent_unverified, sent by the deploy, re-applied when the rollback's apply
        // stopped (None: it finished, then failed), outcome)
        let cases = [
            (false, vec![cm.clone()], Some(vec![cm.clone()]), Failed),
            (
                false,
                vec![cm.clone(), web.clone()],
                Some(vec![cm.clone()]),
                RollbackFailed,
            ),
            (false, vec![cm.clone()], Some(vec![]), RollbackFailed),
            (
                false,
                vec![web.clone()],
                Some(vec![cm.clone()]),
                RollbackFailed,
            ),
            // Re-applied everything, then unhealthy: the rollback failed.
            (false, vec![cm.clone()], None, RollbackFailed),
            (true, vec![cm.clone()], Some(vec![]), Cancelled),
            (true, vec![cm.clone()], None, Cancelled),
        ];
        for (unverified, sent, stopped_after, want) in cases {
            assert_eq!(
                unfinished_rollback_outcome(unverified, &sent, stopped_after.as_deref()),
                want,
                "{unverified} {sent:?} {stopped_after:?}"
            );
        }
    }

    const F: TargetState = TargetState {
        received: true,
        failed: true,
    };
    const OK: TargetState = TargetState {
        received: true,
        failed: false,
    };
    /// Failed before anything was applied (unreachable, discovery error).
    const UNREACHED: TargetState = TargetState {
        received: false,
        failed: true,
    };

    #[test]
    fn policy_table() {
        use FailurePolicy::*;
        let cases: Vec<(FailurePolicy, Vec<TargetState>, Vec<bool>)> = vec![
            (RollbackAll, vec![OK, F, OK], vec![true, true, true]),
            (RollbackAll, vec![OK, OK, OK], vec![false, false, false]),
            (
                RollbackAll,
                vec![OK, UNREACHED, OK],
                vec![true, false, true],
            ),
            (RollbackFailed, vec![OK, F, OK], vec![false, true, false]),
            (RollbackFailed, vec![F, UNREACHED], vec![true, false]),
            (
                RollbackIfAllFail,
                vec![OK, F, OK],
                vec![false, false, false],
            ),
            (RollbackIfAllFail, vec![F, F, F], vec![true, true, true]),
            (RollbackIfAllFail, vec![F, UNREACHED], vec![true, false]),
            (None, vec![F, F], vec![false, false]),
            (RollbackAll, vec![], vec![]),
        ];
        for (policy, targets, want) in cases {
            assert_eq!(
                targets_to_roll_back(policy, &targets),
                want,
                "{policy:?} {targets:?}"
            );
        }
    }

    #[test]
    fn cancel_table() {
        assert_eq!(
            targets_to_roll_back_on_cancel(true, &[OK, UNREACHED, F]),
            vec![true, false, true]
        );
        assert_eq!(
            targets_to_roll_back_on_cancel(false, &[OK, F]),
            vec![false, false]
        );
    }

    fn obj(api: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn left_in_place_table() {
        let web = obj("apps/v1", "Deployment", Some("shop"), "web");
        let web_beta = obj("apps/v1beta1", "Deployment", Some("shop"), "web");
        let extra = obj("v1", "ConfigMap", Some("shop"), "extra");
        let other_ns = obj("v1", "ConfigMap", Some("other"), "extra");
        let cases = vec![
            (
                vec![web.clone(), extra.clone()],
                vec![web.clone()],
                vec![extra.clone()],
            ),
            (vec![web.clone()], vec![web_beta.clone()], vec![]),
            (
                vec![other_ns.clone()],
                vec![extra.clone()],
                vec![other_ns.clone()],
            ),
            (vec![], vec![web.clone()], vec![]),
            (
                vec![extra.clone(), extra.clone()],
                vec![],
                vec![extra.clone()],
            ),
        ];
        for (failed, good, want) in cases {
            assert_eq!(left_in_place(&failed, &good), want, "{failed:?} {good:?}");
        }
    }

    #[test]
    fn policy_reasons_name_the_targets_that_failed() {
        let state = |received, failed| TargetState { received, failed };
        let names = ["eu", "us", "ap"];
        // (targets, decisions, the reasons wanted)
        type Case = (Vec<TargetState>, Vec<bool>, Vec<Option<&'static str>>);
        let cases: Vec<Case> = vec![
            (
                vec![state(true, false), state(true, true), state(true, false)],
                vec![true, true, true],
                vec![
                    Some("policy rollback-all: us failed"),
                    None,
                    Some("policy rollback-all: us failed"),
                ],
            ),
            (
                vec![state(true, true), state(true, true), state(true, false)],
                vec![true, true, true],
                vec![None, None, Some("policy rollback-all: eu, us failed")],
            ),
            // Not rolled back (nothing received): no reason to give.
            (
                vec![state(false, false), state(true, true), state(true, false)],
                vec![false, true, true],
                vec![None, None, Some("policy rollback-all: us failed")],
            ),
            (
                vec![state(true, false), state(true, false), state(true, false)],
                vec![false, false, false],
                vec![None, None, None],
            ),
        ];
        for (targets, decisions, want) in cases {
            let got = policy_reasons(FailurePolicy::RollbackAll, &targets, &decisions, &names);
            let want: Vec<Option<String>> = want.into_iter().map(|w| w.map(String::from)).collect();
            assert_eq!(got, want, "{targets:?}");
        }
    }

    #[test]
    fn summary_table() {
        let r = |t: &str, ok: bool, m: Option<&str>| RollbackResult {
            target: t.into(),
            ok,
            message: m.map(Into::into),
        };
        let cases = vec![
            (vec![], ""),
            (
                vec![
                    r("us", true, None),
                    r("ap", true, None),
                    r("eu", false, Some("connection refused\nmore")),
                ],
                "rolled back 2 of 3; eu: connection refused",
            ),
            (
                vec![r("eu", false, None)],
                "rolled back 0 of 1; eu: rollback failed",
            ),
        ];
        for (results, want) in cases {
            assert_eq!(summary(&results), want);
        }
    }

    fn rec(revision: u64, status: ReleaseStatus, digest: &str) -> ReleaseRecord {
        ReleaseRecord {
            digest: Some(digest.into()),
            ..ReleaseRecord::for_test(revision, status)
        }
    }

    #[test]
    fn manual_target_table() {
        use ReleaseStatus::*;
        let history = vec![
            rec(1, Superseded, "a"),
            rec(2, Superseded, "b"),
            rec(3, Failed, "c"),
            // v4 is the automatic rollback to v2 (same manifests).
            rec(4, Deployed, "b"),
        ];
        let cases: Vec<(Option<u64>, bool, Result<u64, RollbackChoiceError>)> = vec![
            (None, false, Ok(1)),
            (Some(2), false, Ok(2)),
            (
                Some(3),
                false,
                Err(RollbackChoiceError::NotGood {
                    revision: 3,
                    status: Failed,
                }),
            ),
            (Some(3), true, Ok(3)),
            (Some(9), true, Err(RollbackChoiceError::Missing(9))),
        ];
        for (requested, force, want) in cases {
            assert_eq!(
                choose_manual_target(&history, requested, force),
                want,
                "{requested:?} force={force}"
            );
        }
        assert_eq!(
            choose_manual_target(&[], None, false),
            Err(RollbackChoiceError::NoHistory)
        );
        assert_eq!(
            choose_manual_target(&[rec(1, Deployed, "a")], None, false),
            Err(RollbackChoiceError::NoEarlierGood)
        );
        // A failure left in place: back to the last good one.
        let left = vec![rec(1, Deployed, "a"), rec(2, Failed, "b")];
        assert_eq!(choose_manual_target(&left, None, false), Ok(1));
        // Plain history: back to the previous one.
        let plain = vec![rec(1, Superseded, "a"), rec(2, Deployed, "b")];
        assert_eq!(choose_manual_target(&plain, None, false), Ok(1));
    }
}
