//! The representations a client asks for in `Accept` besides the object itself:
//! `meta.k8s.io/v1` Tables (what `kubectl get` asks for), with the columns the real server
//! prints for the common kinds and Name/Age for the rest, and PartialObjectMetadata.

use serde_json::{Map, Value, json};

use crate::model::clock::Clock;
use crate::storage::registry::ResourceInfo;

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .any(|part| part.contains("as=Table") && part.contains("g=meta.k8s.io"))
}

/// Computes the cells of one row.
type CellsFn<'a> = Box<dyn Fn(&Value) -> Vec<Value> + 'a>;

/// The columns of a table and how to compute a row's cells.
type Printer<'a> = (Vec<Column>, CellsFn<'a>);

struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    priority: u8,
}

const fn col(name: &'static str, kind: &'static str, priority: u8) -> Column {
    Column {
        name,
        kind,
        format: "",
        priority,
    }
}

fn name_column_priority(priority: u8) -> Column {
    Column {
        priority,
        ..name_column()
    }
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

fn name_column() -> Column {
    Column {
        name: "Name",
        kind: "string",
        format: "name",
        priority: 0,
    }
}

/// Evaluates the simple JSONPath forms CRD printer columns use: `.a.b`, `.a[0].b`.
pub fn simple_json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut v = obj;
    for part in path.trim_start_matches('.').split('.') {
        if part.is_empty() {
            continue;
        }
        let (field, index) = match part.split_once('[') {
            Some((f, rest)) => (
                f,
                rest.strip_suffix(']').and_then(|i| i.parse::<usize>().ok()),
            ),
            None => (part, None),
        };
        if !field.is_empty() {
            v = v.get(field)?;
        }
        if part.contains('[') {
            v = v.get(index?)?;
        }
    }
    Some(v)
}

/// The Table of a custom resource: Name plus the CRD's printer columns (or Age).
fn custom_table(info: &ResourceInfo, objects: &[&Value], list_meta: Value, clock: &Clock) -> Value {
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": NAME_DESCRIPTION, "priority": 0})];
    let age_only = info.printer_columns.is_empty();
    if age_only {
        defs.push(
            json!({"name": "Age", "type": "date", "format": "", "description": "", "priority": 0}),
        );
    }
    for c in &info.printer_columns {
        defs.push(json!({"name": c.name, "type": c.kind, "format": c.format,
            "description": c.description, "priority": c.priority}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![json!(text(o, "/metadata/name"))];
            if age_only {
                cells.push(json!(age(o, clock)));
            }
            for c in &info.printer_columns {
                cells.push(
                    simple_json_path(o, &c.json_path)
                        .cloned()
                        .unwrap_or(Value::Null),
                );
            }
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o.get("metadata").cloned().unwrap_or(json!({}))}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": defs, "rows": rows})
}

/// Formats an age as kubectl does (`45s`, `5m25s`, `3h10m`, `2d4h`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < 0 {
        return "0s".into();
    }
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        let d = days % 365;
        if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        }
    } else {
        format!("{years}y")
    }
}

fn age(obj: &Value, clock: &Clock) -> String {
    let created = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok());
    match created {
        Some(t) => human_duration(clock.now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn int(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn text(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn containers_of(obj: &Value, pointer: &str) -> (String, String) {
    let containers = obj
        .pointer(pointer)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = containers.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<String> = containers.iter().map(|c| text(c, "/image")).collect();
    (names.join(","), images.join(","))
}

fn selector_string(obj: &Value) -> String {
    obj.pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// The STATUS column of a pod, as kubectl derives it.
pub fn pod_status(pod: &Value) -> String {
    let mut reason = text(pod, "/status/reason");
    if reason.is_empty() {
        reason = text(pod, "/status/phase");
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for cs in statuses.iter().rev() {
        let waiting = text(cs, "/state/waiting/reason");
        let terminated = text(cs, "/state/terminated/reason");
        if !waiting.is_empty() {
            reason = waiting;
        } else if !terminated.is_empty() {
            reason = terminated;
        } else if cs.pointer("/state/terminated").is_some() {
            let code = int(cs, "/state/terminated/exitCode");
            reason = format!("ExitCode:{code}");
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    reason
}

/// A Table of `objects` for a resource.
pub fn table_for(
    info: &ResourceInfo,
    objects: &[&Value],
    list_meta: Value,
    clock: &Clock,
) -> Value {
    if info.crd.is_some() {
        return custom_table(info, objects, list_meta, clock);
    }
    let (group, resource) = (info.group.as_str(), info.resource.as_str());
    let (columns, cells) = apps_printer(group, resource, clock)
        .or_else(|| runtime_printer(group, resource, clock))
        .or_else(|| core_printer(group, resource, clock))
        .unwrap_or_else(|| default_printer(clock));
    let column_defs: Vec<Value> = columns
        .iter()
        .map(|c| {
            let description = if c.format == "name" { NAME_DESCRIPTION } else { "" };
            json!({"name": c.name, "type": c.kind, "format": c.format, "description": description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            json!({
                "cells": cells(o),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(json!({}))
                }
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_defs,
        "rows": rows
    })
}

/// Printer columns of the apps group (Deployments, ReplicaSets, StatefulSets, DaemonSets).
fn apps_printer<'c>(group: &str, resource: &str, clock: &'c Clock) -> Option<Printer<'c>> {
    let printer: Printer<'c> = match (group, resource) {
        ("apps", "deployments") => (
            vec![
                name_column(),
                col("Ready", "string", 0),
                col("Up-to-date", "string", 0),
                col("Available", "string", 0),
                col("Age", "string", 0),
                col("Containers", "string", 1),
                col("Images", "string", 1),
                col("Selector", "string", 1),
            ],
            Box::new(move |o: &Value| {
                let (names, images) = containers_of(o, "/spec/template/spec/containers");
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(format!(
                        "{}/{}",
                        int(o, "/status/readyReplicas"),
                        int(o, "/spec/replicas")
                    )),
                    json!(int(o, "/status/updatedReplicas")),
                    json!(int(o, "/status/availableReplicas")),
                    json!(age(o, clock)),
                    json!(names),
                    json!(images),
                    json!(selector_string(o)),
                ]
            }),
        ),
        ("apps", "replicasets") => (
            vec![
                name_column(),
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
                col("Age", "string", 0),
                col("Containers", "string", 1),
                col("Images", "string", 1),
                col("Selector", "string", 1),
            ],
            Box::new(move |o: &Value| {
                let (names, images) = containers_of(o, "/spec/template/spec/containers");
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(int(o, "/spec/replicas")),
                    json!(int(o, "/status/replicas")),
                    json!(int(o, "/status/readyReplicas")),
                    json!(age(o, clock)),
                    json!(names),
                    json!(images),
                    json!(selector_string(o)),
                ]
            }),
        ),
        ("apps", "statefulsets") => (
            vec![
                name_column(),
                col("Ready", "string", 0),
                col("Age", "string", 0),
                col("Containers", "string", 1),
                col("Images", "string", 1),
            ],
            Box::new(move |o: &Value| {
                let (names, images) = containers_of(o, "/spec/template/spec/containers");
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(format!(
                        "{}/{}",
                        int(o, "/status/readyReplicas"),
                        int(o, "/spec/replicas")
                    )),
                    json!(age(o, clock)),
                    json!(names),
                    json!(images),
                ]
            }),
        ),
        ("apps", "daemonsets") => (
            vec![
                name_column(),
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
                col("Up-to-date", "integer", 0),
                col("Available", "integer", 0),
                col("Node Selector", "string", 0),
                col("Age", "date", 0),
            ],
            Box::new(move |o: &Value| {
                let selector = o
                    .pointer("/spec/template/spec/nodeSelector")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "<none>".into());
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(int(o, "/status/desiredNumberScheduled")),
                    json!(int(o, "/status/currentNumberScheduled")),
                    json!(int(o, "/status/numberReady")),
                    json!(int(o, "/status/updatedNumberScheduled")),
                    json!(int(o, "/status/numberAvailable")),
                    json!(selector),
                    json!(age(o, clock)),
                ]
            }),
        ),
        _ => return None,
    };
    Some(printer)
}

/// Printer columns of what runs: Jobs, Nodes, Pods.
fn runtime_printer<'c>(group: &str, resource: &str, clock: &'c Clock) -> Option<Printer<'c>> {
    match (group, resource) {
        ("batch", "jobs") => Some(job_printer(clock)),
        ("", "nodes") => Some(node_printer(clock)),
        ("", "pods") => Some(pod_printer(clock)),
        _ => None,
    }
}

/// A Job: its status from its conditions, completions, duration (to now while it runs).
fn job_printer<'c>(clock: &'c Clock) -> Printer<'c> {
    (
        vec![
            name_column(),
            col("Status", "string", 0),
            col("Completions", "string", 0),
            col("Duration", "string", 0),
            col("Age", "date", 0),
        ],
        Box::new(move |o: &Value| {
            let conditions = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| {
                conditions
                    .iter()
                    .any(|c| c["type"] == t && c["status"] == "True")
            };
            let status = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else if has("Suspended") {
                "Suspended"
            } else {
                "Running"
            };
            let duration = ["/status/startTime", "/status/completionTime"]
                .iter()
                .map(|p| {
                    o.pointer(p)
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                })
                .collect::<Vec<_>>();
            let duration = match (duration[0], duration[1]) {
                (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
                (Some(start), None) => human_duration(clock.now().as_second() - start.as_second()),
                _ => String::new(),
            };
            vec![
                json!(text(o, "/metadata/name")),
                json!(status),
                json!(format!(
                    "{}/{}",
                    int(o, "/status/succeeded"),
                    o.pointer("/spec/completions")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                )),
                json!(duration),
                json!(age(o, clock)),
            ]
        }),
    )
}

/// A Node: Ready or NotReady, and its kubelet's version.
fn node_printer<'c>(clock: &'c Clock) -> Printer<'c> {
    (
        vec![
            name_column(),
            col("Status", "string", 0),
            col("Roles", "string", 0),
            col("Age", "date", 0),
            col("Version", "string", 0),
        ],
        Box::new(move |o: &Value| {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            vec![
                json!(text(o, "/metadata/name")),
                json!(if ready { "Ready" } else { "NotReady" }),
                json!("<none>"),
                json!(age(o, clock)),
                json!(text(o, "/status/nodeInfo/kubeletVersion")),
            ]
        }),
    )
}

/// A Pod: ready containers, status, restarts, IP and node (the last two wide only).
fn pod_printer<'c>(clock: &'c Clock) -> Printer<'c> {
    (
        vec![
            name_column(),
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            col("Age", "string", 0),
            col("IP", "string", 1),
            col("Node", "string", 1),
        ],
        Box::new(move |o: &Value| {
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            let restarts: i64 = statuses.iter().map(|c| int(c, "/restartCount")).sum();
            let ip = text(o, "/status/podIP");
            let node = text(o, "/spec/nodeName");
            vec![
                json!(text(o, "/metadata/name")),
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                json!(age(o, clock)),
                json!(if ip.is_empty() { "<none>".into() } else { ip }),
                json!(if node.is_empty() {
                    "<none>".into()
                } else {
                    node
                }),
            ]
        }),
    )
}

/// Printer columns of Services, Namespaces, Events, ConfigMaps.
fn core_printer<'c>(group: &str, resource: &str, clock: &'c Clock) -> Option<Printer<'c>> {
    let printer: Printer<'c> = match (group, resource) {
        ("", "services") => (
            vec![
                name_column(),
                col("Type", "string", 0),
                col("Cluster-IP", "string", 0),
                col("External-IP", "string", 0),
                col("Port(s)", "string", 0),
                col("Age", "string", 0),
            ],
            Box::new(move |o: &Value| {
                let ports = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|ps| {
                        ps.iter()
                            .map(|p| {
                                format!(
                                    "{}/{}",
                                    p.get("port").and_then(Value::as_i64).unwrap_or(0),
                                    p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(text(o, "/spec/type")),
                    json!(text(o, "/spec/clusterIP")),
                    json!("<none>"),
                    json!(if ports.is_empty() {
                        "<none>".into()
                    } else {
                        ports
                    }),
                    json!(age(o, clock)),
                ]
            }),
        ),
        ("", "namespaces") => (
            vec![
                name_column(),
                col("Status", "string", 0),
                col("Age", "string", 0),
            ],
            Box::new(move |o: &Value| {
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(text(o, "/status/phase")),
                    json!(age(o, clock)),
                ]
            }),
        ),
        ("", "events") | ("events.k8s.io", "events") => (
            vec![
                col("Last Seen", "string", 0),
                col("Type", "string", 0),
                col("Reason", "string", 0),
                col("Object", "string", 0),
                col("Message", "string", 0),
                name_column_priority(1),
            ],
            // Either shape: core v1, or the events.k8s.io/v1 view of the same Event.
            Box::new(move |o: &Value| {
                let either = |core: &str, view: &str| {
                    let t = text(o, core);
                    if t.is_empty() { text(o, view) } else { t }
                };
                let last = [
                    "/lastTimestamp",
                    "/deprecatedLastTimestamp",
                    "/eventTime",
                    "/metadata/creationTimestamp",
                ]
                .iter()
                .find_map(|p| o.pointer(p).and_then(Value::as_str))
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .map(|t| human_duration(clock.now().as_second() - t.as_second()))
                .unwrap_or_else(|| "<unknown>".into());
                let object = format!(
                    "{}/{}",
                    either("/involvedObject/kind", "/regarding/kind").to_lowercase(),
                    either("/involvedObject/name", "/regarding/name")
                );
                vec![
                    json!(last),
                    json!(text(o, "/type")),
                    json!(text(o, "/reason")),
                    json!(object),
                    json!(either("/message", "/note")),
                    json!(text(o, "/metadata/name")),
                ]
            }),
        ),
        ("", "configmaps") => (
            vec![
                name_column(),
                col("Data", "string", 0),
                col("Age", "string", 0),
            ],
            Box::new(move |o: &Value| {
                let n = o.get("data").and_then(Value::as_object).map_or(0, Map::len)
                    + o.get("binaryData")
                        .and_then(Value::as_object)
                        .map_or(0, Map::len);
                vec![
                    json!(text(o, "/metadata/name")),
                    json!(n),
                    json!(age(o, clock)),
                ]
            }),
        ),
        _ => return None,
    };
    Some(printer)
}

/// Printer columns of any other built-in kind: name and age.
fn default_printer(clock: &Clock) -> Printer<'_> {
    (
        vec![name_column(), col("Age", "string", 0)],
        Box::new(move |o: &Value| vec![json!(text(o, "/metadata/name")), json!(age(o, clock))]),
    )
}

/// Whether the client asks for metadata only (kube's `get_metadata`, metadata watchers).
pub fn wants_partial_metadata(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=PartialObjectMetadata") && first.contains("g=meta.k8s.io")
    })
}

/// An object reduced to its metadata, as `meta.k8s.io/v1` PartialObjectMetadata.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_kubectl() {
        for (secs, want) in [
            (45, "45s"),
            (119, "119s"),
            (325, "5m25s"),
            (600, "10m"),
            (3 * 3600 + 600, "3h10m"),
            (30 * 3600, "30h"),
            (2 * 86400 + 4 * 3600, "2d4h"),
            (-5, "0s"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn printer_column_paths() {
        let o = json!({"spec": {"size": 3, "items": [{"n": "a"}]}});
        assert_eq!(simple_json_path(&o, ".spec.size"), Some(&json!(3)));
        assert_eq!(simple_json_path(&o, ".spec.items[0].n"), Some(&json!("a")));
        assert_eq!(simple_json_path(&o, ".spec.missing"), None);
        assert_eq!(simple_json_path(&o, ".spec.items[x]"), None);
    }

    #[test]
    fn table_accept_is_detected() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn pod_status_prefers_waiting_reason() {
        let pod = json!({"status": {"phase": "Pending", "containerStatuses": [
            {"state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
        assert_eq!(pod_status(&pod), "ImagePullBackOff");
    }
}
