//! Least privilege, written down and held to: docs/rbac.md gives the RBAC a deploy identity
//! needs on a cluster; this test runs a deploy (one that fails and rolls back by itself
//! too), a manual rollback, `diff`, `status --drift`, `history` and `show` on kube-sim, reads
//! every (verb, resource, namespace) the cluster was asked for, and fails when one falls
//! outside the roles the doc's YAML grants. The YAML is read from the doc itself, so the doc
//! and the test cannot drift apart.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::harness::TestEnv;

/// The doc's app: `shop` in namespace `shop`, its records and lock in `rollguard`.
const CONFIG: &str = "\
app: shop
namespace: shop
history:
  namespace: rollguard
manifests: [k8s/]
wait:
  timeout: 60s
  log_lines: 5
targets:
  - name: eu
    context: sim-1
";

/// The app of the doc's example: a ConfigMap, a Service and a Deployment.
fn app(image: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: web-settings
data:
  image: {image}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
    - port: 80
---
{}",
        crate::harness::small_app(image)
    )
}

/// One rule of a Role or ClusterRole.
#[derive(Debug)]
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

/// What the doc grants: rules that hold in one namespace, and rules that hold everywhere
/// (a ClusterRole bound by a ClusterRoleBinding: cluster-scoped resources included).
#[derive(Debug, Default)]
struct Grants {
    namespaced: Vec<(String, Rule)>,
    cluster: Vec<Rule>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn rules_of(role: &Value) -> Vec<Rule> {
    role["rules"]
        .as_array()
        .expect("a role has rules")
        .iter()
        .map(|r| Rule {
            groups: strings(&r["apiGroups"]),
            resources: strings(&r["resources"]),
            verbs: strings(&r["verbs"]),
        })
        .collect()
}

/// Every object of every ```yaml block of docs/rbac.md.
fn doc_objects() -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/rbac.md");
    let text = std::fs::read_to_string(&path).expect("docs/rbac.md");
    let mut objects = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```yaml") => block = Some(String::new()),
            (Some(yaml), "```") => {
                for doc in yaml.split("\n---\n") {
                    let v: Value = serde_saphyr::from_str(doc)
                        .unwrap_or_else(|e| panic!("docs/rbac.md: {e}\n{doc}"));
                    if !v.is_null() {
                        objects.push(v);
                    }
                }
                block = None;
            }
            (Some(yaml), _) => {
                yaml.push_str(line);
                yaml.push('\n');
            }
            (None, _) => {}
        }
    }
    objects
}

/// The grants of the doc's roles, through its bindings (a role nobody is bound to grants
/// nothing).
fn doc_grants(objects: &[Value]) -> Grants {
    let find = |kind: &str, name: &str, ns: Option<&str>| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && o["metadata"]["namespace"].as_str() == ns
            })
            .unwrap_or_else(|| panic!("docs/rbac.md binds {kind} {name} that it does not define"))
    };
    let mut grants = Grants::default();
    for binding in objects {
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let binds_rollguard = binding["subjects"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "rollguard")
        });
        let kind = binding["kind"].as_str().unwrap_or_default();
        if kind.ends_with("Binding") {
            assert!(binds_rollguard, "binds someone else: {binding:#}");
        }
        match binding["kind"].as_str() {
            Some("RoleBinding") => {
                let ns = binding["metadata"]["namespace"]
                    .as_str()
                    .expect("a RoleBinding has a namespace");
                let role_ns = (role_kind == "Role").then_some(ns);
                for rule in rules_of(find(role_kind, role_name, role_ns)) {
                    grants.namespaced.push((ns.to_string(), rule));
                }
            }
            Some("ClusterRoleBinding") => {
                grants
                    .cluster
                    .extend(rules_of(find("ClusterRole", role_name, None)));
            }
            _ => {}
        }
    }
    grants
}

/// The RBAC verbs a kube-sim verb needs: a server-side apply is a patch, and a create when
/// the object is new.
fn rbac_verbs(verb: &str) -> Vec<&str> {
    match verb {
        "apply" => vec!["patch", "create"],
        other => vec![other],
    }
}

/// kube-sim's `deployments.apps/status` -> (`apps`, `deployments/status`).
fn group_and_resource(qualified: &str) -> (String, String) {
    let (main, sub) = match qualified.split_once('/') {
        Some((main, sub)) => (main, Some(sub)),
        None => (qualified, None),
    };
    let (plural, group) = main.split_once('.').unwrap_or((main, ""));
    let resource = match sub {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_string(),
    };
    (group.to_string(), resource)
}

fn allows(rule: &Rule, group: &str, resource: &str, verb: &str) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    any(&rule.groups, group) && any(&rule.resources, resource) && any(&rule.verbs, verb)
}

/// The calls that the grants do not allow, as `verb resource in namespace` lines.
fn outside(grants: &Grants, access: &BTreeSet<kube_sim::faults::AccessKey>) -> Vec<String> {
    let mut problems = Vec::new();
    for key in access {
        let (group, resource) = group_and_resource(&key.resource);
        for verb in rbac_verbs(&key.verb) {
            let by_cluster = grants
                .cluster
                .iter()
                .any(|r| allows(r, &group, &resource, verb));
            let by_namespace = key.namespace.as_deref().is_some_and(|ns| {
                grants
                    .namespaced
                    .iter()
                    .any(|(n, r)| n == ns && allows(r, &group, &resource, verb))
            });
            if !by_cluster && !by_namespace {
                problems.push(format!(
                    "{verb} {resource} (group {group:?}) in {}",
                    key.namespace.as_deref().unwrap_or("the cluster scope")
                ));
            }
        }
    }
    problems
}

#[test]
fn the_doc_parses_into_roles_and_bindings() {
    let objects = doc_objects();
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in ["ServiceAccount", "Role", "RoleBinding"] {
        assert!(
            kinds.contains(kind),
            "docs/rbac.md has no {kind}: {kinds:?}"
        );
    }
    let grants = doc_grants(&objects);
    assert!(!grants.namespaced.is_empty());
    // The checker itself: a call the doc surely does not grant is caught.
    let access: BTreeSet<kube_sim::faults::AccessKey> = [
        ("delete", "nodes", None),
        ("get", "secrets", Some("kube-system")),
        ("apply", "deployments.apps", Some("shop")),
    ]
    .into_iter()
    .map(|(verb, resource, ns)| kube_sim::faults::AccessKey {
        verb: verb.into(),
        resource: resource.into(),
        namespace: ns.map(str::to_string),
        dry_run: false,
    })
    .collect();
    let problems = outside(&grants, &access);
    assert_eq!(
        problems,
        [
            "delete nodes (group \"\") in the cluster scope",
            "get secrets (group \"\") in kube-system",
        ],
        "{grants:#?}"
    );
    assert_eq!(
        group_and_resource("leases.coordination.k8s.io"),
        ("coordination.k8s.io".into(), "leases".into())
    );
    assert_eq!(
        group_and_resource("pods/log"),
        (String::new(), "pods/log".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_deploy_rollback_diff_and_status_is_in_the_documented_role() {
    let env = TestEnv::start(
        1,
        "- {image: \"*:v2\", behaviour: CrashLoopBackOff, logs: [\"boom\"]}\n",
    )
    .await;
    env.write("rollguard.yaml", CONFIG);
    // The namespaces exist (an admin made them with the role); the identity creates none.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(env.client(1).await);
    for ns in ["shop", "rollguard"] {
        let body = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
            .expect("namespace");
        namespaces
            .create(&Default::default(), &body)
            .await
            .expect("namespace created");
    }
    env.cluster(1).reset_counters();
    let mut runs = Vec::new();
    for image in ["example.com/web:v1", "example.com/web:v2"] {
        env.write("k8s/app.yaml", &app(image));
        runs.push(("deploy", env.deploy(&[]).await));
    }
    assert_eq!(runs[0].1.code, 0, "{}", runs[0].1.output());
    assert_eq!(
        runs[1].1.outcome("eu"),
        "rolled-back",
        "{}",
        runs[1].1.output()
    );
    env.write("k8s/app.yaml", &app("example.com/web:v3"));
    runs.push(("deploy", env.deploy(&[]).await));
    runs.push(("rollback", env.command("rollback", &["--yes"]).await));
    runs.push(("diff", env.command("diff", &[]).await));
    runs.push(("status", env.command("status", &["--drift"]).await));
    runs.push(("history", env.command("history", &[]).await));
    runs.push(("show", env.command("show", &["--revision", "1"]).await));
    for (what, run) in &runs[2..] {
        assert_eq!(run.code, 0, "{what}: {}", run.output());
    }
    let access = env.cluster(1).access();
    let seen: Vec<String> = access
        .iter()
        .map(|k| {
            let dry_run = if k.dry_run { " (dry run)" } else { "" };
            format!("{} {} in {:?}{dry_run}", k.verb, k.resource, k.namespace)
        })
        .collect();
    // The runs did what the doc says needs these rights (else the test proves nothing).
    for want in ["apply", "watch", "get"] {
        assert!(
            access.iter().any(|k| k.verb == want),
            "no {want} call:\n{}",
            seen.join("\n")
        );
    }
    assert!(
        access.iter().any(|k| k.resource == "pods/log"),
        "the crash's logs were read:\n{}",
        seen.join("\n")
    );
    let grants = doc_grants(&doc_objects());
    let problems = outside(&grants, &access);
    assert!(
        problems.is_empty(),
        "calls outside the RBAC of docs/rbac.md (grant them there, or stop making them):\n{}\n\nevery call:\n{}",
        problems.join("\n"),
        seen.join("\n")
    );
}
