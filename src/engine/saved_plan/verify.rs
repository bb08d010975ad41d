//! Whether a saved plan still holds (pure): the plan against this run (app, config,
//! targets, age), against the manifests rendered now, and, per target, against the objects
//! as they are now (the body each would get, the live object's resourceVersion).

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::model::{PlannedManifest, PlannedObject, SavedPlan};
use crate::report::LiveIdentity;

/// What this run is, for the plan to match.
#[derive(Debug, Clone)]
pub struct ThisRun<'a> {
    pub app: &'a str,
    pub config_digest: &'a str,
    pub config_path: &'a str,
    /// The targets this run deploys.
    pub targets: Vec<&'a str>,
    pub now: Timestamp,
    pub max_age: Duration,
    /// Whether prune is on for this run (`prune: true`, `--prune`).
    pub prune: bool,
}

/// How far a plan's made_at may be ahead of this machine's clock (clocks drift).
const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// Why a plan is not this run's plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotThisRun {
    #[error(
        "the plan is for app {plan}, this config deploys app {now}: use the plan made for {now}"
    )]
    OtherApp { plan: String, now: String },
    #[error(
        "the plan was made with another config (plan {plan}, {path} is {now}): make the plan again with this config (`rollguard diff --out`)"
    )]
    OtherConfig {
        plan: String,
        now: String,
        path: String,
    },
    #[error("the plan has no part for target {}: it was made for {}; make the plan with the same targets (`--target`)", missing.join(", "), planned.join(", "))]
    OtherTargets {
        missing: Vec<String>,
        planned: Vec<String>,
    },
    #[error("the plan was made at {made_at}, {} ago, more than --plan-max-age {}: make it again (`rollguard diff --out`), or pass a longer --plan-max-age", crate::util::duration::format_duration(*age), crate::util::duration::format_duration(*max_age))]
    TooOld {
        made_at: Timestamp,
        age: Duration,
        max_age: Duration,
    },
    #[error(
        "the plan says it was made at {made_at}, after now ({now}): it was edited, or this machine's clock is wrong"
    )]
    FromTheFuture { made_at: Timestamp, now: Timestamp },
    #[error("{}", other_prune_text(*plan))]
    OtherPrune { plan: bool },
}

fn other_prune_text(plan: bool) -> &'static str {
    if plan {
        "the plan was made with prune on: it deletes what the manifests dropped, and this run has prune off: pass --prune (or set `prune: true`), or make the plan again without it"
    } else {
        "the plan was made with prune off: it leaves what the manifests dropped in place, and this run has prune on (`--prune` or `prune: true`): drop --prune, or make the plan again with it"
    }
}

/// Every way `plan` is not a plan for this run (empty: it is).
pub fn not_this_run(plan: &SavedPlan, run: &ThisRun) -> Vec<NotThisRun> {
    let mut found = Vec::new();
    if plan.app != run.app {
        found.push(NotThisRun::OtherApp {
            plan: plan.app.clone(),
            now: run.app.to_string(),
        });
    }
    if plan.config_digest != run.config_digest {
        found.push(NotThisRun::OtherConfig {
            plan: plan.config_digest.clone(),
            now: run.config_digest.to_string(),
            path: run.config_path.to_string(),
        });
    }
    let missing: Vec<String> = run
        .targets
        .iter()
        .filter(|t| plan.target(t).is_none())
        .map(|t| t.to_string())
        .collect();
    if !missing.is_empty() {
        found.push(NotThisRun::OtherTargets {
            missing,
            planned: plan.targets.iter().map(|t| t.name.clone()).collect(),
        });
    }
    found.extend(too_old(plan.made_at, run.now, run.max_age));
    if plan.prune != run.prune {
        found.push(NotThisRun::OtherPrune { plan: plan.prune });
    }
    found
}

/// Whether a plan made at `made_at` is too old (or claims a time ahead of `now`).
pub fn too_old(made_at: Timestamp, now: Timestamp, max_age: Duration) -> Option<NotThisRun> {
    let age = now.duration_since(made_at);
    if age.is_negative() {
        let ahead = Duration::try_from(age.abs()).unwrap_or(Duration::MAX);
        return (ahead > CLOCK_SKEW).then_some(NotThisRun::FromTheFuture { made_at, now });
    }
    let age = Duration::try_from(age).unwrap_or(Duration::MAX);
    (age > max_age).then_some(NotThisRun::TooOld {
        made_at,
        age,
        max_age,
    })
}

/// A manifest object that is not as the plan rendered it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestMoved {
    #[error("{object} ({origin}) changed since the plan: it renders to {now}, the plan has {plan}")]
    Changed {
        object: String,
        origin: String,
        plan: String,
        now: String,
    },
    #[error("{object} ({origin}) is new since the plan")]
    Added { object: String, origin: String },
    #[error("{object} (was {origin}) is in the plan but no longer in the manifests")]
    Removed { object: String, origin: String },
}

/// The manifests rendered now against the plan's, matched by object (pure).
pub fn manifests_moved(plan: &[PlannedManifest], now: &[PlannedManifest]) -> Vec<ManifestMoved> {
    let mut found = Vec::new();
    for n in now {
        match plan.iter().find(|p| p.object == n.object) {
            Some(p) if p.sha256 != n.sha256 => found.push(ManifestMoved::Changed {
                object: n.object.clone(),
                origin: n.origin.clone(),
                plan: p.sha256.clone(),
                now: n.sha256.clone(),
            }),
            Some(_) => {}
            None => found.push(ManifestMoved::Added {
                object: n.object.clone(),
                origin: n.origin.clone(),
            }),
        }
    }
    for p in plan
        .iter()
        .filter(|p| !now.iter().any(|n| n.object == p.object))
    {
        found.push(ManifestMoved::Removed {
            object: p.object.clone(),
            origin: p.origin.clone(),
        });
    }
    found
}

/// An object of a target as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NowObject {
    /// "Deployment shop/web", as applied.
    pub object: String,
    pub origin: String,
    /// The digest of the body it would get now.
    pub sha256: String,
    /// What reading the live object found.
    pub live: LiveNow,
}

/// A live object, read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveNow {
    Absent,
    Present {
        identity: LiveIdentity,
        /// The field manager of its newest managedFields entry.
        manager: Option<String>,
    },
    /// It could not be read: the plan cannot be checked.
    Unreadable(String),
}

/// An object of a target that is not as the plan saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectMoved {
    #[error("{object} changed since the plan: resourceVersion {from} → {to}, by manager {}", manager_name(.manager))]
    Changed {
        object: String,
        from: String,
        to: String,
        manager: Option<String>,
    },
    #[error("{object} was deleted and created again since the plan (uid {from} → {to}), by manager {}", manager_name(.manager))]
    Replaced {
        object: String,
        from: String,
        to: String,
        manager: Option<String>,
    },
    #[error("{object} was created since the plan (resourceVersion {to}), by manager {}", manager_name(.manager))]
    Created {
        object: String,
        to: String,
        manager: Option<String>,
    },
    #[error("{object} was deleted since the plan (it had resourceVersion {from})")]
    Deleted { object: String, from: String },
    #[error("{object} ({origin}) would be applied with another body than the plan's")]
    Body { object: String, origin: String },
    #[error("{object} ({origin}) is not in the plan")]
    NotPlanned { object: String, origin: String },
    #[error("{object} is in the plan but no longer in the manifests")]
    NoLongerDeclared { object: String },
    #[error("{object} could not be read to check the plan: {message}")]
    Unreadable { object: String, message: String },
    /// Another deploy or rollback recorded a release on the target since the plan.
    #[error("the release history of {object} moved since the plan: its newest revision was {}, now {} (another deploy or rollback ran)", revision_text(*.from), revision_text(*.to))]
    History {
        object: String,
        from: Option<u64>,
        to: Option<u64>,
    },
}

fn revision_text(revision: Option<u64>) -> String {
    revision.map_or_else(|| "none".to_string(), |r| format!("v{r}"))
}

/// Whether the target's release history still ends where the plan saw it, pure: `planned`
/// is the plan's head, `now` the head read under the target's lock.
pub fn history_moved(target: &str, planned: Option<u64>, now: Option<u64>) -> Option<ObjectMoved> {
    (planned != now).then(|| ObjectMoved::History {
        object: format!("target {target}"),
        from: planned,
        to: now,
    })
}

impl ObjectMoved {
    /// The object that moved ("Deployment shop/web").
    pub fn object(&self) -> &str {
        match self {
            ObjectMoved::Changed { object, .. }
            | ObjectMoved::Replaced { object, .. }
            | ObjectMoved::Created { object, .. }
            | ObjectMoved::Deleted { object, .. }
            | ObjectMoved::Body { object, .. }
            | ObjectMoved::NotPlanned { object, .. }
            | ObjectMoved::NoLongerDeclared { object }
            | ObjectMoved::Unreadable { object, .. }
            | ObjectMoved::History { object, .. } => object,
        }
    }
}

fn manager_name(manager: &Option<String>) -> String {
    manager.clone().unwrap_or_else(|| "(none recorded)".into())
}

/// A target's objects now against its part of the plan, matched by object (pure).
pub fn objects_moved(plan: &[PlannedObject], now: &[NowObject]) -> Vec<ObjectMoved> {
    let mut found = Vec::new();
    for n in now {
        let Some(p) = plan.iter().find(|p| p.object == n.object) else {
            found.push(ObjectMoved::NotPlanned {
                object: n.object.clone(),
                origin: n.origin.clone(),
            });
            continue;
        };
        if p.sha256 != n.sha256 {
            found.push(ObjectMoved::Body {
                object: n.object.clone(),
                origin: n.origin.clone(),
            });
        }
        found.extend(live_moved(&n.object, p.live.as_ref(), &n.live));
    }
    for p in plan
        .iter()
        .filter(|p| !now.iter().any(|n| n.object == p.object))
    {
        found.push(ObjectMoved::NoLongerDeclared {
            object: p.object.clone(),
        });
    }
    found
}

/// How one live object moved since the plan saw it (`saw`), if it did.
fn live_moved(object: &str, saw: Option<&LiveIdentity>, now: &LiveNow) -> Option<ObjectMoved> {
    let object = object.to_string();
    match (saw, now) {
        (_, LiveNow::Unreadable(message)) => Some(ObjectMoved::Unreadable {
            object,
            message: message.clone(),
        }),
        (None, LiveNow::Absent) => None,
        (Some(saw), LiveNow::Absent) => Some(ObjectMoved::Deleted {
            object,
            from: saw.resource_version.clone(),
        }),
        (None, LiveNow::Present { identity, manager }) => Some(ObjectMoved::Created {
            object,
            to: identity.resource_version.clone(),
            manager: manager.clone(),
        }),
        (Some(saw), LiveNow::Present { identity, manager }) => {
            if saw.uid != identity.uid {
                Some(ObjectMoved::Replaced {
                    object,
                    from: saw.uid.clone(),
                    to: identity.uid.clone(),
                    manager: manager.clone(),
                })
            } else if saw.resource_version != identity.resource_version {
                Some(ObjectMoved::Changed {
                    object,
                    from: saw.resource_version.clone(),
                    to: identity.resource_version.clone(),
                    manager: manager.clone(),
                })
            } else {
                None
            }
        }
    }
}

/// The field manager of a live object's newest managedFields entry (by its `time`; the
/// last listed among equal times, `ours` last: entries' times are whole seconds and the
/// deploy's own apply did not move the object since the plan). A controller's status
/// write, which follows most edits, is passed over for the edit itself when there is one.
pub fn newest_manager(live: &Value, ours: &str) -> Option<String> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    let is_status = |e: &&Value| e.get("subresource").and_then(Value::as_str) == Some("status");
    let spec: Vec<&Value> = entries.iter().filter(|e| !is_status(e)).collect();
    let entries = if spec.is_empty() {
        entries.iter().collect()
    } else {
        spec
    };
    let mut best: Option<((Option<Timestamp>, bool), &str)> = None;
    for entry in entries {
        let Some(manager) = entry.get("manager").and_then(Value::as_str) else {
            continue;
        };
        let time = entry
            .get("time")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok());
        let key = (time, manager != ours);
        if best.as_ref().is_none_or(|(b, _)| key >= *b) {
            best = Some((key, manager));
        }
    }
    best.map(|(_, m)| m.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::saved_plan::model::{PlannedAction, PlannedTarget, VERSION};
    use serde_json::json;

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn plan() -> SavedPlan {
        SavedPlan {
            version: VERSION,
            app: "shop".into(),
            commit: None,
            config_digest: "sha256:c1".into(),
            made_at: ts("2026-12-01T10:00:00Z"),
            pr: Some(7),
            revision: None,
            prune: false,
            manifests: Vec::new(),
            targets: ["eu", "us"]
                .iter()
                .map(|n| PlannedTarget {
                    history_head: None,
                    name: n.to_string(),
                    objects: Vec::new(),
                    dropped: Vec::new(),
                    prune: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_plan_for_another_run_is_refused_by_name() {
        let day = Duration::from_secs(86_400);
        let run = |app, digest, targets: Vec<&'static str>, now| ThisRun {
            app,
            config_digest: digest,
            config_path: "rollguard.yaml",
            targets,
            now: ts(now),
            max_age: day,
            prune: false,
        };
        let within = "2026-12-01T12:00:00Z";
        // (this run, the refusals' texts: each must contain its words)
        let cases: Vec<(ThisRun, Vec<&str>)> = vec![
            (run("shop", "sha256:c1", vec!["eu", "us"], within), vec![]),
            (run("shop", "sha256:c1", vec!["us"], within), vec![]),
            (
                run("cart", "sha256:c1", vec!["eu"], within),
                vec!["the plan is for app shop, this config deploys app cart"],
            ),
            (
                run("shop", "sha256:c2", vec!["eu"], within),
                vec!["another config (plan sha256:c1, rollguard.yaml is sha256:c2)"],
            ),
            (
                run("shop", "sha256:c1", vec!["eu", "ap"], within),
                vec!["no part for target ap: it was made for eu, us"],
            ),
            (
                run("shop", "sha256:c1", vec!["eu"], "2026-12-02T10:00:01Z"),
                vec!["more than --plan-max-age"],
            ),
            (
                run("shop", "sha256:c1", vec!["eu"], "2026-12-02T10:00:00Z"),
                vec![],
            ),
            (
                run("shop", "sha256:c1", vec!["eu"], "2026-12-01T09:00:00Z"),
                vec!["after now"],
            ),
            (
                run("shop", "sha256:c1", vec!["eu"], "2026-12-01T09:58:00Z"),
                vec![],
            ),
        ];
        for (run, want) in cases {
            let got: Vec<String> = not_this_run(&plan(), &run)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{run:?}: {got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.contains(w), "{g} lacks {w}");
            }
        }
    }

    #[test]
    fn a_plan_made_with_another_prune_setting_is_refused() {
        let run = |prune| ThisRun {
            app: "shop",
            config_digest: "sha256:c1",
            config_path: "rollguard.yaml",
            targets: vec!["eu"],
            now: ts("2026-12-01T12:00:00Z"),
            max_age: Duration::from_secs(86_400),
            prune,
        };
        let with_prune = SavedPlan {
            prune: true,
            ..plan()
        };
        // (plan, this run's prune, the refusal's words; none: accepted)
        let cases = [
            (plan(), false, None),
            (with_prune.clone(), true, None),
            (with_prune, false, Some("made with prune on")),
            (plan(), true, Some("made with prune off")),
        ];
        for (saved, prune, want) in cases {
            let got: Vec<String> = not_this_run(&saved, &run(prune))
                .iter()
                .map(ToString::to_string)
                .collect();
            match want {
                None => assert!(got.is_empty(), "{got:?}"),
                Some(w) => assert!(got.len() == 1 && got[0].contains(w), "{got:?}"),
            }
        }
    }

    fn manifest(object: &str, sha: &str) -> PlannedManifest {
        PlannedManifest {
            object: object.into(),
            origin: "k8s/app.yaml:1".into(),
            sha256: sha.into(),
        }
    }

    #[test]
    fn manifests_are_compared_by_object_and_digest() {
        let planned = vec![
            manifest("ConfigMap a", "1"),
            manifest("Deployment web", "2"),
        ];
        let cases: Vec<(Vec<PlannedManifest>, Vec<&str>)> = vec![
            (planned.clone(), vec![]),
            (
                vec![
                    manifest("ConfigMap a", "1"),
                    manifest("Deployment web", "3"),
                ],
                vec!["Deployment web (k8s/app.yaml:1) changed since the plan"],
            ),
            (
                vec![manifest("ConfigMap a", "1")],
                vec!["Deployment web (was k8s/app.yaml:1) is in the plan but no longer"],
            ),
            (
                vec![
                    manifest("ConfigMap a", "1"),
                    manifest("Deployment web", "2"),
                    manifest("Secret s", "4"),
                ],
                vec!["Secret s (k8s/app.yaml:1) is new since the plan"],
            ),
        ];
        for (now, want) in cases {
            let got: Vec<String> = manifests_moved(&planned, &now)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.starts_with(w), "{g} lacks {w}");
            }
        }
    }

    fn identity(uid: &str, rv: &str) -> LiveIdentity {
        LiveIdentity {
            uid: uid.into(),
            resource_version: rv.into(),
        }
    }

    fn planned(object: &str, sha: &str, live: Option<LiveIdentity>) -> PlannedObject {
        PlannedObject {
            object: object.into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
            origin: "k8s/app.yaml:8".into(),
            action: PlannedAction::Update,
            sha256: sha.into(),
            body: None,
            live,
        }
    }

    fn now(object: &str, sha: &str, live: LiveNow) -> NowObject {
        NowObject {
            object: object.into(),
            origin: "k8s/app.yaml:8".into(),
            sha256: sha.into(),
            live,
        }
    }

    fn present(uid: &str, rv: &str, manager: &str) -> LiveNow {
        LiveNow::Present {
            identity: identity(uid, rv),
            manager: Some(manager.into()),
        }
    }

    #[test]
    fn objects_that_moved_since_the_plan_are_named_with_how() {
        const WEB: &str = "Deployment shop/web";
        let seen = vec![planned(WEB, "b1", Some(identity("u1", "4411")))];
        let fresh = vec![planned(WEB, "b1", None)];
        let cases: Vec<(&Vec<PlannedObject>, Vec<NowObject>, Vec<&str>)> = vec![
            (
                &seen,
                vec![now(WEB, "b1", present("u1", "4411", "x"))],
                vec![],
            ),
            (&fresh, vec![now(WEB, "b1", LiveNow::Absent)], vec![]),
            (
                &seen,
                vec![now(WEB, "b1", present("u1", "4502", "kubectl-edit"))],
                vec![
                    "Deployment shop/web changed since the plan: resourceVersion 4411 → 4502, by manager kubectl-edit",
                ],
            ),
            (
                &seen,
                vec![now(WEB, "b1", present("u2", "9", "helm"))],
                vec!["deleted and created again since the plan (uid u1 → u2), by manager helm"],
            ),
            (
                &fresh,
                vec![now(WEB, "b1", present("u2", "9", "helm"))],
                vec!["was created since the plan (resourceVersion 9), by manager helm"],
            ),
            (
                &seen,
                vec![now(WEB, "b1", LiveNow::Absent)],
                vec!["was deleted since the plan (it had resourceVersion 4411)"],
            ),
            (
                &seen,
                vec![now(WEB, "b2", present("u1", "4411", "x"))],
                vec!["would be applied with another body than the plan's"],
            ),
            (
                &seen,
                vec![now(WEB, "b1", LiveNow::Unreadable("timed out".into()))],
                vec!["could not be read to check the plan: timed out"],
            ),
            (
                &seen,
                vec![now("ConfigMap shop/x", "c", LiveNow::Absent)],
                vec![
                    "ConfigMap shop/x (k8s/app.yaml:8) is not in the plan",
                    "Deployment shop/web is in the plan but no longer",
                ],
            ),
        ];
        for (plan, now, want) in cases {
            let got: Vec<String> = objects_moved(plan, &now)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.contains(w), "{g} lacks {w}");
            }
        }
    }

    #[test]
    fn the_newest_managed_fields_entry_names_the_manager() {
        let entry = |m: &str, t: &str| json!({"manager": m, "operation": "Update", "time": t});
        let cases = vec![
            (json!({}), None),
            (json!({"metadata": {"managedFields": []}}), None),
            (
                json!({"metadata": {"managedFields": [
                    entry("rollguard-shop", "2026-12-01T10:00:00Z"),
                    entry("kubectl-edit", "2026-12-01T10:05:00Z"),
                    entry("helm", "2026-12-01T09:00:00Z"),
                ]}}),
                Some("kubectl-edit"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    entry("kubectl-edit", "2026-12-01T10:05:00Z"),
                    {"manager": "kube-controller-manager", "subresource": "status", "time": "2026-12-01T10:05:01Z"},
                ]}}),
                Some("kubectl-edit"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    {"manager": "kube-controller-manager", "subresource": "status", "time": "2026-12-01T10:05:01Z"},
                ]}}),
                Some("kube-controller-manager"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    entry("kubectl-edit", "2026-12-01T10:00:00Z"),
                    entry("rollguard-shop", "2026-12-01T10:00:00Z"),
                ]}}),
                Some("kubectl-edit"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    entry("rollguard-shop", "2026-12-01T10:00:01Z"),
                    entry("kubectl-edit", "2026-12-01T10:00:00Z"),
                ]}}),
                Some("rollguard-shop"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    entry("a", "2026-12-01T10:00:00Z"),
                    entry("b", "2026-12-01T10:00:00Z"),
                ]}}),
                Some("b"),
            ),
            (
                json!({"metadata": {"managedFields": [
                    entry("dated", "2026-12-01T10:00:00Z"),
                    {"manager": "undated"},
                ]}}),
                Some("dated"),
            ),
        ];
        for (live, want) in cases {
            assert_eq!(
                newest_manager(&live, "rollguard-shop").as_deref(),
                want,
                "{live}"
            );
        }
    }

    #[test]
    fn a_history_that_moved_since_the_plan_is_named() {
        // (plan's head, head now, moved)
        for (planned, now, moved) in [
            (None, None, false),
            (Some(3), Some(3), false),
            (Some(3), Some(4), true),
            (None, Some(1), true),
            (Some(2), None, true),
        ] {
            let got = history_moved("eu", planned, now);
            assert_eq!(got.is_some(), moved, "{planned:?} -> {now:?}");
        }
        let text = history_moved("eu", Some(3), Some(4)).map(|m| m.to_string());
        assert_eq!(
            text.as_deref(),
            Some(
                "the release history of target eu moved since the plan: its newest revision was v3, now v4 (another deploy or rollback ran)"
            )
        );
    }
}
