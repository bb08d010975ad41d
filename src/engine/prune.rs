//! What the manifests dropped, on one target: the objects of its previous release that this
//! revision no longer declares, read live (their field managers), and under `prune` deleted
//! once the coordinator ended the target `deployed` (never during or after a rollback, never
//! on a failed target). The decisions are `release::dropped`'s; this is the I/O. A delete
//! that fails is a warning that says what to do: the target stays deployed.

use std::collections::BTreeSet;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::{AppliedObject, Resolution, field_manager};
use crate::cluster::connect::ClusterAccess;
use crate::cluster::discovery::{Catalog, discover};
use crate::cluster::retry::{RetryBudget, RetryError, error_chain_text, retry_kube, with_retry};
use crate::config::TargetConfig;
use crate::engine::plan::Plan;
use crate::manifests::{ManifestSet, is_cluster_scoped_kind};
use crate::release::dropped::{
    FieldManager, KeepReason, Live, Verdict, delete_command, dropped_objects, namespaces_in_use,
    prune_choice,
};
use crate::release::session::{TargetRelease, applied_ref};
use crate::release::{ObjectRef, ReleaseOrigin};
use crate::report::plan::TargetPlan;
use crate::report::{DroppedFate, DroppedObject};
use crate::util::retry::Cancel;

/// A dropped object as read, with what its delete needs.
struct Found {
    object: ObjectRef,
    verdict: Verdict,
    /// Its API and identity at the read (None when it could not be read or is gone).
    at: Option<(Api<DynamicObject>, Preconditions)>,
}

/// How long reading (and with `prune`, deleting) the dropped objects of a target may take at
/// most (within `wait.timeout`): a server that stopped answering must not hold up the end of
/// the run for long.
fn budget(prune: bool) -> std::time::Duration {
    std::time::Duration::from_secs(if prune { 60 } else { 20 })
}

/// Where one target is asked.
pub struct Asked<'a> {
    pub client: &'a Client,
    /// The app's field manager (`rollguard-<app>`).
    pub manager: String,
    pub history_namespace: String,
    pub deadline: Instant,
}

/// The objects of `set` as a record would list them: each in the namespace it is applied
/// in (`default_namespace` for namespaced objects without one).
pub fn manifest_refs(
    set: &ManifestSet,
    resolution: &Resolution,
    default_namespace: &str,
) -> Vec<ObjectRef> {
    set.objects
        .iter()
        .map(|o| {
            let namespaced = resolution.resolved(o).map_or_else(
                || !is_cluster_scoped_kind(o.group(), &o.kind),
                |r| r.namespaced,
            );
            ObjectRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                namespace: crate::cluster::apply::effective_namespace(
                    o,
                    namespaced,
                    default_namespace,
                ),
                name: o.name.clone(),
            }
        })
        .collect()
}

/// Reads every object of `previous` that `new` drops and judges it ([`prune_choice`]), in
/// apply order.
async fn look(
    asked: &Asked<'_>,
    previous: &[ObjectRef],
    new: &[ObjectRef],
    cancel: &CancellationToken,
) -> Vec<Found> {
    let dropped = dropped_objects(previous, new);
    if dropped.is_empty() {
        return Vec::new();
    }
    let budget = RetryBudget::until(asked.deadline);
    let groups: Vec<String> = dropped
        .iter()
        .map(|o| o.group().to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let catalog = discover(asked.client, &groups, &budget, cancel).await;
    let mut looked = Vec::new();
    let mut places = Vec::new();
    for object in dropped {
        let (live, at) = match &catalog {
            Ok(catalog) => read_live(asked.client, catalog, &object, &budget, cancel).await,
            Err(e) => (Live::Unreadable(retry_text(e)), None),
        };
        places.push(at);
        looked.push((object, live));
    }
    let in_use = namespaces_in_use(new, &asked.history_namespace);
    prune_choice(looked, &asked.manager, &in_use)
        .into_iter()
        .zip(places)
        .map(|((object, verdict), at)| Found {
            object,
            verdict,
            at,
        })
        .collect()
}

fn retry_text(e: &RetryError) -> String {
    match e {
        RetryError::Api(e) => error_chain_text(e),
        other => other.to_string(),
    }
}

/// One object as the cluster has it: its managers, and its API and identity for a delete.
async fn read_live(
    client: &Client,
    catalog: &Catalog,
    object: &ObjectRef,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> (Live, Option<(Api<DynamicObject>, Preconditions)>) {
    let version = object
        .api_version
        .rsplit_once('/')
        .map_or(object.api_version.as_str(), |(_, v)| v);
    // A kind the cluster no longer serves has no objects left.
    let Some(served) = catalog.resolve(object.group(), version, &object.kind) else {
        return (Live::Absent, None);
    };
    let resource = &served.resource;
    let api: Api<DynamicObject> = match &object.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    match with_retry("get", budget, cancel, || api.get_opt(&object.name)).await {
        Ok(None) => (Live::Absent, None),
        Ok(Some(found)) => {
            let managers = found
                .metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .map(|m| FieldManager {
                    manager: m.manager.unwrap_or_default(),
                    operation: m.operation.unwrap_or_default(),
                })
                .collect();
            let at = Preconditions {
                uid: found.metadata.uid,
                resource_version: found.metadata.resource_version,
            };
            (Live::Present { managers }, Some((api, at)))
        }
        Err(e) => (Live::Unreadable(retry_text(&e)), None),
    }
}

/// Why a prune's delete did not happen, in one line.
#[derive(Debug, thiserror::Error)]
enum DeleteError {
    /// 409: its uid or resourceVersion no longer matches what was read.
    #[error("it changed after it was read (another writer)")]
    Changed,
    #[error("{}", retry_text(.0))]
    Failed(#[source] RetryError),
}

/// Deletes one object if it is still the one read (same uid and resourceVersion).
async fn delete(
    api: &Api<DynamicObject>,
    name: &str,
    at: &Preconditions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<(), DeleteError> {
    let params = DeleteParams {
        preconditions: Some(at.clone()),
        ..DeleteParams::default()
    };
    match retry_kube("delete", budget, Cancel::Write(cancel), || {
        api.delete(name, &params)
    })
    .await
    {
        Ok(_) => Ok(()),
        Err(RetryError::Api(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        Err(RetryError::Api(kube::Error::Api(s))) if s.code == 409 => Err(DeleteError::Changed),
        Err(e) => Err(DeleteError::Failed(e)),
    }
}

/// What became of each dropped object of a target, and the warnings to add (failed
/// deletes). `prune`: delete what is this app's; else only list. Deletes go in reverse apply
/// order (a Namespace after what was in it).
async fn settle(
    asked: &Asked<'_>,
    previous: &[ObjectRef],
    new: &[ObjectRef],
    prune: bool,
    cancel: &CancellationToken,
) -> (Vec<DroppedObject>, Vec<String>) {
    let found = look(asked, previous, new, cancel).await;
    let budget = RetryBudget::until(asked.deadline);
    let mut out: Vec<Option<DroppedObject>> = vec![None; found.len()];
    let mut warnings = Vec::new();
    for (i, f) in found.iter().enumerate().rev() {
        let shown = f.object.to_string();
        let entry = |fate, note: Option<String>| DroppedObject {
            object: shown.clone(),
            fate,
            note,
        };
        out[i] = match (&f.verdict, &f.at) {
            (Verdict::Keep(KeepReason::Gone), _) => None,
            (_, _) if !prune => Some(entry(DroppedFate::LeftInPlace, None)),
            (Verdict::Keep(reason), _) => Some(entry(
                DroppedFate::Kept,
                Some(reason.describe(&asked.manager)),
            )),
            (Verdict::Prune, Some((api, at))) => {
                match delete(api, &f.object.name, at, &budget, cancel).await {
                    Ok(()) => {
                        tracing::info!("pruned {shown}: dropped from the manifests");
                        Some(entry(DroppedFate::Pruned, None))
                    }
                    Err(why) => {
                        let note = format!(
                            "the delete failed: {why}; the deploy stands. Delete it by hand if it is unwanted (`{}`): later deploys will not try again, since this release's record no longer lists it",
                            delete_command(&f.object)
                        );
                        warnings.push(format!("could not prune {shown}: {note}"));
                        Some(entry(DroppedFate::PruneFailed, Some(note)))
                    }
                }
            }
            // Not reached: a Prune verdict comes from a live read.
            (Verdict::Prune, None) => Some(entry(DroppedFate::LeftInPlace, None)),
        };
    }
    // Objects applied side by side are recorded in the order they finished: by name, so
    // that the report reads the same every time.
    let mut out: Vec<DroppedObject> = out.into_iter().flatten().collect();
    out.sort_by(|a, b| a.object.cmp(&b.object));
    (out, warnings)
}

/// At the end of a target that the coordinator ended `deployed` (`deployed`) or `failed`
/// without a rollback: what this revision's manifests (`applied`) dropped of the previous
/// release (`release.last_good`) and, deployed and with prune on, deleted when still this
/// app's; and the warnings of failed deletes. Nothing for a manual rollback's re-apply, a
/// run that applied nothing, or after a cancel.
pub async fn after_end(
    plan: &Plan,
    target: &str,
    access: &ClusterAccess,
    release: &TargetRelease,
    applied: &[AppliedObject],
    deployed: bool,
    cancel: &CancellationToken,
) -> (Vec<DroppedObject>, Vec<String>) {
    if cancel.is_cancelled()
        || applied.is_empty()
        || plan.origin_for(target) != ReleaseOrigin::Deploy
    {
        return (Vec::new(), Vec::new());
    }
    let Some(previous) = release.last_good.as_ref().map(|g| g.objects.clone()) else {
        return (Vec::new(), Vec::new());
    };
    let new: Vec<ObjectRef> = applied.iter().map(applied_ref).collect();
    let prune = deployed && plan.options.prune;
    let asked = Asked {
        client: &access.client,
        manager: field_manager(&plan.config.app),
        history_namespace: release.store.namespace().to_string(),
        deadline: Instant::now() + plan.config.wait.timeout.min(budget(prune)),
    };
    settle(&asked, &previous, &new, prune, cancel).await
}

/// A dry run's view of what the manifests drop on one target (`found`: its plan so far):
/// the previous release read from the history (no lock: nothing is written), the dropped
/// objects read live; each is left in place, or with prune on listed as to prune (or kept,
/// with a warning saying why).
pub async fn plan_dropped(
    plan: &Plan,
    target: &TargetConfig,
    access: &ClusterAccess,
    resolution: &Resolution,
    found: &mut TargetPlan,
    cancel: &CancellationToken,
) {
    let history_namespace = plan
        .config
        .history_namespace(target, &access.context_namespace);
    let store = crate::release::ReleaseStore::for_access(
        access,
        &plan.config.app,
        &history_namespace,
        plan.config.history.keep,
    );
    let previous = match store.list().await {
        Ok(records) => {
            found.history_head = records.iter().map(|r| r.revision).max();
            match crate::release::last_good(&records) {
                Some(good) => good.objects.clone(),
                None => return,
            }
        }
        Err(e) => {
            found.warnings.push(format!(
                "could not read the release history to list what the manifests dropped: {e}"
            ));
            return;
        }
    };
    let default_namespace = plan
        .config
        .default_namespace(target, &access.context_namespace);
    let new = manifest_refs(
        plan.manifests_for(&target.name),
        resolution,
        &default_namespace,
    );
    let asked = Asked {
        client: &access.client,
        manager: field_manager(&plan.config.app),
        history_namespace,
        deadline: Instant::now() + plan.config.wait.timeout.min(budget(false)),
    };
    let mut looked = look(&asked, &previous, &new, cancel).await;
    // By name, as the deploy's report lists them (the record's order varies within a phase).
    looked.sort_by_key(|f| f.object.to_string());
    for f in looked {
        let shown = f.object.to_string();
        match f.verdict {
            Verdict::Keep(KeepReason::Gone) => {}
            _ if !plan.options.prune => found.dropped.push(shown),
            Verdict::Prune => found.prune.push(shown),
            Verdict::Keep(reason) => {
                found.warnings.push(format!(
                    "{shown} is no longer in the manifests but would not be pruned: {}",
                    reason.describe(&asked.manager)
                ));
                found.dropped.push(shown);
            }
        }
    }
}
