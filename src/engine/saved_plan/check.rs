//! A target's objects as they are now, for the plan's check (`deploy --plan`): each manifest
//! object placed as the apply would place it (its body's digest) and its live object read
//! (GETs only), up to the apply's in-flight bound.

use kube::Client;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::verify::{LiveNow, NowObject, newest_manager};
use crate::cluster::apply::{Resolution, dynamic_api, effective_namespace, prepare_body};
use crate::cluster::diff::live_identity;
use crate::cluster::retry::{RetryBudget, RetryError, error_chain_text, with_retry};
use crate::manifests::{ManifestObject, ManifestSet, body_digest, is_cluster_scoped_kind};
use crate::util::in_order::{Window, in_order_made};

/// Every object of `set` on this target now, in the set's order.
pub async fn objects_now(
    client: &Client,
    set: &ManifestSet,
    resolution: &Resolution,
    at: Place<'_>,
    deadline: Instant,
    in_flight: &Window,
    cancel: &CancellationToken,
) -> Vec<NowObject> {
    let budget = RetryBudget::until(deadline);
    let objects = &set.objects;
    in_order_made(
        objects.len(),
        in_flight,
        |i| object_now(client, &objects[i], resolution, at, &budget, cancel),
        || {},
    )
    .await
}

/// Where the deploy applies: the namespace of objects that name none, as whom.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub default_namespace: &'a str,
    pub field_manager: &'a str,
}

async fn object_now(
    client: &Client,
    obj: &ManifestObject,
    resolution: &Resolution,
    at: Place<'_>,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> NowObject {
    let resolved = resolution.resolved(obj);
    let namespaced = resolved.map_or_else(
        || !is_cluster_scoped_kind(obj.group(), &obj.kind),
        |r| r.namespaced,
    );
    let namespace = effective_namespace(obj, namespaced, at.default_namespace);
    let object = match &namespace {
        Some(ns) => format!("{} {ns}/{}", obj.kind, obj.name),
        None => format!("{} {}", obj.kind, obj.name),
    };
    let body = prepare_body(&obj.body, namespace.as_deref());
    // A kind a CRD of this set brings is not served yet: its objects cannot exist.
    let live = match resolved {
        None => LiveNow::Absent,
        Some(resolved) => {
            let api = dynamic_api(client, resolved, namespace.as_deref());
            match with_retry("get", budget, cancel, || api.get_opt(&obj.name)).await {
                Ok(None) => LiveNow::Absent,
                Ok(Some(found)) => {
                    let live = serde_json::to_value(found).unwrap_or(Value::Null);
                    LiveNow::Present {
                        identity: live_identity(&live),
                        manager: newest_manager(&live, at.field_manager),
                    }
                }
                Err(RetryError::Cancelled) => LiveNow::Unreadable("cancelled".into()),
                Err(RetryError::NotSent) => {
                    LiveNow::Unreadable("the target's deadline passed before it was read".into())
                }
                Err(RetryError::Api(e)) => LiveNow::Unreadable(error_chain_text(&e)),
            }
        }
    };
    NowObject {
        object,
        origin: obj.origin.to_string(),
        sha256: body_digest(&body),
        live,
    }
}
