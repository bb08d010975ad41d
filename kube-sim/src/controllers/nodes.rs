//! A few simulated Nodes per cluster, where pods are placed.

use serde_json::{Value, json};

use super::daemonset::NodeInfo;

/// How many nodes each simulated cluster has.
pub const NODE_COUNT: usize = 3;

/// The node names of a cluster: `<cluster>-node-1` ...
pub fn node_names(cluster: &str) -> Vec<String> {
    (1..=NODE_COUNT)
        .map(|i| format!("{cluster}-node-{i}"))
        .collect()
}

/// The internal IP of node `index` (0-based).
pub fn node_ip(index: usize) -> String {
    format!("172.18.0.{}", index + 2)
}

/// The pod IP for the `n`-th pod placed on node `index`.
pub fn pod_ip(index: usize, n: u64) -> String {
    format!("10.244.{}.{}", index, (n % 250) + 2)
}

pub fn node_labels(name: &str) -> Value {
    json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    })
}

pub fn node_infos(cluster: &str) -> Vec<NodeInfo> {
    node_names(cluster)
        .into_iter()
        .map(|name| NodeInfo {
            labels: node_labels(&name),
            name,
        })
        .collect()
}

/// The Node object for node `index` of `cluster`.
pub fn node_object(cluster: &str, index: usize) -> Value {
    let name = format!("{cluster}-node-{}", index + 1);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels(&name)},
        "spec": {"podCIDR": format!("10.244.{index}.0/24"), "podCIDRs": [format!("10.244.{index}.0/24")]},
    })
}

/// The Node status the kubelet reports.
pub fn node_status(index: usize, now: jiff::Timestamp) -> Value {
    let now = crate::model::clock::format_time(now);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| json!({"type": kind, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": reason, "message": message});
    let resources = json!({"cpu": "8", "ephemeral-storage": "102400000Ki", "hugepages-2Mi": "0", "memory": "16384000Ki", "pods": "110"});
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": node_ip(index)},
            {"type": "Hostname", "address": format!("node-{}", index + 1)},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("{:032x}", index + 1),
            "systemUUID": format!("{:032x}", index + 101),
            "bootID": format!("{:032x}", index + 201),
            "kernelVersion": "6.8.0-sim",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "containerRuntimeVersion": "containerd://2.1.3",
            "kubeletVersion": "v1.36.2",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
}
