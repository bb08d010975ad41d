use k8s_pb::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_pb::api::core::v1::{
    Affinity, ConfigMap, Container, Namespace, NamespaceSpec, PodSpec, PodTemplateSpec, Secret,
    Service, ServicePort, ServiceSpec,
};
use k8s_pb::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_pb::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

/// The body kubectl sends: magic, then the envelope with the object's bytes, the strings
/// of the envelope present and empty as Go writes them.
fn body<T: Message>(api_version: &str, kind: &str, object: &T) -> Vec<u8> {
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC.to_vec(), envelope.encode_to_vec()].concat()
}

/// ObjectMeta as Go sends it: every non-pointer field present, zero when unset.
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        generate_name: Some(String::new()),
        namespace: Some("ns".into()),
        self_link: Some(String::new()),
        uid: Some(String::new()),
        resource_version: Some(String::new()),
        generation: Some(0),
        creation_timestamp: Some(Time::default()),
        labels: [("app".to_string(), "web".to_string())].into(),
        ..ObjectMeta::default()
    }
}

fn refusal(r: Result<Value, Refusal>) -> String {
    match r {
        Ok(v) => panic!("accepted: {v}"),
        Err(Refusal::Malformed(m)) => format!("400 {m}"),
        Err(Refusal::Unsupported(m)) => format!("415 {m}"),
    }
}

#[test]
fn a_namespace_as_kubectl_create_sends_it() {
    let ns = Namespace {
        metadata: Some(ObjectMeta {
            namespace: Some(String::new()),
            ..meta("demo")
        }),
        spec: Some(NamespaceSpec::default()),
        status: None,
    };
    let v = decode(&body("v1", "Namespace", &ns), "v1", "Namespace").unwrap();
    // Empty strings and the zero time are left out, as the server's JSON does.
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "demo", "labels": {"app": "web"}}, "spec": {}})
    );
}

#[test]
fn configmap_and_secret_maps_and_bytes() {
    let cm = ConfigMap {
        metadata: Some(meta("cfg")),
        immutable: Some(false),
        data: [("k".to_string(), "v".to_string())].into(),
        binary_data: [("b".to_string(), vec![0, 1, 2])].into(),
    };
    let v = decode(&body("v1", "ConfigMap", &cm), "v1", "ConfigMap").unwrap();
    assert_eq!(v["data"], json!({"k": "v"}));
    assert_eq!(v["binaryData"], json!({"b": "AAEC"}));
    // A *bool: false was set, so it is written.
    assert_eq!(v["immutable"], json!(false));

    let secret = Secret {
        metadata: Some(meta("s")),
        data: [("password".to_string(), b"hunter2".to_vec())].into(),
        r#type: Some("Opaque".into()),
        ..Secret::default()
    };
    let v = decode(&body("v1", "Secret", &secret), "v1", "Secret").unwrap();
    assert_eq!(v["data"]["password"], "aHVudGVyMg==");
    assert_eq!(v["type"], "Opaque");
    assert!(v.get("immutable").is_none());
}

fn deployment(replicas: i32) -> Deployment {
    Deployment {
        metadata: Some(meta("web")),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                match_expressions: vec![],
            }),
            template: Some(PodTemplateSpec {
                metadata: Some(meta("")),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: Some("web".into()),
                        image: Some("example/web:v1".into()),
                        working_dir: Some(String::new()),
                        stdin: Some(false),
                        resources: Some(Default::default()),
                        ..Container::default()
                    }],
                    restart_policy: Some(String::new()),
                    host_network: Some(false),
                    ..PodSpec::default()
                }),
            }),
            strategy: Some(DeploymentStrategy {
                r#type: Some(String::new()),
                rolling_update: None,
            }),
            min_ready_seconds: Some(0),
            ..DeploymentSpec::default()
        }),
        status: Some(Default::default()),
    }
}

#[test]
fn a_deployment_keeps_a_set_zero_and_leaves_unset_zeros_out() {
    let v = decode(
        &body("apps/v1", "Deployment", &deployment(0)),
        "apps/v1",
        "Deployment",
    )
    .unwrap();
    assert_eq!(v["spec"]["replicas"], 0, "a *int32 set to 0 stays");
    assert!(v["spec"].get("minReadySeconds").is_none());
    assert_eq!(v["spec"]["strategy"], json!({}));
    assert_eq!(
        v["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(
        v["spec"]["template"]["spec"],
        json!({"containers": [{"name": "web", "image": "example/web:v1", "resources": {}}]})
    );
    assert!(v.get("status").is_none());
}

#[test]
fn int_or_string_and_time() {
    use super::meta::{int_or_string, time};
    let int = IntOrString {
        r#type: Some(0),
        int_val: Some(8080),
        str_val: Some(String::new()),
    };
    assert_eq!(int_or_string(int, "p").unwrap(), json!(8080));
    let text = IntOrString {
        r#type: Some(1),
        int_val: Some(0),
        str_val: Some("25%".into()),
    };
    assert_eq!(int_or_string(text, "p").unwrap(), json!("25%"));
    let bad = IntOrString {
        r#type: Some(7),
        ..IntOrString::default()
    };
    assert!(int_or_string(bad, "p").is_err());
    let t = Time {
        seconds: Some(1_796_117_772),
        nanos: Some(5),
    };
    assert_eq!(time(t, "t").unwrap(), json!("2026-12-01T09:36:12Z"));
    assert_eq!(time(Time::default(), "t").unwrap(), Value::Null);
    let far = Time {
        seconds: Some(i64::MAX),
        nanos: None,
    };
    assert!(time(far, "t").is_err());
}

#[test]
fn service_ports_and_a_pdb() {
    let svc = Service {
        metadata: Some(meta("svc")),
        spec: Some(ServiceSpec {
            ports: vec![ServicePort {
                name: Some("80-8080".into()),
                protocol: Some("TCP".into()),
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(8080),
                    str_val: Some(String::new()),
                }),
                node_port: Some(0),
                ..ServicePort::default()
            }],
            r#type: Some("ClusterIP".into()),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let v = decode(&body("v1", "Service", &svc), "v1", "Service").unwrap();
    assert_eq!(
        v["spec"],
        json!({"type": "ClusterIP", "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}]})
    );
    let pdb = PodDisruptionBudget {
        metadata: Some(meta("pdb")),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString {
                r#type: Some(0),
                int_val: Some(0),
                str_val: None,
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    };
    let v = decode(
        &body("policy/v1", "PodDisruptionBudget", &pdb),
        "policy/v1",
        "PodDisruptionBudget",
    )
    .unwrap();
    assert_eq!(
        v["spec"],
        json!({"minAvailable": 0}),
        "a set *IntOrString 0 stays"
    );
}

#[test]
fn a_field_that_is_not_converted_is_refused_by_name() {
    let mut d = deployment(1);
    if let Some(spec) = d
        .spec
        .as_mut()
        .and_then(|s| s.template.as_mut())
        .and_then(|t| t.spec.as_mut())
    {
        spec.affinity = Some(Affinity::default());
    }
    let m = refusal(decode(
        &body("apps/v1", "Deployment", &d),
        "apps/v1",
        "Deployment",
    ));
    assert!(m.starts_with("415 "), "{m}");
    assert!(m.contains("spec.template.spec.affinity"), "{m}");

    let mut d = deployment(1);
    if let Some(status) = d.status.as_mut() {
        status.replicas = Some(3);
    }
    let m = refusal(decode(
        &body("apps/v1", "Deployment", &d),
        "apps/v1",
        "Deployment",
    ));
    assert!(m.contains("status.replicas"), "{m}");
}

#[test]
fn a_field_the_definitions_do_not_know_is_refused() {
    // Field 99 (a length-delimited string) at the top of a ConfigMap: not in the definition.
    let cm = ConfigMap {
        metadata: Some(meta("cfg")),
        ..ConfigMap::default()
    };
    let mut raw = cm.encode_to_vec();
    raw.extend_from_slice(&[0x9a, 0x06, 0x02, b'h', b'i']);
    let envelope = Unknown {
        type_meta: None,
        raw: Some(raw.clone()),
        content_encoding: None,
        content_type: None,
    };
    let bytes = [MAGIC.to_vec(), envelope.encode_to_vec()].concat();
    let m = refusal(decode(&bytes, "v1", "ConfigMap"));
    assert!(
        m.starts_with("415 ") && m.contains("field numbers from the object down: 99"),
        "{m}"
    );

    // The same unknown field empty (a zero value) carries nothing and is accepted.
    let mut raw = cm.encode_to_vec();
    raw.extend_from_slice(&[0x9a, 0x06, 0x00]);
    let envelope = Unknown {
        raw: Some(raw),
        ..Unknown::default()
    };
    let bytes = [MAGIC.to_vec(), envelope.encode_to_vec()].concat();
    assert!(decode(&bytes, "v1", "ConfigMap").is_ok());
}

#[test]
fn a_label_with_an_empty_value_passes_the_check() {
    // Go writes the empty value of a map entry; prost leaves it out when it encodes again.
    // Encode the entry the way Go does: key and value both written.
    let go_entry = [&[0x0a, 0x04][..], b"role", &[0x12, 0x00]].concat();
    let mut meta_bytes = ObjectMeta {
        labels: Default::default(),
        ..meta("cfg")
    }
    .encode_to_vec();
    meta_bytes.extend_from_slice(&[0x5a, go_entry.len() as u8]);
    meta_bytes.extend_from_slice(&go_entry);
    let raw = [&[0x0a, meta_bytes.len() as u8][..], &meta_bytes].concat();
    let envelope = Unknown {
        raw: Some(raw),
        ..Unknown::default()
    };
    let bytes = [MAGIC.to_vec(), envelope.encode_to_vec()].concat();
    let v = decode(&bytes, "v1", "ConfigMap").unwrap();
    assert_eq!(v["metadata"]["labels"], json!({"role": ""}));
}

#[test]
fn other_kinds_wrong_kinds_and_garbage_are_refused() {
    assert!(refusal(decode(b"{}", "v1", "Namespace")).starts_with("400 "));
    assert!(refusal(decode(b"k8s\x00\x0a\xff\xff\xff", "v1", "Namespace")).starts_with("400 "));
    let pod = k8s_pb::api::core::v1::Pod::default();
    let m = refusal(decode(&body("v1", "Pod", &pod), "v1", "Pod"));
    assert!(m.starts_with("415 ") && m.contains("not v1 Pod"), "{m}");
    let ns = Namespace::default();
    let m = refusal(decode(&body("v1", "Namespace", &ns), "v1", "ConfigMap"));
    assert!(m.contains("kind Namespace does not match"), "{m}");
}

/// Truncated and garbled bodies never panic (no unwrap on input, bounded recursion).
#[test]
fn truncated_and_garbled_bodies_never_panic() {
    let good = body("apps/v1", "Deployment", &deployment(2));
    assert!(decode(&good, "apps/v1", "Deployment").is_ok());
    for len in 0..good.len() {
        let _ = decode(&good[..len], "apps/v1", "Deployment");
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..3 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed as usize) % bytes.len();
            bytes[i] = (seed >> 32) as u8;
        }
        let _ = decode(&bytes, "apps/v1", "Deployment");
    }
    // Deep nesting: a length-delimited field 1 inside another, 10000 times.
    let mut deep = vec![0x0a, 0x00];
    for _ in 0..200 {
        let mut outer = vec![0x0a];
        let mut len = deep.len();
        while len >= 0x80 {
            outer.push((len as u8) | 0x80);
            len >>= 7;
        }
        outer.push(len as u8);
        outer.extend_from_slice(&deep);
        deep = outer;
    }
    let _ = decode(&[MAGIC, &deep].concat(), "v1", "Namespace");
}

/// A body near the server's 3 MiB limit decodes, and the check that nothing was dropped
/// stays cheap (run with --nocapture to see the time).
#[test]
fn a_large_configmap_decodes() {
    let data = (0..2500)
        .map(|i| (format!("key-{i}"), "x".repeat(1000)))
        .collect();
    let cm = ConfigMap {
        metadata: Some(meta("big")),
        data,
        ..ConfigMap::default()
    };
    let bytes = body("v1", "ConfigMap", &cm);
    let started = std::time::Instant::now();
    let v = decode(&bytes, "v1", "ConfigMap").unwrap();
    eprintln!("decoded {} bytes in {:?}", bytes.len(), started.elapsed());
    assert_eq!(v["data"].as_object().map(|m| m.len()), Some(2500));
}

fn envelope_of(raw: Vec<u8>) -> Vec<u8> {
    let envelope = Unknown {
        raw: Some(raw),
        ..Unknown::default()
    };
    [MAGIC.to_vec(), envelope.encode_to_vec()].concat()
}

#[test]
fn an_unknown_field_deep_down_is_named_by_its_path() {
    // ObjectMeta with an extra field 99, as ConfigMap's field 1 (its metadata).
    let mut meta_bytes = meta("cfg").encode_to_vec();
    meta_bytes.extend_from_slice(&[0x98, 0x06, 0x07]);
    let mut raw = vec![0x0a];
    prost::encoding::encode_varint(meta_bytes.len() as u64, &mut raw);
    raw.extend_from_slice(&meta_bytes);
    let m = refusal(decode(&envelope_of(raw), "v1", "ConfigMap"));
    assert!(
        m.contains("field numbers from the object down: 1.99"),
        "{m}"
    );
}

#[test]
fn map_entries_in_another_order_are_accepted() {
    // Two ConfigMaps' bytes one after the other decode as one with both entries (protobuf
    // merges); prost encodes them again sorted, the body had b before a.
    let part = |k: &str| {
        ConfigMap {
            data: [(k.to_string(), "v".to_string())].into(),
            ..ConfigMap::default()
        }
        .encode_to_vec()
    };
    let raw = [part("b"), part("a")].concat();
    let v = decode(&envelope_of(raw), "v1", "ConfigMap").unwrap();
    assert_eq!(v["data"], json!({"a": "v", "b": "v"}));
}
