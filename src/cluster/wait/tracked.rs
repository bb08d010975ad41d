//! What the wait (and the bake) follows: the applied objects, each with its watch and how
//! it stands; the lowest part of the wait, read by the stores, the evaluation and the details.

use kube::discovery::ApiResource;

use crate::cluster::apply::AppliedObject;

/// One object the wait (or the bake) follows.
pub(in crate::cluster) struct Tracked<'a> {
    pub(in crate::cluster) applied: &'a AppliedObject,
    /// Its watch's index among the stores' object watches (None: not watched).
    pub(in crate::cluster) source: Option<usize>,
    pub(in crate::cluster) done: bool,
    pub(in crate::cluster) last_message: String,
}

const WORKLOAD_KINDS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
];

pub(in crate::cluster) fn is_workload(resource: &ApiResource) -> bool {
    (resource.group == "apps" || resource.group == "batch")
        && WORKLOAD_KINDS.contains(&resource.kind.as_str())
}
