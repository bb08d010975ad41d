//! What the manifests no longer declare: the objects of a target's previous release that a
//! new revision drops, and which of them a deploy with `prune` may delete. Pure: the engine
//! reads the live objects (`engine::prune`) and a saved plan can call the same functions.
//!
//! An object is pruned only when all of these hold: the previous release on the target
//! applied it (it is in that record), the new manifests do not declare it, it still exists,
//! this app's field manager still owns fields of it, no other manager applies it too (it is
//! not shared with another tool or app), and it is not a Namespace that the new manifests or
//! the release history still use (deleting a Namespace deletes everything in it).

use std::collections::HashSet;

use super::ObjectRef;

/// The objects `previous` applied that `new` does not declare, in `previous`'s order
/// (apply order), each once. Compared by group, kind, namespace and name, so that a kind
/// that moved to another API version of its group is not dropped.
pub fn dropped_objects(previous: &[ObjectRef], new: &[ObjectRef]) -> Vec<ObjectRef> {
    let kept: HashSet<_> = new.iter().map(ObjectRef::identity).collect();
    let mut seen = HashSet::new();
    previous
        .iter()
        .filter(|o| !kept.contains(&o.identity()) && seen.insert(o.identity()))
        .cloned()
        .collect()
}

/// One entry of a live object's `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldManager {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
}

/// A dropped object as the cluster has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// Not there any more (deleted by someone else).
    Absent,
    /// There, with its field managers.
    Present { managers: Vec<FieldManager> },
    /// Could not be read: why, in one line.
    Unreadable(String),
}

/// Why a dropped object is not pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepReason {
    /// Already deleted: nothing to do (not reported).
    Gone,
    /// This app's field manager owns none of its fields any more: other managers took it over.
    TakenOver { managers: Vec<String> },
    /// Another manager applies it too (another tool or app declares it).
    Shared { managers: Vec<String> },
    /// A Namespace that objects of the new manifests, or the release history, live in.
    NamespaceInUse,
    /// It could not be read, so its managers are unknown.
    Unreadable(String),
}

impl KeepReason {
    /// Why it was kept, for the report: "now managed by \"kubectl\" (rollguard-shop owns none
    /// of its fields)".
    pub fn describe(&self, ours: &str) -> String {
        let quoted = |m: &[String]| {
            m.iter()
                .map(|m| format!("\"{m}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            KeepReason::Gone => "already deleted".to_string(),
            KeepReason::TakenOver { managers } if managers.is_empty() => {
                format!("field manager \"{ours}\" owns none of its fields any more")
            }
            KeepReason::TakenOver { managers } => format!(
                "now managed by {} (field manager \"{ours}\" owns none of its fields any more)",
                quoted(managers)
            ),
            KeepReason::Shared { managers } => format!(
                "also applied by {}, so something else still declares it",
                quoted(managers)
            ),
            KeepReason::NamespaceInUse => {
                "a namespace that objects of these manifests or the release history live in"
                    .to_string()
            }
            KeepReason::Unreadable(why) => format!("could not be read ({why})"),
        }
    }
}

/// What becomes of one dropped object under `prune`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Prune,
    Keep(KeepReason),
}

/// The namespaces that must not be pruned: those objects of the new manifests live in, and
/// the release history's.
pub fn namespaces_in_use(new: &[ObjectRef], history_namespace: &str) -> Vec<String> {
    let mut in_use: Vec<String> = new.iter().filter_map(|o| o.namespace.clone()).collect();
    in_use.push(history_namespace.to_string());
    in_use.sort_unstable();
    in_use.dedup();
    in_use
}

/// Whether a dropped `object`, live as `live`, may be deleted by `ours` (the app's field
/// manager, `rollguard-<app>`). `in_use`: from [`namespaces_in_use`].
pub fn prune_verdict(object: &ObjectRef, live: &Live, ours: &str, in_use: &[String]) -> Verdict {
    let managers = match live {
        Live::Absent => return Verdict::Keep(KeepReason::Gone),
        Live::Unreadable(why) => return Verdict::Keep(KeepReason::Unreadable(why.clone())),
        Live::Present { managers } => managers,
    };
    if object.group().is_empty() && object.kind == "Namespace" && in_use.contains(&object.name) {
        return Verdict::Keep(KeepReason::NamespaceInUse);
    }
    let mut others: Vec<String> = Vec::new();
    for m in managers.iter().filter(|m| m.manager != ours) {
        if !others.contains(&m.manager) {
            others.push(m.manager.clone());
        }
    }
    if !managers.iter().any(|m| m.manager == ours) {
        return Verdict::Keep(KeepReason::TakenOver { managers: others });
    }
    let mut appliers: Vec<String> = Vec::new();
    for m in managers
        .iter()
        .filter(|m| m.manager != ours && m.operation == "Apply")
    {
        if !appliers.contains(&m.manager) {
            appliers.push(m.manager.clone());
        }
    }
    if !appliers.is_empty() {
        return Verdict::Keep(KeepReason::Shared { managers: appliers });
    }
    Verdict::Prune
}

/// Each dropped object with its verdict, in the order given (`looked`: the dropped objects
/// with what the cluster said of each).
pub fn prune_choice(
    looked: Vec<(ObjectRef, Live)>,
    ours: &str,
    in_use: &[String],
) -> Vec<(ObjectRef, Verdict)> {
    looked
        .into_iter()
        .map(|(object, live)| {
            let verdict = prune_verdict(&object, &live, ours, in_use);
            (object, verdict)
        })
        .collect()
}

/// The `kubectl delete` that removes `object` by hand, for the message of a failed prune.
pub fn delete_command(object: &ObjectRef) -> String {
    let kind = object.kind.to_ascii_lowercase();
    let kind = match object.group() {
        "" => kind,
        group => format!("{kind}.{group}"),
    };
    match &object.namespace {
        Some(ns) => format!("kubectl delete {kind} {} -n {ns}", object.name),
        None => format!("kubectl delete {kind} {}", object.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    fn m(manager: &str, operation: &str) -> FieldManager {
        FieldManager {
            manager: manager.into(),
            operation: operation.into(),
        }
    }

    #[test]
    fn dropped_objects_table() {
        let web = obj("apps/v1", "Deployment", Some("shop"), "web");
        let web_beta = obj("apps/v1beta1", "Deployment", Some("shop"), "web");
        let legacy = obj("v1", "ConfigMap", Some("shop"), "legacy");
        let legacy_other_ns = obj("v1", "ConfigMap", Some("other"), "legacy");
        let ns = obj("v1", "Namespace", None, "shop");
        type Case = (Vec<ObjectRef>, Vec<ObjectRef>, Vec<ObjectRef>);
        let cases: Vec<Case> = vec![
            // The plain case: one object dropped.
            (
                vec![web.clone(), legacy.clone()],
                vec![web.clone()],
                vec![legacy.clone()],
            ),
            // A new API version of the same group is the same object.
            (vec![web.clone()], vec![web_beta.clone()], vec![]),
            // Moved to another namespace: the old one is dropped.
            (
                vec![legacy.clone()],
                vec![legacy_other_ns.clone()],
                vec![legacy.clone()],
            ),
            // Nothing before: nothing dropped (a first deploy).
            (vec![], vec![web.clone()], vec![]),
            // Everything dropped, in apply order, each once.
            (
                vec![ns.clone(), legacy.clone(), web.clone(), legacy.clone()],
                vec![],
                vec![ns.clone(), legacy.clone(), web.clone()],
            ),
            (vec![web.clone()], vec![web.clone()], vec![]),
        ];
        for (previous, new, want) in cases {
            assert_eq!(
                dropped_objects(&previous, &new),
                want,
                "{previous:?} -> {new:?}"
            );
        }
    }

    #[test]
    fn prune_verdict_table() {
        let ours = "rollguard-shop";
        let legacy = obj("v1", "ConfigMap", Some("shop"), "legacy");
        let shop_ns = obj("v1", "Namespace", None, "shop");
        let old_ns = obj("v1", "Namespace", None, "old");
        let in_use = namespaces_in_use(&[obj("apps/v1", "Deployment", Some("shop"), "web")], "rg");
        assert_eq!(in_use, vec!["rg".to_string(), "shop".to_string()]);
        let present = |managers: Vec<FieldManager>| Live::Present { managers };
        let cases: Vec<(&ObjectRef, Live, Verdict)> = vec![
            // Ours alone: pruned.
            (&legacy, present(vec![m(ours, "Apply")]), Verdict::Prune),
            // Ours, and a controller's status update: still ours to delete.
            (
                &legacy,
                present(vec![
                    m(ours, "Apply"),
                    m("kube-controller-manager", "Update"),
                ]),
                Verdict::Prune,
            ),
            // Another manager took every field over.
            (
                &legacy,
                present(vec![m("kubectl", "Apply")]),
                Verdict::Keep(KeepReason::TakenOver {
                    managers: vec!["kubectl".into()],
                }),
            ),
            // The legacy shared manager is not this app's.
            (
                &legacy,
                present(vec![m("rollguard", "Apply")]),
                Verdict::Keep(KeepReason::TakenOver {
                    managers: vec!["rollguard".into()],
                }),
            ),
            // No managers at all (created without any): not provably ours.
            (
                &legacy,
                present(vec![]),
                Verdict::Keep(KeepReason::TakenOver { managers: vec![] }),
            ),
            // Another app or tool applies it too.
            (
                &legacy,
                present(vec![m(ours, "Apply"), m("rollguard-web", "Apply")]),
                Verdict::Keep(KeepReason::Shared {
                    managers: vec!["rollguard-web".into()],
                }),
            ),
            (&legacy, Live::Absent, Verdict::Keep(KeepReason::Gone)),
            (
                &legacy,
                Live::Unreadable("Forbidden".into()),
                Verdict::Keep(KeepReason::Unreadable("Forbidden".into())),
            ),
            // A namespace still in use is never deleted; an unused one of ours is.
            (
                &shop_ns,
                present(vec![m(ours, "Apply")]),
                Verdict::Keep(KeepReason::NamespaceInUse),
            ),
            (&old_ns, present(vec![m(ours, "Apply")]), Verdict::Prune),
        ];
        for (object, live, want) in cases {
            assert_eq!(
                prune_verdict(object, &live, ours, &in_use),
                want,
                "{object} {live:?}"
            );
        }
        let chosen = prune_choice(
            vec![
                (legacy.clone(), present(vec![m(ours, "Apply")])),
                (old_ns.clone(), Live::Absent),
            ],
            ours,
            &in_use,
        );
        assert_eq!(
            chosen,
            vec![
                (legacy.clone(), Verdict::Prune),
                (old_ns.clone(), Verdict::Keep(KeepReason::Gone))
            ]
        );
    }

    #[test]
    fn keep_reasons_and_commands_say_what_to_do() {
        let taken = KeepReason::TakenOver {
            managers: vec!["kubectl".into()],
        };
        assert_eq!(
            taken.describe("rollguard-shop"),
            "now managed by \"kubectl\" (field manager \"rollguard-shop\" owns none of its fields any more)"
        );
        assert!(
            KeepReason::Shared {
                managers: vec!["helm".into()]
            }
            .describe("x")
            .contains("also applied by \"helm\"")
        );
        assert_eq!(
            delete_command(&obj("v1", "ConfigMap", Some("shop"), "legacy")),
            "kubectl delete configmap legacy -n shop"
        );
        assert_eq!(
            delete_command(&obj("apps/v1", "Deployment", Some("shop"), "web")),
            "kubectl delete deployment.apps web -n shop"
        );
        assert_eq!(
            delete_command(&obj("v1", "Namespace", None, "old")),
            "kubectl delete namespace old"
        );
    }
}
