//! Apply behaviour: CRDs before their objects, fields their schema does not declare, kinds a
//! cluster does not serve, conflicts with another field manager, and the report's schema.

use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::harness::{TestEnv, config, corpus_file, list, small_app};

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
";

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: blue
spec:
  size: 3
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_is_established_before_its_objects_are_applied() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // The Widget comes first in the files: ordering puts the CRD before it.
    env.write("k8s/a-widget.yaml", WIDGET);
    env.write("k8s/b-crd.yaml", CRD);
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let client = env.client(1).await;
    let widgets = list(&client, "example.com/v1", "Widget", "widgets", "shop").await;
    assert_eq!(widgets.len(), 1, "{widgets:?}");
    assert_eq!(widgets[0]["spec"]["size"], 3);
}

/// Deploys `files` to one cluster: the target must fail at once (one apply of `resource`, no
/// retries until the 2 minute deadline, though the server answers 500) with
/// FieldNotDeclared, a message that starts with `message` and ends with the object's
/// origin, named as typed from where rollguard runs.
async fn fails_at_once_naming_the_field(
    files: &[(&str, &str)],
    resource: &str,
    message: &str,
    origin: &str,
) {
    fails_at_once(files, resource, "FieldNotDeclared", message, origin).await;
}

/// One apply of `resource`, refused, and the target failed at once with `reason`, the
/// message and the field's file and line (never retried: the body will not change). A kind
/// the cluster serves is refused in the preflight dry run (exit 2, nothing written); one
/// whose CRD comes with the set cannot be checked before, and fails in the apply (exit 1).
async fn fails_at_once(
    files: &[(&str, &str)],
    resource: &str,
    reason: &str,
    message: &str,
    origin: &str,
) {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "2m"));
    for (path, text) in files {
        env.write(path, text);
    }
    let run = env.deploy(&["--on-failure", "none"]).await;
    let in_preflight = !files
        .iter()
        .any(|(_, text)| text.contains("CustomResourceDefinition"));
    assert_eq!(
        run.code,
        if in_preflight { 2 } else { 1 },
        "{}",
        run.output()
    );
    let failure = run.target("eu")["failures"][0].clone();
    assert_eq!(failure["reason"], reason, "{failure:#}");
    let text = failure["message"].as_str().unwrap_or("");
    assert!(text.starts_with(message), "{failure:#}");
    assert!(text.ends_with(&format!(" ({origin})")), "{failure:#}");
    let counters = env.cluster(1).counters();
    let applies = |dry_run: bool| -> u64 {
        counters
            .counts
            .iter()
            .filter(|(k, _)| k.verb == "apply" && k.resource == resource && k.dry_run == dry_run)
            .map(|(_, n)| n)
            .sum()
    };
    if in_preflight {
        assert_eq!((applies(true), applies(false)), (1, 0), "{counters:?}");
        assert_eq!(run.report.as_ref().unwrap()["refused_in_preflight"], true);
    } else {
        assert_eq!(applies(false), 1, "{counters:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_the_crd_does_not_declare_fails_at_once_naming_the_field() {
    let strict = CRD.replace(
        "          x-kubernetes-preserve-unknown-fields: true\n",
        "          properties:\n            spec:\n              type: object\n              properties:\n                size: {type: integer}\n",
    );
    let widget = WIDGET.replace("  size: 3\n", "  size: 3\n  colour: blue\n");
    fails_at_once_naming_the_field(
        &[("k8s/crd.yaml", &strict), ("k8s/widget.yaml", &widget)],
        "widgets.example.com",
        ".spec.colour is not a field of example.com/v1 Widget: fix its name or indentation, or add it to the CRD's schema",
        // The field's own line, not the object's first.
        "k8s/widget.yaml:7",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_field_in_a_deployment_fails_at_once_naming_it() {
    let Some(redis) = corpus_file(
        "a_misspelt_field_in_a_deployment_fails_at_once_naming_it",
        "example-voting-app/k8s-specifications/redis-deployment.yaml",
    ) else {
        return;
    };
    let misspelt = redis.replace(
        "      - image: redis:alpine\n",
        "      - image: redis:alpine\n        imagePullPolice: Always\n",
    );
    assert_ne!(misspelt, redis, "the corpus file changed: fix this test");
    fails_at_once_naming_the_field(
        &[("k8s/redis.yaml", &misspelt)],
        "deployments.apps",
        ".spec.template.spec.containers[name=\"redis\"].imagePullPolice is not a field of apps/v1 Deployment: fix its name or indentation",
        "k8s/redis.yaml:19",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_field_deep_in_a_pod_template_is_named_at_its_own_line() {
    let app = small_app("example.com/web:v1");
    let misspelt = app.replace(
        "          image: example.com/web:v1\n",
        "          image: example.com/web:v1\n          imagePullPolicyy: Always\n",
    );
    assert_ne!(misspelt, app, "small_app changed: fix this test");
    let line = misspelt
        .lines()
        .position(|l| l.contains("imagePullPolicyy"))
        .map(|i| i + 1);
    // The Deployment starts on line 8; the misspelt field is 17 lines further down.
    assert_eq!(line, Some(25));
    fails_at_once_naming_the_field(
        &[("k8s/app.yaml", &misspelt)],
        "deployments.apps",
        ".spec.template.spec.containers[name=\"web\"].imagePullPolicyy is not a field of apps/v1 Deployment: fix its name or indentation",
        "k8s/app.yaml:25",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrongly_typed_value_fails_at_once_naming_the_field_and_its_line() {
    let app = small_app("example.com/web:v1");
    let quoted = app.replace("  replicas: 2\n", "  replicas: \"2\"\n");
    assert_ne!(quoted, app, "small_app changed: fix this test");
    let line = quoted
        .lines()
        .position(|l| l.contains("replicas: \"2\""))
        .map_or(0, |i| i + 1);
    fails_at_once(
        &[("k8s/app.yaml", &quoted)],
        "deployments.apps",
        "InvalidField",
        ".spec.replicas: expected numeric (int or float), got string in apps/v1 Deployment",
        &format!("k8s/app.yaml:{line}"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_cluster_does_not_serve_fails_that_target_with_no_write() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write(
        "k8s/app.yaml",
        &format!("{}---\n{WIDGET}", small_app("example.com/web:v1")),
    );
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let failure = run.target("eu")["failures"][0].clone();
    assert_eq!(failure["reason"], "KindNotServed", "{failure:#}");
    assert!(
        failure["object"]
            .as_str()
            .is_some_and(|o| o.contains("Widget")),
        "{failure:#}"
    );
    assert_eq!(
        env.writes(1),
        0,
        "nothing is written before every kind is resolved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_reported_per_field_and_force_takes_ownership() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    // Another field manager owns .spec.replicas with a different value.
    let client = env.client(1).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    namespaces
        .patch("shop", &PatchParams::apply("kubectl"), &Patch::Apply(&ns))
        .await
        .expect("namespace");
    let gvk = kube::core::GroupVersionKind::gvk("apps", "v1", "Deployment");
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "deployments");
    let deployments: Api<DynamicObject> = Api::namespaced_with(client.clone(), "shop", &resource);
    let theirs: serde_json::Value = serde_saphyr::from_str(
        &small_app("example.com/web:v1")
            .split("---\n")
            .nth(1)
            .expect("deployment")
            .replace("replicas: 2", "replicas: 5"),
    )
    .expect("yaml");
    deployments
        .patch(
            "web",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(&theirs),
        )
        .await
        .expect("kubectl's apply");

    let before = env.writes_besides_locks(1);
    let run = env.deploy(&["--on-failure", "none"]).await;
    // Refused in the preflight dry run: bad input, and nothing written.
    assert_eq!(run.code, 2, "{}", run.output());
    assert_eq!(env.writes_besides_locks(1), before, "{}", run.output());
    let failure = run.target("eu")["failures"][0].clone();
    assert_eq!(failure["reason"], "Conflict", "{failure:#}");
    let message = failure["message"].as_str().unwrap_or("");
    assert!(
        message.contains(".spec.replicas") && message.contains("kubectl"),
        "{message}"
    );
    assert!(message.contains("--force-conflicts"), "{message}");

    let run = env.deploy(&["--force-conflicts"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let web = deployments.get("web").await.expect("web");
    assert_eq!(web.data["spec"]["replicas"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_has_the_documented_fields() {
    let rules = "- {cluster: sim-2, image: \"*:bad\", behaviour: ImagePullBackOff}\n";
    let env = TestEnv::start(2, rules).await;
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:bad"));
    let run = env
        .deploy(&["--on-failure", "none", "--commit", "0123456789abcdef"])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    let report = run.report.as_ref().expect("report");
    for key in [
        "version",
        "app",
        "commit",
        "outcome",
        "summary",
        "started_at",
        "finished_at",
        "targets",
        "dry_run",
    ] {
        assert!(report.get(key).is_some(), "report lacks {key}: {report:#}");
    }
    assert_eq!(report["commit"]["sha"], "0123456789abcdef");
    assert_eq!(report["outcome"], "failed");
    for target in report["targets"].as_array().expect("targets") {
        for key in [
            "name",
            "outcome",
            "revision",
            "started_at",
            "finished_at",
            "phases",
            "failures",
        ] {
            assert!(target.get(key).is_some(), "target lacks {key}: {target:#}");
        }
        for phase in target["phases"].as_array().expect("phases") {
            assert!(
                phase["name"].is_string() && phase["seconds"].is_number(),
                "{phase:#}"
            );
        }
    }
    let failure = &run.target("us")["failures"][0];
    for key in ["object", "pod", "container", "reason", "message"] {
        assert!(
            failure.get(key).is_some(),
            "failure lacks {key}: {failure:#}"
        );
    }
    assert!(
        failure["events"].as_array().is_some_and(|e| !e.is_empty()),
        "Warning events attached: {failure:#}"
    );
    assert_eq!(run.outcome("eu"), "deployed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_hooks_are_left_out_with_one_warning_unless_render_hooks_apply() {
    let env = TestEnv::start(1, "").await;
    // What `helm template` writes: the chart's objects and a test hook.
    env.write(
        "helm-out.yaml",
        &format!(
            "{}---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-test-connection
  annotations:
    helm.sh/hook: test
data: {{run: wget web}}
",
            small_app("example.com/web:v1")
        ),
    );
    let with_render = |extra: &str| {
        config(1, "60s").replace(
            "manifests: [k8s/]\n",
            &format!("render: cat helm-out.yaml\n{extra}"),
        )
    };
    env.write("rollguard.yaml", &with_render(""));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("web-test-connection"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", run.output());
    assert!(
        warnings[0].contains("Helm hook") && warnings[0].contains("render_hooks: apply"),
        "{}",
        run.output()
    );
    let names = |cms: Vec<serde_json::Value>| -> Vec<String> {
        cms.iter()
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    };
    let client = env.client(1).await;
    let cms = names(list(&client, "v1", "ConfigMap", "configmaps", "shop").await);
    assert!(cms.contains(&"web-config".to_string()), "{cms:?}");
    assert!(!cms.contains(&"web-test-connection".to_string()), "{cms:?}");

    env.write("rollguard.yaml", &with_render("render_hooks: apply\n"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(!run.stderr.contains("Helm hook"), "{}", run.output());
    let cms = names(list(&client, "v1", "ConfigMap", "configmaps", "shop").await);
    assert!(cms.contains(&"web-test-connection".to_string()), "{cms:?}");
}
