//! `deploy --wave N`: wave N starts only when every target of the waves before it runs this
//! deploy's commit, as their release records say (issue 22 point 4: pipelines that put an
//! approval between waves must not promote a commit the earlier waves never ran). The
//! decision is [`judge`], pure; `commands::deploy` reads the records and asks it before
//! anything is written anywhere.

use std::fmt;
use std::sync::Arc;

use crate::config::TargetConfig;
use crate::release::{ReleaseRecord, ReleaseStatus, last_good};
use crate::util::git::CommitInfo;

/// A target's release records, or why they could not be read.
pub type Records = Result<Vec<ReleaseRecord>, Unreadable>;

/// Why a target's release records could not be read: the error of its connection or of the
/// listing (shared, so that the verdict can be cloned with it).
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct Unreadable(Arc<dyn std::error::Error + Send + Sync>);

impl Unreadable {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Unreadable {
        Unreadable(Arc::new(error))
    }
}

/// What one target of an earlier wave told: its records, or why they could not be read
/// (unreachable cluster, refused credentials, a record that does not decode).
#[derive(Debug, Clone)]
pub struct Earlier {
    pub target: TargetConfig,
    pub records: Records,
}

/// Why one earlier target holds wave N back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behind {
    /// Its last good release is another commit (`None`: a record written without one).
    OtherCommit {
        revision: u64,
        commit: Option<String>,
        /// Its newest record is not that one: a deploy there failed or is still running.
        newer: Option<(u64, ReleaseStatus)>,
    },
    /// No release of the app was ever deployed there (or none is left deployed).
    NeverDeployed,
    /// Its records could not be read: nobody can say what it runs.
    Unreadable(String),
}

/// One earlier target that is not on this deploy's commit, said as one line with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOnCommit {
    pub target: String,
    pub context: Option<String>,
    pub wave: u32,
    /// The wave being started (`--wave N`).
    pub starting: u32,
    /// This deploy's commit, short.
    pub this: String,
    pub behind: Behind,
}

impl fmt::Display for NotOnCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let context = self
            .context
            .as_deref()
            .map(|c| format!(", context {c}"))
            .unwrap_or_default();
        write!(f, "target {} (wave {}{context}): ", self.target, self.wave)?;
        let this = &self.this;
        let first = format!(
            "deploy wave {} first (rollguard deploy --wave {}), then wave {} again",
            self.wave, self.wave, self.starting
        );
        match &self.behind {
            Behind::OtherCommit {
                revision,
                commit,
                newer,
            } => {
                let runs = match commit {
                    Some(sha) => format!("runs commit {sha} (v{revision})"),
                    None => format!("runs v{revision}, recorded without a commit"),
                };
                let newer = newer
                    .map(|(rev, status)| {
                        format!(
                            " (its newer v{rev} is {}: that deploy did not finish there)",
                            status.as_str()
                        )
                    })
                    .unwrap_or_default();
                write!(f, "{runs}{newer}, this deploy is {this}; {first}")
            }
            Behind::NeverDeployed => write!(
                f,
                "has no deployed release of this app, this deploy is {this}; {first}"
            ),
            Behind::Unreadable(why) => write!(
                f,
                "could not read its release records ({why}), so nothing says it runs {this}; make it reachable and run again, or {first}"
            ),
        }
    }
}

/// Why `deploy --wave N` does not start. Nothing was written anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaveRefused {
    /// The deploy has no commit to compare the earlier waves' records with.
    NoCommit { wave: u32 },
    /// Earlier targets are not on this commit: one line each.
    Behind { wave: u32, behind: Vec<NotOnCommit> },
}

impl WaveRefused {
    /// Why, without the refusal's own words: a dry run says it as a warning.
    pub fn reasons(&self) -> String {
        match self {
            WaveRefused::NoCommit { wave } => format!(
                "this deploy has no commit (no git repository around the config, no --commit, no $GITHUB_SHA), so nothing can say that the waves before {wave} run what it deploys; run it from the git checkout the earlier waves were deployed from, or pass --commit SHA"
            ),
            WaveRefused::Behind { behind, .. } => {
                let n = behind.len();
                let head = if n == 1 {
                    "1 target of an earlier wave is not on this deploy's commit".to_string()
                } else {
                    format!("{n} targets of earlier waves are not on this deploy's commit")
                };
                let each: Vec<String> = behind.iter().map(|b| format!("\n  {b}")).collect();
                format!("{head}:{}", each.concat())
            }
        }
    }

    fn wave(&self) -> u32 {
        match self {
            WaveRefused::NoCommit { wave } | WaveRefused::Behind { wave, .. } => *wave,
        }
    }
}

impl fmt::Display for WaveRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deploy --wave {} refused, nothing was written: {}",
            self.wave(),
            self.reasons()
        )
    }
}

impl std::error::Error for WaveRefused {}

/// Whether wave `wave` may start at `commit`: every earlier target's last good release
/// (its newest `deployed` record) has the same commit sha. A dirty tree on either side is
/// compared by sha alone (the label says dirty). An earlier target that cannot be read
/// holds the wave back: the gate exists for what nobody looked at. Pure.
pub fn judge(wave: u32, commit: &CommitInfo, earlier: &[Earlier]) -> Result<(), WaveRefused> {
    let this = commit.label();
    let behind: Vec<NotOnCommit> = earlier
        .iter()
        .filter_map(|e| {
            behind(commit, e).map(|behind| NotOnCommit {
                target: e.target.name.clone(),
                context: e.target.context.clone(),
                wave: e.target.wave,
                starting: wave,
                this: this.clone(),
                behind,
            })
        })
        .collect();
    if behind.is_empty() {
        Ok(())
    } else {
        Err(WaveRefused::Behind { wave, behind })
    }
}

/// Why `e` is not on `commit`, None when it is.
fn behind(commit: &CommitInfo, e: &Earlier) -> Option<Behind> {
    let records = match &e.records {
        Ok(records) => records,
        Err(why) => return Some(Behind::Unreadable(why.to_string())),
    };
    let Some(good) = last_good(records) else {
        return Some(Behind::NeverDeployed);
    };
    if good.commit.as_ref().is_some_and(|c| c.sha == commit.sha) {
        return None;
    }
    let newer = records
        .iter()
        .filter(|r| r.revision > good.revision)
        .max_by_key(|r| r.revision)
        .map(|r| (r.revision, r.status));
    Some(Behind::OtherCommit {
        revision: good.revision,
        commit: good.commit.as_ref().map(CommitInfo::label),
        newer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::ReleaseKind;

    const A: &str = "aaaaaaa1111111111111111111111111111111111";
    const B: &str = "bbbbbbb2222222222222222222222222222222222";

    fn commit(sha: &str) -> CommitInfo {
        CommitInfo {
            sha: sha.to_string(),
            r#ref: None,
            message: None,
            dirty: false,
        }
    }

    fn rec(revision: u64, status: ReleaseStatus, sha: Option<&str>) -> ReleaseRecord {
        ReleaseRecord {
            kind: ReleaseKind::Deploy,
            commit: sha.map(commit),
            ..ReleaseRecord::for_test(revision, status)
        }
    }

    fn earlier(name: &str, records: Records) -> Earlier {
        let target = TargetConfig {
            name: name.to_string(),
            context: Some(format!("{name}-ctx")),
            ..Default::default()
        };
        Earlier { target, records }
    }

    use ReleaseStatus::{Deployed, Failed, Pending, Superseded};

    #[test]
    fn an_earlier_wave_on_another_commit_holds_the_wave_back() {
        // (records of the one earlier target, what it says: None when the wave may start)
        let cases: Vec<(Records, Option<Behind>)> = vec![
            (Ok(vec![rec(1, Deployed, Some(A))]), None),
            (
                Ok(vec![rec(1, Superseded, Some(B)), rec(2, Deployed, Some(A))]),
                None,
            ),
            (
                Ok(vec![rec(1, Deployed, Some(B))]),
                Some(Behind::OtherCommit {
                    revision: 1,
                    commit: Some("bbbbbbb".into()),
                    newer: None,
                }),
            ),
            // The commit failed there and came back: still on the old one.
            (
                Ok(vec![rec(1, Deployed, Some(B)), rec(2, Failed, Some(A))]),
                Some(Behind::OtherCommit {
                    revision: 1,
                    commit: Some("bbbbbbb".into()),
                    newer: Some((2, Failed)),
                }),
            ),
            // A deploy of the commit still running there: not yet.
            (
                Ok(vec![rec(3, Deployed, Some(B)), rec(4, Pending, Some(A))]),
                Some(Behind::OtherCommit {
                    revision: 3,
                    commit: Some("bbbbbbb".into()),
                    newer: Some((4, Pending)),
                }),
            ),
            (
                Ok(vec![rec(1, Deployed, None)]),
                Some(Behind::OtherCommit {
                    revision: 1,
                    commit: None,
                    newer: None,
                }),
            ),
            (Ok(vec![]), Some(Behind::NeverDeployed)),
            (
                Ok(vec![rec(1, Failed, Some(A))]),
                Some(Behind::NeverDeployed),
            ),
            (
                Err(Unreadable::new(std::io::Error::other("connection refused"))),
                Some(Behind::Unreadable("connection refused".into())),
            ),
        ];
        for (records, want) in cases {
            let got = judge(1, &commit(A), &[earlier("canary", records.clone())]);
            match (got, want) {
                (Ok(()), None) => {}
                (Err(WaveRefused::Behind { wave, behind }), Some(want)) => {
                    assert_eq!(wave, 1);
                    assert_eq!(behind.len(), 1);
                    assert_eq!(behind[0].behind, want, "records {records:?}");
                }
                (got, want) => panic!("records {records:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn every_target_behind_is_said_and_no_earlier_wave_is_no_refusal() {
        assert_eq!(judge(1, &commit(A), &[]), Ok(()));
        let got = judge(
            2,
            &commit(A),
            &[
                earlier("canary", Ok(vec![rec(3, Deployed, Some(B))])),
                earlier("eu", Ok(vec![rec(5, Deployed, Some(A))])),
                earlier(
                    "us",
                    Err(Unreadable::new(std::io::Error::other("timed out"))),
                ),
            ],
        );
        let Err(refused) = got else {
            panic!("not refused: {got:?}")
        };
        assert_eq!(
            refused.to_string(),
            "deploy --wave 2 refused, nothing was written: 2 targets of earlier waves are not on this deploy's commit:\n  \
             target canary (wave 0, context canary-ctx): runs commit bbbbbbb (v3), this deploy is aaaaaaa; deploy wave 0 first (rollguard deploy --wave 0), then wave 2 again\n  \
             target us (wave 0, context us-ctx): could not read its release records (timed out), so nothing says it runs aaaaaaa; make it reachable and run again, or deploy wave 0 first (rollguard deploy --wave 0), then wave 2 again"
        );
    }
}
