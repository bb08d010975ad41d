//! The rollback decisions around a rollback, as pure functions: what a rollback leaves in
//! place, which revision a manual rollback goes to, how an unfinished rollback ends, and the
//! summary line. Which targets roll back, and when, is the machine's (`machine.rs`).
//!
//! A rollback never prunes: objects that the failed revision added and the last good one does
//! not have stay, and are listed so that a human can decide.

use std::collections::HashSet;

use crate::release::{ObjectRef, ReleaseRecord, ReleaseStatus};
use crate::report::TargetOutcome;

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
