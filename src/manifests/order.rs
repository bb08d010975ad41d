//! The apply order of kinds (namespaces and CRDs first, workloads after what they consume),
//! and which kinds are cluster-scoped.

pub(super) const PHASE_NAMES: [&str; 6] = [
    "namespaces-and-crds",
    "config-storage-rbac",
    "bindings",
    "services",
    "workloads",
    "other",
];

/// The apply order of a kind: Namespaces and CRDs; then what workloads consume (service
/// accounts, config, secrets, storage, roles); then bindings (after their roles, or RBAC's
/// escalation check refuses them); then Services (so pods get their env links); then
/// workloads; then everything else (HPAs, PDBs, Ingresses, custom resources, webhooks).
pub fn apply_rank(group: &str, kind: &str) -> usize {
    match (group, kind) {
        ("", "Namespace") | ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        ("", "ServiceAccount" | "ConfigMap" | "Secret" | "PersistentVolume")
        | ("", "PersistentVolumeClaim" | "LimitRange" | "ResourceQuota")
        | ("storage.k8s.io", "StorageClass")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => 1,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => 2,
        ("", "Service") => 3,
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job" | "CronJob")
        | ("", "Pod" | "ReplicationController") => 4,
        _ => 5,
    }
}

/// Kinds known to be cluster-scoped (discovery is the authority; this is for messages and
/// duplicate detection before any cluster is asked).
pub fn is_cluster_scoped_kind(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Namespace" | "Node" | "PersistentVolume")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "storage.k8s.io",
                "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | (
                "rbac.authorization.k8s.io",
                "ClusterRole" | "ClusterRoleBinding"
            )
            | (
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            )
            | ("apiregistration.k8s.io", "APIService")
            | ("networking.k8s.io", "IngressClass")
            | ("node.k8s.io", "RuntimeClass")
    )
}
