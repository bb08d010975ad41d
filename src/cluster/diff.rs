//! What applying a set would change on one target, asked of the target itself: for every
//! object the live object (GET) and the server's answer to a server-side apply with
//! `dryRun=All`, both normalised (`kube::normalize`) and compared. Nothing is written: no
//! namespace is created, no CRD established, no lock or record taken. The same comparison,
//! without a cluster, compares two manifest sets (`compare_sets`, the offline plan).

use std::collections::HashSet;

use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::{
    NOT_APPLIED, ObjectFailure, Resolution, describe_apply_error, dynamic_api, effective_namespace,
    is_missing_namespace, not_applied, prepare_body,
};
use crate::cluster::normalize::{comparable, to_yaml};
use crate::cluster::retry::{RetryBudget, RetryError, with_retry};
use crate::manifests::{ManifestObject, ManifestSet, is_cluster_scoped_kind};
use crate::report::diff::unified;
use crate::report::plan::{PlannedChange, TargetPlan};
use crate::report::redact;
use crate::report::{LiveIdentity, SeenObject};
use crate::util::in_order::{Window, in_order_made};

/// Why a custom resource is listed as created without the server's check.
pub const CRD_NOT_YET: &str = "CRD not yet on the cluster";

/// What one object would become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(PlannedChange),
    Update(PlannedChange),
    Unchanged(String),
}

/// The labels of a diff's two sides, e.g. ("live", "dry run") or ("abc1234", "def5678").
#[derive(Debug, Clone, Copy)]
pub struct Sides<'a> {
    pub before: &'a str,
    pub after: &'a str,
}

/// One object's change: created when there is no `before`, else updated (with the unified
/// diff of the normalised, redacted objects) or unchanged. Pure.
pub fn object_change(
    object: String,
    origin: Option<String>,
    before: Option<&Value>,
    after: &Value,
    manifest: &Value,
    sides: Sides,
) -> Change {
    let (before, after) = comparable(before, after, manifest);
    let Some(before) = before else {
        return Change::Create(PlannedChange {
            object,
            origin,
            note: None,
            diff: None,
        });
    };
    if before == after {
        return Change::Unchanged(object);
    }
    let diff = unified(
        &to_yaml(&before),
        &to_yaml(&after),
        sides.before,
        sides.after,
    );
    Change::Update(PlannedChange {
        object,
        origin,
        note: None,
        diff: Some(diff),
    })
}

/// Puts changes into a target's plan, in order.
pub fn add_changes(plan: &mut TargetPlan, changes: Vec<Change>) {
    for change in changes {
        match change {
            Change::Create(c) => plan.create.push(c),
            Change::Update(c) => plan.update.push(c),
            Change::Unchanged(name) => plan.unchanged.push(name),
        }
    }
}

/// An object placed as it would be applied offline (no discovery): namespaced kinds without
/// a namespace go to `default_namespace` when there is one.
fn placed(obj: &ManifestObject, default_namespace: Option<&str>) -> ManifestObject {
    match default_namespace {
        Some(ns) if !is_cluster_scoped_kind(obj.group(), &obj.kind) => obj.in_namespace(ns),
        _ => obj.clone(),
    }
}

/// The offline comparison of two manifest sets for one target (pure): what `new` creates,
/// changes (with a diff) or leaves as `old` had it, and what `old` had that `new` drops
/// (left in place: rollguard never prunes). Objects are matched by kind, namespace and name.
pub fn compare_sets(
    old: &[ManifestObject],
    new: &[ManifestObject],
    default_namespace: Option<&str>,
    name: &str,
    sides: Sides,
) -> TargetPlan {
    let key = |o: &ManifestObject| {
        (
            o.api_version.clone(),
            o.kind.clone(),
            o.namespace.clone(),
            o.name.clone(),
        )
    };
    let old: Vec<ManifestObject> = old.iter().map(|o| placed(o, default_namespace)).collect();
    let new: Vec<ManifestObject> = new.iter().map(|o| placed(o, default_namespace)).collect();
    let mut plan = TargetPlan::new(name);
    let changes = new
        .iter()
        .map(|obj| {
            let before = old.iter().find(|o| key(o) == key(obj)).map(|o| &o.body);
            object_change(
                obj.display_name(),
                Some(obj.origin.to_string()),
                before,
                &obj.body,
                &obj.body,
                sides,
            )
        })
        .collect();
    add_changes(&mut plan, changes);
    let kept: HashSet<_> = new.iter().map(key).collect();
    plan.dropped = old
        .iter()
        .filter(|o| !kept.contains(&key(o)))
        .map(ManifestObject::display_name)
        .collect();
    plan
}

/// How to ask a target.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// Namespace for namespaced objects that name none.
    pub default_namespace: String,
    /// `--force-conflicts`: the dry run takes ownership as the deploy would.
    pub force: bool,
    /// The field manager the deploy would apply with (`rollguard-<app>`), so that the server
    /// answers for the same owner.
    pub field_manager: String,
    /// Requests in flight per target, and the fleet's bound.
    pub in_flight: Window,
    /// Nothing is attempted after this instant.
    pub deadline: Instant,
    /// The labels of the diff's two sides.
    pub before_label: String,
    pub after_label: String,
    /// False: only the `dryRun=All` applies are sent (no GET of the live objects or of the
    /// namespaces, no comparison, no diff rendered): what the server refuses, and nothing
    /// else. The preflight's question when no one reads its answers.
    pub compare: bool,
}

/// What a target says the set would change.
#[derive(Debug, Default)]
pub struct TargetDiff {
    pub changes: Vec<Change>,
    /// Every object asked about, as a saved plan keeps it.
    pub seen: Vec<SeenObject>,
    pub failures: Vec<ObjectFailure>,
    pub cancelled: bool,
}

/// Asks the target what applying `set` would change (kinds resolved beforehand by
/// `resolve_set`): GETs and `dryRun=All` applies only, up to `in_flight` at once.
pub async fn diff_resolved(
    client: &Client,
    set: &ManifestSet,
    resolution: &Resolution,
    options: &DiffOptions,
    cancel: &CancellationToken,
) -> TargetDiff {
    let budget = RetryBudget::until(options.deadline);
    let mut out = TargetDiff::default();

    // Namespaces rollguard would create before applying (not in the set, not on the cluster).
    let needed = resolution.namespaces_to_create(set, &options.default_namespace);
    // Only shown in a diff: a check asks nothing of namespaces.
    for ns in needed.into_iter().filter(|_| options.compare) {
        use k8s_openapi::api::core::v1::Namespace;
        let api: kube::Api<Namespace> = kube::Api::all(client.clone());
        match with_retry("get namespace", &budget, cancel, || api.get_opt(&ns)).await {
            Ok(Some(_)) => {}
            Ok(None) => out.changes.push(Change::Create(PlannedChange {
                object: format!("Namespace {ns}"),
                origin: None,
                note: Some("created by rollguard before the apply: not in the manifests".into()),
                diff: None,
            })),
            Err(RetryError::Cancelled) => {
                out.cancelled = true;
                return out;
            }
            Err(RetryError::NotSent) => out.failures.push(ObjectFailure {
                object: format!("Namespace {ns}"),
                origin: String::new(),
                reason: NOT_APPLIED.into(),
                message: "not asked (deadline): the target's deadline passed before it was sent"
                    .into(),
            }),
            Err(RetryError::Api(e)) => out.failures.push(ObjectFailure {
                object: format!("Namespace {ns}"),
                origin: String::new(),
                reason: "Unreachable".into(),
                message: crate::cluster::retry::error_chain_text(&e),
            }),
        }
    }

    let objects = &set.objects;
    let results: Vec<Result<Option<(Change, SeenObject)>, ObjectFailure>> = in_order_made(
        objects.len(),
        &options.in_flight,
        |i| diff_one(client, &objects[i], resolution, options, &budget, cancel),
        || {},
    )
    .await;
    out.cancelled = cancel.is_cancelled();
    for r in results {
        match r {
            Ok(Some((change, seen))) => {
                out.changes.push(change);
                out.seen.push(seen);
            }
            Ok(None) => {}
            Err(f) => out.failures.push(f),
        }
    }
    out
}

/// A target's plan from the server's answers (`diff_resolved`), named `name`: its changes,
/// and the objects it could not check as failures. Also whether it was cancelled.
pub async fn plan_resolved(
    name: &str,
    client: &Client,
    server: &str,
    set: &ManifestSet,
    resolution: &Resolution,
    options: &DiffOptions,
    cancel: &CancellationToken,
) -> (TargetPlan, bool) {
    let found = diff_resolved(client, set, resolution, options, cancel).await;
    let mut plan = TargetPlan::new(name);
    add_changes(&mut plan, found.changes);
    plan.seen = found.seen;
    if !found.failures.is_empty() {
        plan.errors = crate::cluster::apply::apply_failures(
            &crate::cluster::apply::ApplyError::Objects(found.failures),
            server,
        );
    }
    tracing::info!(
        create = plan.create.len(),
        update = plan.update.len(),
        unchanged = plan.unchanged.len(),
        errors = plan.errors.len(),
        "planned"
    );
    (plan, found.cancelled)
}

/// One object's change and how the plan keeps it; None when `options.compare` is off (only
/// the server's refusal counts, as a failure).
async fn diff_one(
    client: &Client,
    obj: &ManifestObject,
    resolution: &Resolution,
    options: &DiffOptions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<Option<(Change, SeenObject)>, ObjectFailure> {
    if !options.compare {
        return check_one(client, obj, resolution, options, budget, cancel)
            .await
            .map(|()| None);
    }
    compare_one(client, obj, resolution, options, budget, cancel)
        .await
        .map(Some)
}

/// The server's dry run of one object, its answer dropped: Err when the server refuses it
/// (or cannot be asked). An object in a namespace this deploy creates, or of a kind a CRD of
/// the set serves, cannot be checked yet and passes, as in [`compare_one`].
async fn check_one(
    client: &Client,
    obj: &ManifestObject,
    resolution: &Resolution,
    options: &DiffOptions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<(), ObjectFailure> {
    let Some(resolved) = resolution.resolved(obj) else {
        return Ok(());
    };
    let namespace = effective_namespace(obj, resolved.namespaced, &options.default_namespace);
    let api = dynamic_api(client, resolved, namespace.as_deref());
    let body = prepare_body(&obj.body, namespace.as_deref());
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = options.force;
    params.dry_run = true;
    let patch = Patch::Apply(&body);
    let answer = with_retry("dry-run apply", budget, cancel, || {
        api.patch(&obj.name, &params, &patch)
    })
    .await;
    let shown_name = || placed_name(obj, resolved.namespaced, &options.default_namespace);
    match answer {
        Ok(_) => Ok(()),
        Err(RetryError::Cancelled) => Err(ObjectFailure {
            object: shown_name(),
            origin: obj.origin.to_string(),
            reason: "Cancelled".into(),
            message: "cancelled".into(),
        }),
        Err(RetryError::NotSent) => Err(not_applied(shown_name(), obj)),
        Err(RetryError::Api(e)) => {
            let mut f = describe_apply_error(obj, &e);
            f.object = shown_name();
            // The namespace comes with this deploy: nothing of it can be checked yet.
            if is_missing_namespace(&f) {
                return Ok(());
            }
            Err(f)
        }
    }
}

/// The live object and the server's dry run of one object, compared.
async fn compare_one(
    client: &Client,
    obj: &ManifestObject,
    resolution: &Resolution,
    options: &DiffOptions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<(Change, SeenObject), ObjectFailure> {
    let origin = Some(obj.origin.to_string());
    let Some(resolved) = resolution.resolved(obj) else {
        // resolve_set left it unresolved, so a CRD of this set serves it: the server cannot
        // check it before that CRD exists.
        let namespaced = !is_cluster_scoped_kind(obj.group(), &obj.kind);
        let shown = placed_name(obj, namespaced, &options.default_namespace);
        let namespace = effective_namespace(obj, namespaced, &options.default_namespace);
        let body = prepare_body(&obj.body, namespace.as_deref());
        let seen = seen_object(obj, &shown, namespace, &body, None);
        return Ok((
            Change::Create(PlannedChange {
                object: shown,
                origin,
                note: Some(CRD_NOT_YET.into()),
                diff: None,
            }),
            seen,
        ));
    };
    let namespace = effective_namespace(obj, resolved.namespaced, &options.default_namespace);
    let shown_name = placed_name(obj, resolved.namespaced, &options.default_namespace);
    let api = dynamic_api(client, resolved, namespace.as_deref());
    let failure = |reason: &str, message: String| ObjectFailure {
        object: shown_name.clone(),
        origin: obj.origin.to_string(),
        reason: reason.to_string(),
        message,
    };

    // The live object and the dry run's answer do not depend on each other: both asked at
    // once (the preflight's cost is one round trip per object, not two).
    let body = prepare_body(&obj.body, namespace.as_deref());
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = options.force;
    params.dry_run = true;
    let patch = Patch::Apply(&body);
    let (got, answer) = tokio::join!(
        with_retry("get", budget, cancel, || api.get_opt(&obj.name)),
        with_retry("dry-run apply", budget, cancel, || {
            api.patch(&obj.name, &params, &patch)
        })
    );
    let live = match got {
        Ok(found) => found.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)),
        Err(RetryError::Cancelled) => return Err(failure("Cancelled", "cancelled".into())),
        Err(RetryError::NotSent) => {
            return Err(not_applied(shown_name.clone(), obj));
        }
        Err(RetryError::Api(e)) => {
            let mut f = describe_apply_error(obj, &e);
            f.object = shown_name.clone();
            return Err(f);
        }
    };
    // A live Secret may hold values the manifests do not: the scrubber learns them before
    // anything could print them.
    if let Some(live) = &live {
        redact::learn([live]);
    }
    let seen = seen_object(
        obj,
        &shown_name,
        namespace.clone(),
        &body,
        live.as_ref().map(live_identity),
    );
    tracing::debug!(object = %shown_name, ok = answer.is_ok(), "dry-run applied");
    let sides = Sides {
        before: &options.before_label,
        after: &options.after_label,
    };
    match answer {
        Ok(would_be) => {
            let would_be = serde_json::to_value(would_be).unwrap_or(Value::Null);
            let change = object_change(shown_name, origin, live.as_ref(), &would_be, &body, sides);
            Ok((change, seen))
        }
        Err(RetryError::Cancelled) => Err(failure("Cancelled", "cancelled".into())),
        Err(RetryError::NotSent) => Err(not_applied(shown_name, obj)),
        Err(RetryError::Api(e)) => {
            let mut f = describe_apply_error(obj, &e);
            f.object = shown_name.clone();
            if live.is_none() && is_missing_namespace(&f) {
                // The namespace comes with this deploy: the object would be created in it.
                let change = Change::Create(PlannedChange {
                    object: shown_name,
                    origin,
                    note: Some(format!(
                        "namespace {} not yet on the cluster",
                        namespace.unwrap_or_default()
                    )),
                    diff: None,
                });
                return Ok((change, seen));
            }
            Err(f)
        }
    }
}

/// An object as a saved plan keeps it: its body as applied (a Secret's by digest only) and
/// the live object it was compared with. Pure.
pub fn seen_object(
    obj: &ManifestObject,
    shown: &str,
    namespace: Option<String>,
    body: &Value,
    live: Option<LiveIdentity>,
) -> SeenObject {
    SeenObject {
        object: shown.to_string(),
        api_version: obj.api_version.clone(),
        kind: obj.kind.clone(),
        namespace,
        name: obj.name.clone(),
        origin: obj.origin.to_string(),
        sha256: crate::manifests::body_digest(body),
        body: (!redact::is_secret(body)).then(|| body.clone()),
        live,
    }
}

/// A live object's uid and resourceVersion (empty when the server gave none).
pub fn live_identity(live: &Value) -> LiveIdentity {
    let field = |name: &str| {
        live.pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    LiveIdentity {
        uid: field("uid"),
        resource_version: field("resourceVersion"),
    }
}

/// "Deployment shop/web" as the object would be applied.
fn placed_name(obj: &ManifestObject, namespaced: bool, default_namespace: &str) -> String {
    match effective_namespace(obj, namespaced, default_namespace) {
        Some(ns) => format!("{} {ns}/{}", obj.kind, obj.name),
        None => format!("{} {}", obj.kind, obj.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::Origin;
    use serde_json::json;

    const SIDES: Sides = Sides {
        before: "old",
        after: "new",
    };

    fn obj(kind: &str, name: &str, body: Value) -> ManifestObject {
        let api_version = body["apiVersion"].as_str().unwrap_or("v1").to_string();
        ManifestObject {
            api_version,
            kind: kind.into(),
            name: name.into(),
            namespace: None,
            origin: Origin {
                file: "k8s/app.yaml".into(),
                line: 1,
            },
            body,
            source: None,
        }
    }

    fn cm(name: &str, value: &str) -> ManifestObject {
        obj(
            "ConfigMap",
            name,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}),
        )
    }

    #[test]
    fn object_change_table() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "1", "resourceVersion": "5"}, "data": {"k": "a"}});
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "1", "resourceVersion": "6"}, "data": {"k": "a"}});
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "1"}, "data": {"k": "b"}});
        let manifest = json!({"data": {"k": "b"}});
        let name = || "ConfigMap shop/c".to_string();
        assert!(matches!(
            object_change(name(), None, None, &changed, &manifest, SIDES),
            Change::Create(PlannedChange { diff: None, .. })
        ));
        assert_eq!(
            object_change(name(), None, Some(&live), &same, &manifest, SIDES),
            Change::Unchanged(name())
        );
        let Change::Update(update) =
            object_change(name(), None, Some(&live), &changed, &manifest, SIDES)
        else {
            panic!("an update")
        };
        let diff = update.diff.expect("a diff");
        assert!(diff.starts_with("--- old\n+++ new\n"), "{diff}");
        assert!(diff.contains("\n-  k: a\n+  k: b\n"), "{diff}");
        assert!(
            !diff.contains("resourceVersion") && !diff.contains("uid"),
            "{diff}"
        );
    }

    #[test]
    fn secrets_differ_by_marker_only() {
        let secret = |v: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"password": v}});
        let Change::Update(update) = object_change(
            "Secret shop/db".into(),
            None,
            Some(&secret("old-pass-1")),
            &secret("new-pass-2"),
            &secret("new-pass-2"),
            SIDES,
        ) else {
            panic!("an update")
        };
        let diff = update.diff.unwrap();
        assert!(
            diff.contains(&format!("-  password: '{}'", redact::marker(b"old-pass-1")))
                || diff.contains(&format!("-  password: {}", redact::marker(b"old-pass-1"))),
            "{diff}"
        );
        assert!(diff.contains(&redact::marker(b"new-pass-2")), "{diff}");
        assert!(
            !diff.contains("old-pass-1") && !diff.contains("new-pass-2"),
            "{diff}"
        );
    }

    #[test]
    fn compare_sets_finds_created_changed_unchanged_and_dropped() {
        let old = vec![cm("same", "1"), cm("changed", "1"), cm("gone", "1")];
        let new = vec![cm("same", "1"), cm("changed", "2"), cm("added", "1")];
        let plan = compare_sets(&old, &new, Some("shop"), "eu", SIDES);
        assert_eq!(plan.name, "eu");
        let names = |cs: &[PlannedChange]| cs.iter().map(|c| c.object.clone()).collect::<Vec<_>>();
        assert_eq!(names(&plan.create), vec!["ConfigMap shop/added"]);
        assert_eq!(names(&plan.update), vec!["ConfigMap shop/changed"]);
        assert_eq!(plan.unchanged, vec!["ConfigMap shop/same"]);
        assert_eq!(plan.dropped, vec!["ConfigMap shop/gone"]);
        let diff = plan.update[0].diff.as_deref().unwrap();
        assert!(
            diff.contains("-  k: \"1\"") && diff.contains("+  k: \"2\""),
            "{diff}"
        );
        assert_eq!(plan.create[0].origin.as_deref(), Some("k8s/app.yaml:1"));
        // Without a default namespace objects are named as written.
        let plan = compare_sets(&old, &old, None, "eu", SIDES);
        assert_eq!(plan.unchanged.len(), 3);
        assert!(plan.unchanged.contains(&"ConfigMap same".to_string()));
    }
}
