//! HTTP-level tests of the simulated API server against the recordings of a real
//! kube-apiserver v1.36 (`shared/apiserver-recordings`).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube_sim::faults::Faults;
use kube_sim::{Sim, SimOptions};
use serde_json::{Value, json};

const APPLY: &str = "application/apply-patch+yaml";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

fn recording(name: &str) -> Value {
    let dir = kube_sim::shared_dir()
        .expect("shared/apiserver-recordings must be beside the repository")
        .join("apiserver-recordings");
    let text = std::fs::read_to_string(dir.join(name)).expect(name);
    if name.ends_with(".yaml") {
        serde_saphyr::from_str(&text).expect(name)
    } else {
        serde_json::from_str(&text).expect(name)
    }
}

fn recording_text(name: &str) -> String {
    let dir = kube_sim::shared_dir().unwrap().join("apiserver-recordings");
    std::fs::read_to_string(dir.join(name)).expect(name)
}

struct Resp {
    status: u16,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

struct Api {
    base: String,
    token: String,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Api {
    fn new(sim: &Sim, index: usize) -> Self {
        let cluster = &sim.clusters()[index];
        Api {
            base: cluster.url().to_string(),
            token: cluster.token().to_string(),
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
        token: Option<&str>,
        accept: &str,
    ) -> hyper::Response<Incoming> {
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path))
            .header("accept", accept)
            .header("user-agent", "api-test/1.0");
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        let req = builder.body(Full::new(body.into())).unwrap();
        self.http.request(req).await.expect("request")
    }

    async fn send_as(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
        token: Option<&str>,
        accept: &str,
    ) -> Resp {
        let resp = self
            .raw(method, path, content_type, body, token, accept)
            .await;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Resp {
            status,
            headers,
            body,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Resp {
        let token = self.token.clone();
        self.send_as(method, path, content_type, body, Some(&token), JSON)
            .await
    }

    async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None, Bytes::new()).await
    }

    async fn apply(&self, path: &str, body: &Value) -> Resp {
        self.send("PATCH", path, Some(APPLY), body.to_string())
            .await
    }

    async fn create_namespace(&self, name: &str) {
        let r = self
            .send(
                "POST",
                "/api/v1/namespaces",
                Some(JSON),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                    .to_string(),
            )
            .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }

    /// Opens a watch and returns a line reader.
    async fn watch(&self, path: &str) -> Lines {
        let token = self.token.clone();
        let resp = self
            .raw("GET", path, None, Bytes::new(), Some(&token), JSON)
            .await;
        assert_eq!(resp.status().as_u16(), 200);
        Lines {
            body: resp.into_body(),
            buffer: Vec::new(),
        }
    }
}

struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
}

impl Lines {
    /// The next event, or None when the stream ends or nothing comes within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("event line is JSON"));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??;
            if let Ok(data) = frame.ok()?.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }

    /// Whether the server ended the stream within `wait`.
    async fn ended(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return false,
                Ok(None) => return true,
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buffer.extend_from_slice(&d);
                    }
                }
                Ok(Some(Err(_))) => return true,
            }
        }
    }
}

async fn plain_sim() -> Sim {
    Sim::start(SimOptions {
        tls: false,
        ..SimOptions::default()
    })
    .await
    .unwrap()
}

fn deployment_path(ns: &str, name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}")
}

#[tokio::test]
async fn ssa_create_update_noop_match_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("ssa_create_update_noop_match_recordings") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let path = format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web"));

    let first = api
        .apply(&path, &recording("02-ssa-apply1-request-body.json"))
        .await;
    assert_eq!(first.status, 201);
    let first = first.json();
    let recorded = recording("02-ssa-apply1-response.json");
    assert_eq!(first["spec"], recorded["spec"], "spec defaults as recorded");
    assert_eq!(first["status"], json!({}));
    assert_eq!(first["metadata"]["generation"], 1);
    assert_eq!(
        first["metadata"]["managedFields"][0]["fieldsV1"],
        recorded["metadata"]["managedFields"][0]["fieldsV1"]
    );
    assert_eq!(first["metadata"]["managedFields"][0]["operation"], "Apply");

    let second = api
        .apply(&path, &recording("02-ssa-apply2-image-request-body.json"))
        .await;
    assert_eq!(second.status, 200);
    let second = second.json();
    assert_eq!(second["metadata"]["generation"], 2);
    assert_eq!(
        second["spec"]["template"]["spec"]["containers"][0]["image"],
        "example/web:v2"
    );

    // Label-only change: new resourceVersion, same generation.
    let third = api
        .apply(&path, &recording("02-ssa-apply3-labels-request-body.yaml"))
        .await;
    assert_eq!(third.status, 200);
    let third = third.json();
    assert_eq!(third["metadata"]["generation"], 2);
    assert_eq!(third["metadata"]["labels"]["tier"], "frontend");
    assert_eq!(
        third["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"],
        json!({"f:labels": {"f:app": {}, "f:tier": {}}})
    );

    // Identical re-apply: no write at all.
    let before = api.get(&deployment_path("rec-x", "web")).await.json();
    sim.clusters()[0].reset_counters();
    let again = api
        .apply(&path, &recording("02-ssa-apply3-labels-request-body.yaml"))
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.json()["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    // Annotation-only apply by another manager bumps a Deployment's generation.
    let toucher = format!("{}?fieldManager=toucher", deployment_path("rec-x", "web"));
    let touched = api
        .apply(
            &toucher,
            &recording("02-ssa-apply5-annotation-only-request-body.json"),
        )
        .await;
    assert_eq!(touched.status, 200);
    let touched = touched.json();
    assert_eq!(
        touched["metadata"]["generation"],
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );
    let managers: Vec<&str> = touched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(
        managers.contains(&"toucher") && managers.contains(&"rollguard"),
        "{managers:?}"
    );
}

#[tokio::test]
async fn ssa_conflicts_and_force_match_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("ssa_conflicts_and_force_match_recordings")
    else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let path = format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web"));
    assert_eq!(
        api.apply(&path, &recording("02-ssa-apply1-request-body.json"))
            .await
            .status,
        201
    );

    let other = format!("{}?fieldManager=other", deployment_path("rec-x", "web"));
    let one = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"rec-x"},"spec":{"replicas":3}});
    let resp = api.apply(&other, &one).await;
    assert_eq!(resp.status, 409);
    assert_eq!(resp.json(), recording("05-error-409-ssa-conflict.json"));

    let two = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"rec-x"},"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","image":"example/web:other"}]}}}});
    let resp = api.apply(&other, &two).await;
    assert_eq!(resp.status, 409);
    assert_eq!(
        resp.json(),
        recording("05-error-409-ssa-conflict-two-fields.json")
    );

    let forced = api.apply(&format!("{other}&force=true"), &one).await;
    assert_eq!(forced.status, 200);
    let forced = forced.json();
    assert_eq!(forced["spec"]["replicas"], 3);
    let entries = forced["metadata"]["managedFields"].as_array().unwrap();
    let by = |m: &str| entries.iter().find(|e| e["manager"] == m).unwrap()["fieldsV1"].clone();
    assert_eq!(by("other"), json!({"f:spec": {"f:replicas": {}}}));
    assert!(by("rollguard")["f:spec"].get("f:replicas").is_none());
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let Some(_shared) = kube_sim::shared_for_test("dry_run_stores_nothing") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let path = format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web"));
    assert_eq!(
        api.apply(&path, &recording("02-ssa-apply1-request-body.json"))
            .await
            .status,
        201
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = api.get(&deployment_path("rec-x", "web")).await.json();
    sim.clusters()[0].reset_counters();

    let body = recording_text("05-dryrun-apply-request-body.yaml");
    let resp = api
        .send("PATCH", &format!("{path}&dryRun=All"), Some(APPLY), body)
        .await;
    assert_eq!(resp.status, 200);
    let dry = resp.json();
    assert_eq!(dry["spec"]["replicas"], 5);
    assert_eq!(
        dry["metadata"]["generation"],
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );
    assert_eq!(
        dry["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    let counters = sim.clusters()[0].counters();
    assert_eq!(counters.writes(), 0);
    assert_eq!(counters.dry_run_writes(), 1);
    let after = api.get(&deployment_path("rec-x", "web")).await.json();
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["generation"],
        before["metadata"]["generation"]
    );

    // Dry-run create: nothing stored either.
    let cm =
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry"},"data":{"a":"b"}});
    let resp = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-x/configmaps?dryRun=All",
            Some(JSON),
            cm.to_string(),
        )
        .await;
    assert_eq!(resp.status, 201);
    assert_eq!(
        api.get("/api/v1/namespaces/rec-x/configmaps/dry")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn errors_match_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("errors_match_recordings") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let web = format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web"));
    assert_eq!(
        api.apply(&web, &recording("02-ssa-apply1-request-body.json"))
            .await
            .status,
        201
    );
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm1","namespace":"rec-missing"},"data":{"k":"v"}}"#;
    let unknown_field = recording("05-ssa-unknown-field-deployment-request-body.yaml").to_string();

    let cases: Vec<(&str, String, Option<&str>, String, &str)> = vec![
        ("GET", deployment_path("rec-x", "nope"), None, String::new(), "05-error-404-get-missing-deployment.json"),
        ("GET", "/api/v1/namespaces/rec-missing/configmaps/cm1".into(), None, String::new(), "05-error-404-get-configmap-in-missing-namespace.json"),
        ("POST", "/api/v1/namespaces/rec-missing/configmaps".into(), Some(JSON), cm.into(), "05-error-404-create-configmap-missing-namespace.json"),
        ("PATCH", "/api/v1/namespaces/rec-missing/configmaps/cm1?fieldManager=rollguard".into(), Some(APPLY), cm.into(), "05-error-404-apply-configmap-missing-namespace.json"),
        ("POST", "/api/v1/namespaces/rec-x/configmaps".into(), Some(JSON), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"rec-x"},"data":{"k":"v"}}"#.into(), "05-error-422-noname-create-configmap.json"),
        ("PATCH", "/api/v1/namespaces/rec-x/configmaps/cm-noname?fieldManager=rollguard".into(), Some(APPLY), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"rec-x"},"data":{"k":"v"}}"#.into(), "05-error-400-noname-apply-configmap.json"),
        ("PATCH", "/api/v1/namespaces/rec-x/configmaps/cm-b?fieldManager=rollguard".into(), Some(APPLY), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-a","namespace":"rec-x"},"data":{"k":"v"}}"#.into(), "05-error-400-name-mismatch-apply-configmap.json"),
        ("PATCH", "/api/v1/namespaces/rec-x/configmaps/cm-a".into(), Some(APPLY), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-a","namespace":"rec-x"},"data":{"k":"v"}}"#.into(), "05-error-422-apply-without-fieldManager.json"),
        ("PATCH", web.clone(), Some(JSON), r#"{"spec":{"replicas":3}}"#.into(), "05-error-415-wrong-content-type-json-on-patch.json"),
        ("PATCH", web.clone(), Some("text/plain"), r#"{"spec":{"replicas":3}}"#.into(), "05-error-415-wrong-content-type-text-on-patch.json"),
        ("POST", "/api/v1/namespaces/rec-x/configmaps".into(), Some("text/plain"), cm.into(), "05-error-415-wrong-content-type-text-on-post.json"),
        ("PATCH", deployment_path("rec-x", "web"), Some(MERGE), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bad""#.into(), "05-error-400-malformed-json-merge-patch.json"),
        ("POST", "/api/v1/namespaces/rec-x/configmaps?fieldValidation=Strict".into(), Some(JSON), recording("05-post-unknown-field-request-body.json").to_string(), "05-error-400-post-unknown-field-strict.json"),
        ("PATCH", format!("{}?fieldManager=probe", deployment_path("rec-x", "web")), Some(APPLY), unknown_field.clone(), "05-error-500-ssa-unknown-field-deployment.json"),
        ("PATCH", format!("{}?fieldManager=probe&fieldValidation=Strict", deployment_path("rec-x", "web")), Some(APPLY), unknown_field, "05-error-500-ssa-unknown-field-deployment-strict.json"),
    ];
    for (method, path, ct, body, file) in cases {
        let resp = api.send(method, &path, ct, body).await;
        let recorded = recording(file);
        assert_eq!(
            resp.status as i64,
            recorded["code"].as_i64().unwrap(),
            "{file}"
        );
        assert_eq!(resp.json(), recorded, "{file}");
        assert_eq!(resp.header("content-type"), "application/json", "{file}");
    }

    // Several undeclared fields: listed one per line, as structured-merge-diff joins them.
    let two = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"rec-x"},"spec":{"a":1,"b":2}}"#;
    let resp = api.send("PATCH", &web, Some(APPLY), two.to_string()).await;
    assert_eq!(resp.status, 500);
    assert_eq!(
        resp.json()["message"],
        "failed to create typed patch object (rec-x/web; apps/v1, Kind=Deployment): errors:\n  .spec.a: field not declared in schema\n  .spec.b: field not declared in schema"
    );

    // The same create without Strict: 201, the field dropped, a warning header.
    let created = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-x/configmaps",
            Some(JSON),
            recording("05-post-unknown-field-request-body.json").to_string(),
        )
        .await;
    assert_eq!(created.status, 201);
    assert_eq!(
        created.header("warning"),
        r#"299 - "unknown field \"bogus\"""#
    );
    let recorded = recording("05-post-unknown-field-default-201-with-warning-header.json");
    let body = created.json();
    assert_eq!(body["data"], recorded["data"]);
    assert!(body.get("bogus").is_none(), "{body}");
    assert_eq!(
        body["metadata"]["managedFields"][0]["fieldsV1"],
        recorded["metadata"]["managedFields"][0]["fieldsV1"]
    );

    // Bodies whose exact Go parser wording we do not copy: reason and code must match.
    let bad_post = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-x/configmaps",
            Some(JSON),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bad""#,
        )
        .await;
    assert_eq!(bad_post.status, 400);
    let status = bad_post.json();
    assert_eq!(status["reason"], "BadRequest");
    assert!(status["message"].as_str().unwrap().starts_with(
        "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: unexpected end of JSON input"
    ));
    let malformed = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: rec-x\n spec: [\n   replicas: 2\n";
    let bad_yaml = api.send("PATCH", &web, Some(APPLY), malformed).await;
    assert_eq!(bad_yaml.status, 400);
    assert!(
        bad_yaml.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding YAML: ")
    );

    // Authentication.
    let r = api
        .send_as(
            "GET",
            "/api/v1/namespaces",
            None,
            Bytes::new(),
            Some("bogus"),
            "*/*",
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        recording("05-error-401-invalid-bearer-token.json")
    );
    let r = api
        .send_as("GET", "/api/v1/namespaces", None, Bytes::new(), None, "*/*")
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json(),
        recording("05-error-403-no-client-credentials.json")
    );

    // Unknown resources and paths.
    assert_eq!(
        api.get("/apis/apps/v1/namespaces/rec-x/nothings")
            .await
            .status,
        404
    );
    assert_eq!(
        api.get("/apis/nope.example.com/v1/things").await.status,
        404
    );
    let r = api.get("/api/v9").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["kind"], "Status");
}

#[tokio::test]
async fn lease_concurrency_matches_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("lease_concurrency_matches_recordings") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-lease").await;
    let leases = "/apis/coordination.k8s.io/v1/namespaces/rec-lease/leases";
    let created = api
        .send(
            "POST",
            leases,
            Some(JSON),
            recording("07-lease-create-request-body.json").to_string(),
        )
        .await;
    assert_eq!(created.status, 201);
    let created = created.json();
    let recorded = recording("07-lease-create-response.json");
    assert_eq!(created["spec"], recorded["spec"]);
    assert!(created["metadata"].get("generation").is_none());
    assert_eq!(
        created["metadata"]["managedFields"][0]["fieldsV1"],
        recorded["metadata"]["managedFields"][0]["fieldsV1"]
    );
    let again = api
        .send(
            "POST",
            leases,
            Some(JSON),
            recording("07-lease-create-request-body.json").to_string(),
        )
        .await;
    assert_eq!(again.status, 409);
    assert_eq!(
        again.json(),
        recording("07-lease-create-again-409-already-exists.json")
    );

    let lock = format!("{leases}/rollguard-lock");
    let no_rv = api
        .send(
            "PUT",
            &lock,
            Some(JSON),
            recording("07-lease-put-without-resourceVersion-request-body.json").to_string(),
        )
        .await;
    assert_eq!(no_rv.status, 422);
    assert_eq!(
        no_rv.json(),
        recording("07-lease-put-without-resourceVersion-422-response.json")
    );

    let mut renew = created.clone();
    renew["spec"]["renewTime"] = json!("2026-11-30T08:56:07.000000Z");
    let renewed = api.send("PUT", &lock, Some(JSON), renew.to_string()).await;
    assert_eq!(renewed.status, 200);
    let mut stale = created.clone();
    stale["spec"]["holderIdentity"] = json!("rollguard-b");
    let stale_put = api.send("PUT", &lock, Some(JSON), stale.to_string()).await;
    assert_eq!(stale_put.status, 409);
    assert_eq!(
        stale_put.json(),
        recording("07-lease-takeover-stale-rv-409-response.json")
    );
    let stale_patch = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "spec": {"holderIdentity": "x"}});
    let resp = api
        .send("PATCH", &lock, Some(MERGE), stale_patch.to_string())
        .await;
    assert_eq!(resp.status, 409);
    assert_eq!(
        resp.json(),
        recording("07-lease-merge-patch-stale-rv-409-response.json")
    );
}

#[tokio::test]
async fn deletes_answer_as_recorded() {
    let Some(_shared) = kube_sim::shared_for_test("deletes_answer_as_recorded") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"to-delete"},"data":{"a":"b"}});
    let created = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-x/configmaps",
            Some(JSON),
            cm.to_string(),
        )
        .await
        .json();
    let resp = api
        .send(
            "DELETE",
            "/api/v1/namespaces/rec-x/configmaps/to-delete",
            None,
            Bytes::new(),
        )
        .await;
    assert_eq!(resp.status, 200);
    let mut expected = recording("09-delete-configmap-response.json");
    expected["details"]["uid"] = created["metadata"]["uid"].clone();
    assert_eq!(resp.json(), expected);
    let again = api
        .send(
            "DELETE",
            "/api/v1/namespaces/rec-x/configmaps/to-delete",
            None,
            Bytes::new(),
        )
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(
        again.json(),
        recording("09-delete-configmap-again-404.json")
    );

    // A namespace answers with itself, Terminating, and then goes away with its objects.
    api.create_namespace("rec-lease").await;
    let resp = api
        .send("DELETE", "/api/v1/namespaces/rec-lease", None, Bytes::new())
        .await;
    assert_eq!(resp.status, 200);
    let ns = resp.json();
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    assert!(ns["metadata"].get("deletionGracePeriodSeconds").is_none());
    let terminating = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-lease/configmaps",
            Some(JSON),
            cm.to_string(),
        )
        .await;
    assert_eq!(terminating.status, 403);
    assert_eq!(
        terminating.json()["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    let mut gone = false;
    for _ in 0..200 {
        if api.get("/api/v1/namespaces/rec-lease").await.status == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "namespace still there");

    // Foreground deletion answers with the object (finalizer foregroundDeletion), then
    // the Deployment and what it owns go away.
    let path = format!(
        "{}?fieldManager=rollguard",
        deployment_path("rec-x", "to-delete")
    );
    let mut body = recording("02-ssa-apply1-request-body.json");
    body["metadata"]["name"] = json!("to-delete");
    assert_eq!(api.apply(&path, &body).await.status, 201);
    let resp = api
        .send(
            "DELETE",
            &deployment_path("rec-x", "to-delete"),
            Some(JSON),
            recording("09-delete-deployment-foreground-request-body.json").to_string(),
        )
        .await;
    assert_eq!(resp.status, 200);
    let deleted = resp.json();
    let recorded = recording("09-delete-deployment-foreground-response.json");
    assert_eq!(deleted["kind"], "Deployment");
    assert_eq!(
        deleted["metadata"]["finalizers"],
        recorded["metadata"]["finalizers"]
    );
    assert_eq!(
        deleted["metadata"]["deletionGracePeriodSeconds"],
        recorded["metadata"]["deletionGracePeriodSeconds"]
    );
    let mut gone = false;
    for _ in 0..200 {
        if api.get(&deployment_path("rec-x", "to-delete")).await.status == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "deployment still there");
    let rs = api
        .get("/apis/apps/v1/namespaces/rec-x/replicasets")
        .await
        .json();
    assert_eq!(
        rs["items"].as_array().unwrap().len(),
        0,
        "owned ReplicaSets are collected"
    );
}

#[tokio::test]
async fn lists_select_and_paginate() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    for (name, tier) in [("a", "frontend"), ("b", "backend"), ("c", "frontend")] {
        let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name": name, "labels": {"tier": tier}}});
        assert_eq!(
            api.send(
                "POST",
                "/api/v1/namespaces/rec-x/configmaps",
                Some(JSON),
                cm.to_string()
            )
            .await
            .status,
            201
        );
    }
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let list = api
        .get("/api/v1/namespaces/rec-x/configmaps?labelSelector=tier%3Dfrontend")
        .await
        .json();
    assert_eq!(list["kind"], "ConfigMapList");
    assert!(list["metadata"]["resourceVersion"].is_string());
    assert!(
        list["items"][0].get("kind").is_none(),
        "built-in list items carry no kind"
    );
    assert_eq!(names(&list), ["a", "c"]);
    let list = api
        .get("/api/v1/namespaces/rec-x/configmaps?labelSelector=tier+notin+(frontend)")
        .await
        .json();
    assert_eq!(names(&list), ["b"]);
    let list = api
        .get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Drec-x,metadata.name!%3Da")
        .await
        .json();
    assert_eq!(names(&list), ["b", "c"]);
    let page1 = api
        .get("/api/v1/namespaces/rec-x/configmaps?limit=1")
        .await
        .json();
    assert_eq!(names(&page1), ["a"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 2);
    let token = page1["metadata"]["continue"].as_str().unwrap();
    let page2 = api
        .get(&format!(
            "/api/v1/namespaces/rec-x/configmaps?limit=1&continue={token}"
        ))
        .await
        .json();
    assert_eq!(names(&page2), ["b"]);
    assert_eq!(
        api.get("/api/v1/namespaces/rec-x/configmaps?labelSelector=%3D%3D%3D")
            .await
            .status,
        400
    );
    assert_eq!(
        api.get("/api/v1/namespaces/rec-x/configmaps?fieldSelector=spec.x%3D1")
            .await
            .status,
        400
    );
    // kubectl's Table.
    let table = api
        .send_as(
            "GET",
            "/api/v1/namespaces/rec-x/configmaps",
            None,
            Bytes::new(),
            Some(&api.token),
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn watch_from_resource_version_and_too_old() {
    let Some(_shared) = kube_sim::shared_for_test("watch_from_resource_version_and_too_old") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let list = api.get("/api/v1/namespaces/rec-x/configmaps").await.json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = api
        .watch(&format!("/api/v1/namespaces/rec-x/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"))
        .await;
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w"},"data":{"a":"1"}});
    api.send(
        "POST",
        "/api/v1/namespaces/rec-x/configmaps",
        Some(JSON),
        cm.to_string(),
    )
    .await;
    api.send(
        "PATCH",
        "/api/v1/namespaces/rec-x/configmaps/w",
        Some(MERGE),
        r#"{"data":{"a":"2"}}"#,
    )
    .await;
    api.send(
        "DELETE",
        "/api/v1/namespaces/rec-x/configmaps/w",
        None,
        Bytes::new(),
    )
    .await;
    let mut kinds = Vec::new();
    for _ in 0..3 {
        let event = watch.next(Duration::from_secs(5)).await.expect("event");
        assert_eq!(event["object"]["kind"], "ConfigMap");
        kinds.push(event["type"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);

    // Starting again from the list RV replays the same history.
    let mut replay = api
        .watch(&format!(
            "/api/v1/namespaces/rec-x/configmaps?watch=true&resourceVersion={rv}"
        ))
        .await;
    assert_eq!(
        replay.next(Duration::from_secs(5)).await.unwrap()["type"],
        "ADDED"
    );

    let mut old = api.watch("/apis/apps/v1/namespaces/rec-x/deployments?watch=1&allowWatchBookmarks=true&resourceVersion=1").await;
    let event = old.next(Duration::from_secs(5)).await.expect("ERROR event");
    assert_eq!(event["type"], "ERROR");
    let status = &event["object"];
    let recorded = recording_text("04-watch-deployments-rv1-too-old.txt");
    let recorded: Value = serde_json::from_str(recorded.trim()).unwrap();
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], recorded["object"]["reason"]);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: 1 (")
    );
    assert!(
        old.ended(Duration::from_secs(5)).await,
        "stream closes after the ERROR"
    );
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let rv = api
        .get("/api/v1/namespaces/default/configmaps")
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = api
        .watch(&format!("/api/v1/namespaces/default/configmaps?watch=1&labelSelector=tier%3Dfrontend&resourceVersion={rv}"))
        .await;
    let path = "/api/v1/namespaces/default/configmaps/sel?fieldManager=t";
    let cm = |tier: &str, data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sel", "labels": {"tier": tier}}, "data": {"d": data}})
    };
    for (tier, data) in [
        ("backend", "1"),
        ("frontend", "1"),
        ("frontend", "2"),
        ("backend", "2"),
    ] {
        assert!(api.apply(path, &cm(tier, data)).await.status < 300);
    }
    let mut seen = Vec::new();
    while let Some(event) = watch.next(Duration::from_secs(2)).await {
        seen.push(event["type"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn watch_initial_events_and_bookmarks() {
    let Some(_shared) = kube_sim::shared_for_test("watch_initial_events_and_bookmarks") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"seed"}});
    api.send(
        "POST",
        "/api/v1/namespaces/rec-x/configmaps",
        Some(JSON),
        cm.to_string(),
    )
    .await;

    let mut initial = api
        .watch("/api/v1/namespaces/rec-x/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
        .await;
    let added = initial.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "seed");
    let bookmark = initial.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // No RV: the current state as ADDED events.
    let mut from_now = api
        .watch("/api/v1/namespaces/rec-x/configmaps?watch=1")
        .await;
    assert_eq!(
        from_now.next(Duration::from_secs(5)).await.unwrap()["type"],
        "ADDED"
    );

    // A bookmark shortly before timeoutSeconds, then the server ends the stream.
    let rv = api
        .get("/apis/apps/v1/namespaces/rec-x/deployments")
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut timed = api
        .watch(&format!("/apis/apps/v1/namespaces/rec-x/deployments?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={rv}"))
        .await;
    let body = recording("02-ssa-apply1-request-body.json");
    let mut body = body;
    body["metadata"]["namespace"] = json!("rec-x");
    api.apply(
        &format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web")),
        &body,
    )
    .await;
    let mut saw_bookmark = false;
    while let Some(event) = timed.next(Duration::from_secs(5)).await {
        if event["type"] == "BOOKMARK" {
            saw_bookmark = true;
            let recorded: Value = serde_json::from_str(
                recording_text("04-watch-deployments-timeoutSeconds10.txt")
                    .lines()
                    .rfind(|l| l.contains("BOOKMARK"))
                    .unwrap(),
            )
            .unwrap();
            let mut expected = recorded["object"].clone();
            expected["metadata"]["resourceVersion"] =
                event["object"]["metadata"]["resourceVersion"].clone();
            assert_eq!(event["object"], expected, "bookmark object as recorded");
        }
    }
    assert!(saw_bookmark);
    // Watches of a resource that did not change get no bookmark.
    let mut quiet = api
        .watch(&format!("/api/v1/namespaces/rec-x/secrets?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={rv}"))
        .await;
    assert!(quiet.next(Duration::from_secs(5)).await.is_none());
}

#[tokio::test]
async fn discovery_matches_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("discovery_matches_recordings") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    assert_eq!(
        api.get("/version").await.json(),
        recording("01-discovery-version.json")
    );
    assert_eq!(
        api.get("/apis/apps/v1").await.json(),
        recording("01-discovery-apis-apps-v1.json")
    );
    assert_eq!(
        api.get("/apis/apps").await.json(),
        recording("01-discovery-apis-apps.json")
    );
    assert_eq!(
        api.get("/api/v1").await.json(),
        recording("01-discovery-api-v1.json")
    );
    let legacy = api.get("/api").await.json();
    assert_eq!(legacy["versions"], json!(["v1"]));

    let token = api.token.clone();
    let core = api
        .send_as(
            "GET",
            "/api",
            None,
            Bytes::new(),
            Some(&token),
            AGGREGATED_ACCEPT,
        )
        .await;
    assert_eq!(
        core.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(core.header("vary"), "Accept");
    assert!(!core.header("etag").is_empty());
    assert_eq!(core.json(), recording("01-discovery-api-aggregated.json"));

    // A client that has the document sends its ETag back and gets 304 with no body, as from
    // the real server; another ETag (an older document) gets the document again.
    let etag = core.header("etag").to_string();
    let again = |tag: String| {
        let request = hyper::Request::get(format!("{}/api", api.base))
            .header("accept", AGGREGATED_ACCEPT)
            .header("authorization", format!("Bearer {token}"))
            .header("if-none-match", tag)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let http = api.http.clone();
        async move {
            let resp = http.request(request).await.expect("request");
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, headers, body)
        }
    };
    let (status, headers, body) = again(etag.clone()).await;
    assert_eq!(status, 304);
    assert!(body.is_empty());
    assert_eq!(
        headers.get("etag").and_then(|v| v.to_str().ok()),
        Some(etag.as_str())
    );
    assert_eq!(
        headers.get("vary").and_then(|v| v.to_str().ok()),
        Some("Accept")
    );
    assert!(headers.get("content-type").is_none());
    let (status, _, body) = again("\"0000\"".to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("json"),
        recording("01-discovery-api-aggregated.json")
    );

    let apis = api
        .send_as(
            "GET",
            "/apis",
            None,
            Bytes::new(),
            Some(&token),
            AGGREGATED_ACCEPT,
        )
        .await
        .json();
    // Group by group, both ways: every recorded group is served, and nothing else is.
    let recorded = recording("01-discovery-apis-aggregated.json");
    let names = |doc: &Value| -> Vec<String> {
        doc["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|g| {
                g["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    assert!(
        names(&recorded).len() > 10,
        "the recording lists the groups"
    );
    assert_eq!(
        names(&apis),
        names(&recorded),
        "aggregated groups, in order"
    );
    for (group, expected) in apis["items"]
        .as_array()
        .unwrap()
        .iter()
        .zip(recorded["items"].as_array().unwrap())
    {
        assert_eq!(
            group, expected,
            "aggregated group {}",
            group["metadata"]["name"]
        );
    }
    let legacy_apis = api.get("/apis").await.json();
    let recorded = recording("01-discovery-apis-legacy.json");
    assert_eq!(legacy_apis["groups"], recorded["groups"], "/apis groups");

    // The APIResourceLists recorded for the groups added in section 13.
    for (path, file) in [
        (
            "/apis/admissionregistration.k8s.io/v1",
            "13-discovery-apis-admissionregistration-v1.json",
        ),
        (
            "/apis/apiregistration.k8s.io/v1",
            "13-discovery-apis-apiregistration-v1.json",
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1",
            "13-discovery-apis-flowcontrol-v1.json",
        ),
        (
            "/apis/scheduling.k8s.io/v1",
            "13-discovery-apis-scheduling-v1.json",
        ),
        ("/apis/node.k8s.io/v1", "13-discovery-apis-node-v1.json"),
        (
            "/apis/discovery.k8s.io/v1",
            "13-discovery-apis-discovery-v1.json",
        ),
        ("/apis/resource.k8s.io", "13-discovery-apis-resource.json"),
        (
            "/apis/resource.k8s.io/v1",
            "13-discovery-apis-resource-v1.json",
        ),
        ("/apis/events.k8s.io/v1", "13-discovery-apis-events-v1.json"),
        (
            "/apis/certificates.k8s.io/v1",
            "13-discovery-apis-certificates-v1.json",
        ),
    ] {
        let got = api.get(path).await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.json(), recording(file), "{path} against {file}");
    }
    let unserved = api.get("/apis/resource.k8s.io/v1beta2").await;
    assert_eq!(unserved.status, 404);
    assert_eq!(
        unserved.json(),
        recording("13-discovery-apis-resource-v1beta2-404.json")
    );
}

#[tokio::test]
async fn crd_is_served_after_create() {
    let Some(_shared) = kube_sim::shared_for_test("crd_is_served_after_create") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let created = api
        .send(
            "POST",
            crds,
            Some(JSON),
            recording("06-crd-create-request-body.json").to_string(),
        )
        .await;
    assert_eq!(created.status, 201);
    let created = created.json();
    let recorded = recording("06-crd-create-response.json");
    assert_eq!(created["spec"], recorded["spec"]);
    assert_eq!(
        api.get("/apis/example.com").await.json(),
        recording("06-crd-discovery-group.json")
    );
    let gv = api.get("/apis/example.com/v1").await.json();
    let recorded_gv = recording("06-crd-discovery-group-version.json");
    assert_eq!(gv["resources"][0]["name"], "widgets");
    assert_eq!(
        gv["resources"][0]["shortNames"],
        recorded_gv["resources"][0]["shortNames"]
    );
    assert_eq!(gv["resources"][1], recorded_gv["resources"][1]);

    api.create_namespace("rec-crd").await;
    let widget = recording("06-cr-ssa-create-request-body.yaml");
    let resp = api
        .apply(
            "/apis/example.com/v1/namespaces/rec-crd/widgets/w1?fieldManager=rollguard",
            &widget,
        )
        .await;
    assert_eq!(resp.status, 201);
    let w = resp.json();
    let recorded = recording("06-cr-ssa-create-response.json");
    assert_eq!(w["spec"], recorded["spec"]);
    assert_eq!(
        w["metadata"]["managedFields"][0]["fieldsV1"],
        recorded["metadata"]["managedFields"][0]["fieldsV1"]
    );
    assert!(w.get("status").is_none());
    let table = api
        .send_as("GET", "/apis/example.com/v1/namespaces/rec-crd/widgets", None, Bytes::new(), Some(&api.token),
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
        .await
        .json();
    let recorded_table = recording("06-cr-get-as-table.json");
    assert_eq!(
        table["columnDefinitions"],
        recorded_table["columnDefinitions"]
    );
    assert_eq!(
        table["rows"][0]["cells"],
        recorded_table["rows"][0]["cells"]
    );
    // A field the CRD's schema does not declare: the recorded 500, with or without Strict.
    let unknown = recording("06-cr-ssa-unknown-field-request-body.yaml");
    for (query, file) in [
        ("", "06-cr-ssa-unknown-field-500-response.json"),
        (
            "&fieldValidation=Strict",
            "06-cr-ssa-unknown-field-strict-500-response.json",
        ),
    ] {
        let path = format!(
            "/apis/example.com/v1/namespaces/rec-crd/widgets/w1?fieldManager=rollguard{query}"
        );
        let resp = api.apply(&path, &unknown).await;
        assert_eq!(resp.status, 500);
        assert_eq!(resp.json(), recording(file));
    }
    let status = api
        .send("PATCH", "/apis/example.com/v1/namespaces/rec-crd/widgets/w1/status?fieldManager=widget-controller", Some(APPLY), recording("06-cr-ssa-status-request-body.json").to_string())
        .await;
    assert_eq!(status.status, 200);
    let status = status.json();
    assert_eq!(status["status"]["ready"], true);
    assert_eq!(status["metadata"]["generation"], 1);
    let entries = status["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e["manager"] == "widget-controller" && e["subresource"] == "status")
    );

    // Established soon after (the CRD controller).
    let mut established = false;
    for _ in 0..200 {
        let crd = api.get(&format!("{crds}/widgets.example.com")).await.json();
        if crd["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        }) {
            established = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(established);

    // Deleting the CRD answers with the object and stops serving the resource.
    let deleted = api
        .send(
            "DELETE",
            &format!("{crds}/widgets.example.com"),
            None,
            Bytes::new(),
        )
        .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.json()["kind"], "CustomResourceDefinition");
    let mut unserved = false;
    for _ in 0..200 {
        if api
            .get("/apis/example.com/v1/namespaces/rec-crd/widgets")
            .await
            .status
            == 404
        {
            unserved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(unserved);
}

#[tokio::test]
async fn faults_and_counters() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let cluster = &sim.clusters()[0];

    cluster.set_faults(Faults {
        error_rate: 1.0,
        error_status: 503,
        ..Faults::default()
    });
    let r = api.get("/api/v1/namespaces").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["kind"], "Status");
    // The control endpoint is never faulted.
    assert_eq!(api.get("/_sim/counters").await.status, 200);

    cluster.set_faults(Faults {
        error_rate: 1.0,
        error_status: 429,
        retry_after_seconds: 2,
        ..Faults::default()
    });
    let r = api.get("/api/v1/namespaces").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), "2");

    // Latency and a partial error rate set through the control endpoint.
    let r = api
        .send("POST", "/_sim/faults", Some(JSON), r#"{"latency_ms": 200}"#)
        .await;
    assert_eq!(r.status, 200);
    let started = std::time::Instant::now();
    assert_eq!(api.get("/api/v1/namespaces").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(api.get("/_sim/faults").await.json()["latency_ms"], 200);
    cluster.set_faults(Faults {
        error_rate: 0.5,
        error_status: 500,
        ..Faults::default()
    });
    let mut failures = 0;
    for _ in 0..200 {
        if api.get("/version").await.status == 500 {
            failures += 1;
        }
    }
    assert_eq!(failures, 0, "/version is outside /api");
    for _ in 0..200 {
        if api.get("/api/v1/namespaces/default").await.status == 500 {
            failures += 1;
        }
    }
    assert!((40..=160).contains(&failures), "{failures} of 200 failed");
    cluster.set_faults(Faults::default());

    // Counters per verb and resource, also over HTTP.
    cluster.reset_counters();
    api.get("/api/v1/namespaces/default").await;
    api.get("/apis/apps/v1/deployments").await;
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}});
    api.send(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(JSON),
        cm.to_string(),
    )
    .await;
    let counters = cluster.counters();
    assert_eq!(counters.get("get", "namespaces"), 1);
    assert_eq!(counters.get("list", "deployments.apps"), 1);
    assert_eq!(counters.get("create", "configmaps"), 1);
    assert_eq!(counters.writes(), 1);
    let over_http = api.get("/_sim/counters").await.json();
    assert_eq!(over_http["writes"], 1);
    assert_eq!(
        api.send("POST", "/_sim/counters/reset", None, Bytes::new())
            .await
            .status,
        200
    );
    assert_eq!(cluster.counters().total(), 0);
    // The control endpoint needs the token too.
    let r = api
        .send_as(
            "GET",
            "/_sim/counters",
            None,
            Bytes::new(),
            Some("wrong"),
            JSON,
        )
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn tokens_rotate_over_the_control_endpoint() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let old = api.token.clone();
    let get = |token: String| {
        let api = &api;
        async move {
            api.send_as(
                "GET",
                "/api/v1/namespaces",
                None,
                Bytes::new(),
                Some(&token),
                JSON,
            )
            .await
            .status
        }
    };
    assert_eq!(get(old.clone()).await, 200);
    // Bad bodies are refused and change nothing.
    for body in [r#"{}"#, r#"{"tokens": []}"#, r#"{"tokens": [""]}"#, "x"] {
        let r = api.send("POST", "/_sim/tokens", Some(JSON), body).await;
        assert_eq!(r.status, 400, "{body}");
    }
    assert_eq!(get(old.clone()).await, 200);
    let r = api
        .send(
            "POST",
            "/_sim/tokens",
            Some(JSON),
            r#"{"tokens": ["new-one", "new-two"]}"#,
        )
        .await;
    assert_eq!((r.status, r.json()["accepted"].clone()), (200, json!(2)));
    assert_eq!(get(old.clone()).await, 401);
    assert_eq!(get("new-one".into()).await, 200);
    assert_eq!(get("new-two".into()).await, 200);
    // And in process, as the e2e tests rotate.
    sim.clusters()[0].set_tokens(vec![old.clone()]);
    assert_eq!(get(old).await, 200);
    assert_eq!(get("new-one".into()).await, 401);
}

/// Polls until connecting to `addr` succeeds (`up`) or is refused, within `limit`.
async fn wait_for_port(addr: &str, up: bool, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() == up {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn down_and_up_on_the_same_port() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let cluster = &sim.clusters()[0];
    assert_eq!(api.get("/version").await.status, 200);
    let addr = cluster.url().trim_start_matches("http://").to_string();
    cluster.set_down(true);
    assert!(
        wait_for_port(&addr, false, Duration::from_secs(3)).await,
        "connections refused while down"
    );
    // The port stays reserved while down: a socket bound as an ephemeral one is (without
    // SO_REUSEADDR) cannot take it, so no parallel test's server answers in its place.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let taken = socket.bind(addr.parse().expect("address"));
    assert!(
        taken.is_err(),
        "the port of a down cluster could be bound by someone else"
    );
    drop(socket);
    cluster.set_down(false);
    assert!(
        wait_for_port(&addr, true, Duration::from_secs(3)).await,
        "up again on the same port"
    );
    // A fresh client, since pooled connections were cut.
    let fresh = Api::new(&sim, 0);
    assert_eq!(fresh.get("/version").await.status, 200);

    // Down for a while through the control endpoint, then back by itself.
    let r = fresh
        .send(
            "POST",
            "/_sim/faults",
            Some(JSON),
            r#"{"down_for_ms": 1000}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(
        wait_for_port(&addr, false, Duration::from_millis(900)).await,
        "down after the request"
    );
    assert!(
        wait_for_port(&addr, true, Duration::from_secs(5)).await,
        "back after down_for_ms"
    );
}

#[tokio::test]
async fn watch_streams_drop_on_fault() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let cluster = &sim.clusters()[0];
    cluster.set_faults(Faults {
        drop_watch_after_events: Some(2),
        ..Faults::default()
    });
    for name in ["a", "b", "c"] {
        let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name": name}});
        api.send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(JSON),
            cm.to_string(),
        )
        .await;
    }
    let mut w = api
        .watch("/api/v1/namespaces/default/configmaps?watch=1")
        .await;
    let mut count = 0;
    while w.next(Duration::from_secs(3)).await.is_some() {
        count += 1;
    }
    assert_eq!(count, 2);
    cluster.set_faults(Faults {
        drop_watch_after_ms: Some(300),
        ..Faults::default()
    });
    let mut w = api
        .watch("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=999999")
        .await;
    assert!(w.ended(Duration::from_secs(3)).await);
}

#[tokio::test]
async fn garbage_input_never_breaks_the_server() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    let huge = "9".repeat(400);
    let paths = [
        "/api/v1/namespaces/default/configmaps/%ff%fe".to_string(),
        "/api/v1/namespaces//configmaps".to_string(),
        "/apis/apps/v1/namespaces/x/deployments/a/b/c/d/e".to_string(),
        format!("/api/v1/configmaps?limit={huge}"),
        format!("/api/v1/configmaps?watch=1&resourceVersion={huge}"),
        format!("/api/v1/configmaps?watch=1&timeoutSeconds={huge}"),
        "/api/v1/configmaps?watch=1&resourceVersion=-5".to_string(),
        "/api/v1/configmaps?continue=%00%01".to_string(),
        "/api/v1/configmaps?labelSelector=a+in+(((".to_string(),
        "/api/v1/configmaps?fieldSelector=%3D%3D%3D".to_string(),
        "/api/v1/namespaces/default/pods/x/exec".to_string(),
        "/apis/apps/v1/namespaces/default/deployments/x/status".to_string(),
        "/apis/%2e%2e/v1".to_string(),
    ];
    for p in &paths {
        let r = api.get(p).await;
        assert!(r.status < 500, "{p}: {}", r.status);
        assert!(serde_json::from_slice::<Value>(&r.body).is_ok(), "{p}");
    }
    let bodies: Vec<(&str, &str, Bytes)> = vec![
        ("POST", JSON, Bytes::from_static(b"\xff\xfe\xfd")),
        ("POST", JSON, Bytes::from_static(b"[1,2,3]")),
        ("POST", JSON, Bytes::from_static(b"\"just a string\"")),
        (
            "POST",
            JSON,
            Bytes::from(format!("{{\"metadata\":{{\"name\":{huge}}}}}")),
        ),
        (
            "POST",
            "application/yaml",
            Bytes::from_static(b"a: [b\n: - {"),
        ),
        ("PATCH", APPLY, Bytes::from_static(b"\xff\x00")),
        ("PATCH", APPLY, Bytes::from_static(b"- 1\n- 2")),
        ("PATCH", MERGE, Bytes::from_static(b"null")),
        (
            "PATCH",
            "application/json-patch+json",
            Bytes::from_static(b"[{\"op\":\"remove\",\"path\":\"/a/99999999999999999999\"}]"),
        ),
        (
            "PATCH",
            "application/strategic-merge-patch+json",
            Bytes::from_static(b"[]"),
        ),
        (
            "PUT",
            JSON,
            Bytes::from_static(b"{\"metadata\":{\"name\":\"other\"}}"),
        ),
        ("DELETE", JSON, Bytes::from_static(b"{not json")),
    ];
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t"}});
    api.send(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(JSON),
        cm.to_string(),
    )
    .await;
    for (method, ct, body) in bodies {
        let path = if method == "POST" {
            "/api/v1/namespaces/default/configmaps".to_string()
        } else {
            "/api/v1/namespaces/default/configmaps/t?fieldManager=x".to_string()
        };
        let r = api.send(method, &path, Some(ct), body.clone()).await;
        assert!(
            r.status >= 400 && r.status < 500,
            "{method} {ct} {body:?}: {}",
            r.status
        );
        assert_eq!(r.json()["kind"], "Status");
    }
    assert_eq!(api.get("/version").await.status, 200, "still serving");
}

#[tokio::test]
async fn scale_and_status_subresources() {
    let Some(_shared) = kube_sim::shared_for_test("scale_and_status_subresources") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-x").await;
    let path = format!("{}?fieldManager=rollguard", deployment_path("rec-x", "web"));
    assert_eq!(
        api.apply(&path, &recording("02-ssa-apply1-request-body.json"))
            .await
            .status,
        201
    );
    let scale = api
        .get(&format!("{}/scale", deployment_path("rec-x", "web")))
        .await
        .json();
    let recorded = recording("09-deployment-scale-subresource-get.json");
    assert_eq!(scale["kind"], recorded["kind"]);
    assert_eq!(scale["apiVersion"], recorded["apiVersion"]);
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=web");
    let r = api
        .send(
            "PATCH",
            &format!("{}/scale", deployment_path("rec-x", "web")),
            Some(MERGE),
            r#"{"spec":{"replicas":4}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        api.get(&deployment_path("rec-x", "web")).await.json()["spec"]["replicas"],
        4
    );
    let status = api
        .get(&format!("{}/status", deployment_path("rec-x", "web")))
        .await;
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["kind"], "Deployment");
}

#[tokio::test]
async fn https_with_the_generated_ca() {
    let sim = Sim::start(SimOptions {
        clusters: 2,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let kubeconfig = sim.kubeconfig_yaml();
    let parsed: Value = serde_saphyr::from_str(&kubeconfig).unwrap();
    assert_eq!(parsed["current-context"], "sim-1");
    assert_eq!(parsed["contexts"].as_array().unwrap().len(), 2);
    assert!(sim.clusters()[0].url().starts_with("https://127.0.0.1:"));
    assert_ne!(sim.clusters()[0].token(), sim.clusters()[1].token());
    // kube's client trusts the CA from the kubeconfig.
    let config = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions {
        context: Some("sim-2".into()),
        ..Default::default()
    };
    let client_config = kube::Config::from_custom_kubeconfig(config, &options)
        .await
        .unwrap();
    let client = kube::Client::try_from(client_config).unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.36.2");
}

/// `value` with what differs from run to run (uid, resourceVersion, timestamps, the client's
/// manager name) blanked.
fn without_identity(mut value: Value) -> Value {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "resourceVersion", "creationTimestamp"] {
            if meta.contains_key(key) {
                meta.insert(key.into(), json!("-"));
            }
        }
        if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in entries.iter_mut() {
                entry["time"] = json!("-");
                if entry["operation"] == "Update" && entry.get("subresource").is_none() {
                    entry["manager"] = json!("-");
                }
            }
        }
    }
    value
}

#[tokio::test]
async fn kinds_without_a_controller_are_stored_as_recorded() {
    let Some(_shared) =
        kube_sim::shared_for_test("kinds_without_a_controller_are_stored_as_recorded")
    else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    for (path, name) in [
        (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            "13-validatingwebhookconfiguration-create",
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            "13-apiservice-create",
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            "13-flowschema-create",
        ),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            "13-priorityclass-create",
        ),
    ] {
        let body = recording(&format!("{name}-request-body.json"));
        let created = api
            .send_as(
                "POST",
                path,
                Some(JSON),
                body.to_string(),
                Some(&api.token),
                JSON,
            )
            .await;
        assert_eq!(
            created.status,
            201,
            "{path}: {}",
            String::from_utf8_lossy(&created.body)
        );
        assert_eq!(
            without_identity(created.json()),
            without_identity(recording(&format!("{name}-response.json"))),
            "{path}"
        );
        let object_name = body["metadata"]["name"].as_str().unwrap();
        let read = api.get(&format!("{path}/{object_name}")).await;
        assert_eq!(read.status, 200);
        assert_eq!(read.json(), created.json(), "{path}: read back as created");
    }
    // A webhook configuration has no effect: there are no webhooks to call.
    api.create_namespace("rec-val").await;
    let open = recording("13-webhook-fail-open-configmap-create-request-body.json");
    let created = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-val/configmaps",
            Some(JSON),
            open.to_string(),
        )
        .await;
    assert_eq!(created.status, 201);
}

/// RFC 7386 merge of `patch` into `target` (to build PUT bodies from a GET).
fn merged(mut target: Value, patch: &Value) -> Value {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    let current = t.remove(k).unwrap_or(Value::Null);
                    t.insert(k.clone(), merged(current, v));
                }
            }
            target
        }
        _ => patch.clone(),
    }
}

/// Each forbidden update of section 10, by PUT, merge patch, strategic merge patch and
/// server-side apply with force, answers what the real server answered.
#[tokio::test]
async fn immutable_fields_answer_as_recorded() {
    let Some(_shared) = kube_sim::shared_for_test("immutable_fields_answer_as_recorded") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-val").await;
    let job_patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "work", "image": "registry.example/web:v2"}]}}}});
    let cases = [
        (
            "/apis/apps/v1/namespaces/rec-val/deployments/imm-deploy",
            "10-deployment",
            recording("10-deployment-selector-merge-patch-request-body.json"),
            "10-deployment-selector-ssa-force-request-body.yaml",
            "10-deployment-selector-put-422-response.json",
        ),
        (
            "/apis/apps/v1/namespaces/rec-val/daemonsets/imm-ds",
            "10-daemonset",
            recording("10-deployment-selector-merge-patch-request-body.json"),
            "10-daemonset-selector-ssa-force-request-body.yaml",
            "10-daemonset-selector-put-422-response.json",
        ),
        (
            "/apis/apps/v1/namespaces/rec-val/statefulsets/imm-sts",
            "10-statefulset",
            json!({"spec": {"serviceName": "other"}}),
            "10-statefulset-volumeclaimtemplates-ssa-force-request-body.yaml",
            "10-statefulset-volumeclaimtemplates-put-422-response.json",
        ),
        (
            "/api/v1/namespaces/rec-val/services/imm-svc",
            "10-service",
            json!({"spec": {"clusterIP": "10.96.200.11"}}),
            "10-service-clusterip-ssa-force-request-body.yaml",
            "10-service-clusterip-put-422-response.json",
        ),
        (
            "/apis/batch/v1/namespaces/rec-val/jobs/imm-job",
            "10-job",
            job_patch,
            "10-job-template-ssa-force-request-body.yaml",
            "10-job-template-put-422-response.json",
        ),
    ];
    for (path, prefix, patch, ssa_body, expected) in cases {
        let created = api
            .apply(
                &format!("{path}?fieldManager=rec"),
                &recording(&format!("{prefix}-create-request-body.yaml")),
            )
            .await;
        assert_eq!(
            created.status,
            201,
            "{path}: {}",
            String::from_utf8_lossy(&created.body)
        );
        let expected = recording(expected);
        let mut current = api.get(path).await.json();
        if let Some(meta) = current["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        if let Some(map) = current.as_object_mut() {
            map.remove("status");
        }
        let put_body = merged(current, &patch);
        let answers = [
            (
                "PUT",
                api.send("PUT", path, Some(JSON), put_body.to_string())
                    .await,
            ),
            (
                "merge patch",
                api.send("PATCH", path, Some(MERGE), patch.to_string())
                    .await,
            ),
            (
                "strategic merge patch",
                api.send(
                    "PATCH",
                    path,
                    Some("application/strategic-merge-patch+json"),
                    patch.to_string(),
                )
                .await,
            ),
            (
                "server-side apply, forced",
                api.apply(
                    &format!("{path}?fieldManager=rec&force=true"),
                    &recording(ssa_body),
                )
                .await,
            ),
        ];
        for (method, answer) in answers {
            assert_eq!(
                answer.status,
                422,
                "{path} {method}: {}",
                String::from_utf8_lossy(&answer.body)
            );
            let got = answer.json();
            if prefix == "10-job" {
                // The real server prints the template as its internal Go type; the code,
                // reason, field path and the message's frame are what a client can match.
                assert_eq!(got["reason"], expected["reason"], "{path} {method}");
                let cause = &got["details"]["causes"][0];
                let recorded = &expected["details"]["causes"][0];
                assert_eq!(cause["field"], recorded["field"], "{path} {method}");
                assert_eq!(cause["reason"], recorded["reason"], "{path} {method}");
                let message = got["message"].as_str().unwrap_or_default();
                assert!(
                    message.starts_with(
                        "Job.batch \"imm-job\" is invalid: spec.template: Invalid value: {"
                    ) && message.ends_with("}: field is immutable"),
                    "{path} {method}: {message}"
                );
            } else {
                assert_eq!(got, expected, "{path} {method}");
            }
        }
        // Nothing changed (the controllers may have written status since).
        let after = api.get(path).await.json();
        let created = created.json();
        assert_eq!(after["spec"], created["spec"], "{path}");
        assert_eq!(
            after["metadata"]["generation"], created["metadata"]["generation"],
            "{path}"
        );
    }

    // Changing only the plural clusterIPs is a different error.
    let only_ips = api
        .send(
            "PATCH",
            "/api/v1/namespaces/rec-val/services/imm-svc",
            Some(MERGE),
            recording("10-service-clusterips-only-merge-patch-request-body.json").to_string(),
        )
        .await;
    assert_eq!(only_ips.status, 422);
    assert_eq!(
        only_ips.json(),
        recording("10-service-clusterips-only-merge-patch-422-response.json")
    );

    // What may change still can: a StatefulSet's replicas, a Service without clusterIP in a PUT.
    let scaled = api
        .send(
            "PATCH",
            "/apis/apps/v1/namespaces/rec-val/statefulsets/imm-sts",
            Some(MERGE),
            json!({"spec": {"replicas": 2}}).to_string(),
        )
        .await;
    assert_eq!(
        scaled.status,
        200,
        "{}",
        String::from_utf8_lossy(&scaled.body)
    );
}

/// Section 11: what a create is refused for, as the real server words it.
#[tokio::test]
async fn create_time_validation_answers_as_recorded() {
    let Some(_shared) = kube_sim::shared_for_test("create_time_validation_answers_as_recorded")
    else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-val").await;
    for (path, name) in [
        (
            "/apis/apps/v1/namespaces/rec-val/deployments",
            "11-deployment-no-selector",
        ),
        (
            "/apis/apps/v1/namespaces/rec-val/deployments",
            "11-deployment-selector-mismatch",
        ),
        (
            "/api/v1/namespaces/rec-val/services",
            "11-service-port-zero",
        ),
        (
            "/api/v1/namespaces/rec-val/configmaps",
            "11-configmap-invalid-key",
        ),
        (
            "/api/v1/namespaces/rec-val/pods",
            "11-pod-duplicate-container-name",
        ),
    ] {
        let body = recording(&format!("{name}-request-body.json"));
        let answer = api.send("POST", path, Some(JSON), body.to_string()).await;
        assert_eq!(
            answer.status,
            422,
            "{name}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(
            answer.json(),
            recording(&format!("{name}-422-response.json")),
            "{name}"
        );
        let object = body["metadata"]["name"].as_str().unwrap_or_default();
        let stored = api.get(&format!("{path}/{object}")).await;
        assert_eq!(stored.status, 404, "{name}: nothing stored");
    }
}

/// Section 12: Secret data that is not base64 is refused before validation (400 for a
/// create, 500 for server-side apply); stringData is merged into data and never returned.
#[tokio::test]
async fn secrets_decode_as_recorded() {
    let Some(_shared) = kube_sim::shared_for_test("secrets_decode_as_recorded") else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-val").await;
    let secrets = "/api/v1/namespaces/rec-val/secrets";
    let bad = api
        .send(
            "POST",
            secrets,
            Some(JSON),
            recording("12-secret-data-not-base64-post-request-body.json").to_string(),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json(),
        recording("12-secret-data-not-base64-post-400-response.json")
    );
    let bad_apply = api
        .apply(
            &format!("{secrets}/sec-badb64?fieldManager=rec"),
            &recording("12-secret-data-not-base64-ssa-request-body.yaml"),
        )
        .await;
    assert_eq!(bad_apply.status, 500);
    assert_eq!(
        bad_apply.json(),
        recording("12-secret-data-not-base64-ssa-500-response.json")
    );
    assert_eq!(api.get(&format!("{secrets}/sec-badb64")).await.status, 404);

    for name in [
        "12-secret-stringdata-only-create",
        "12-secret-data-and-stringdata-same-key-create",
    ] {
        let body = recording(&format!("{name}-request-body.json"));
        let created = api
            .send("POST", secrets, Some(JSON), body.to_string())
            .await;
        assert_eq!(
            created.status,
            201,
            "{name}: {}",
            String::from_utf8_lossy(&created.body)
        );
        let created = created.json();
        assert_eq!(
            without_identity(created.clone()),
            without_identity(recording(&format!("{name}-response.json"))),
            "{name}"
        );
        let object = body["metadata"]["name"].as_str().unwrap_or_default();
        let read = api.get(&format!("{secrets}/{object}")).await.json();
        assert_eq!(read, created, "{name}: stringData is never returned");
    }
    let applied = api
        .apply(
            &format!("{secrets}/sec-stringdata-ssa?fieldManager=rec"),
            &recording("12-secret-stringdata-only-ssa-request-body.yaml"),
        )
        .await;
    assert_eq!(applied.status, 201);
    assert_eq!(
        without_identity(applied.json()),
        without_identity(recording("12-secret-stringdata-only-ssa-response.json"))
    );
}

/// Values of the wrong type or range and oversized objects are refused before anything is
/// stored: the typed-patch 500 for server-side apply, Go's decoder error for other writes,
/// 422 for the size limits, 413 past the request body limit.
#[tokio::test]
async fn types_and_sizes_are_refused() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("t").await;
    let deployment = |replicas: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "t"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}})
    };
    let path = "/apis/apps/v1/namespaces/t/deployments";
    let applied = api
        .apply(
            &format!("{path}/web?fieldManager=rg"),
            &deployment(json!("2")),
        )
        .await;
    assert_eq!(applied.status, 500);
    assert_eq!(
        applied.json()["message"],
        "failed to create typed patch object (t/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string"
    );
    let posted = api
        .send("POST", path, Some(JSON), deployment(json!("2")).to_string())
        .await;
    assert_eq!(posted.status, 400);
    assert_eq!(
        posted.json()["message"],
        "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field Deployment.spec.replicas of type int32"
    );
    let huge = api
        .send(
            "POST",
            path,
            Some(JSON),
            deployment(json!(99_999_999_999i64)).to_string(),
        )
        .await;
    assert_eq!(huge.status, 400);
    assert_eq!(
        huge.json()["message"],
        "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal number 99999999999 into Go struct field Deployment.spec.replicas of type int32"
    );
    assert_eq!(api.get(&format!("{path}/web")).await.status, 404);

    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "t"}, "stringData": {"a": ["not", "a", "string"]}});
    let listed = api
        .send(
            "POST",
            "/api/v1/namespaces/t/secrets",
            Some(JSON),
            secret.to_string(),
        )
        .await;
    assert_eq!(listed.status, 400);
    assert_eq!(
        listed.json()["message"],
        "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal array into Go struct field Secret.stringData of type string"
    );

    let configmap = |bytes: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "t"},
            "data": {"blob": "x".repeat(bytes)}})
    };
    let too_big = api
        .send(
            "POST",
            "/api/v1/namespaces/t/configmaps",
            Some(JSON),
            configmap(2 * 1024 * 1024).to_string(),
        )
        .await;
    assert_eq!(too_big.status, 422);
    assert_eq!(
        too_big.json()["message"],
        "ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes"
    );
    let past_limit = api
        .send(
            "POST",
            "/api/v1/namespaces/t/configmaps",
            Some(JSON),
            configmap(5 * 1024 * 1024).to_string(),
        )
        .await;
    assert_eq!(past_limit.status, 413);
    assert_eq!(
        past_limit.json()["message"],
        "Request entity too large: limit is 3145728"
    );
    let annotated = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "t", "annotations": {"x": "y".repeat(300 * 1024)}}});
    let annotated = api
        .send(
            "POST",
            "/api/v1/namespaces/t/configmaps",
            Some(JSON),
            annotated.to_string(),
        )
        .await;
    assert_eq!(annotated.status, 422);
    assert_eq!(
        annotated.json()["message"],
        "ConfigMap \"a\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"
    );
}

/// The keys of a JSON object, sorted (field sets compare order-insensitively).
fn key_set(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// `<name>.<hex>` where the hex is a UnixNano within the object's creation second.
fn assert_event_name(event: &Value, involved: &str) {
    let name = event["metadata"]["name"].as_str().unwrap();
    let hex = name
        .strip_prefix(&format!("{involved}."))
        .unwrap_or_else(|| panic!("{name} is not {involved}.<hex>"));
    let nanos = i128::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{name}: not hex"));
    let made = jiff::Timestamp::from_nanosecond(nanos).unwrap();
    let created: jiff::Timestamp = event["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        made.as_second(),
        created.as_second(),
        "{name}: made at {made}"
    );
}

/// A stored Event compared with a recorded one: the same fields (in any order), the same
/// involvedObject/source fields and managedFields, the core v1 constants.
fn assert_core_event_like(ours: &Value, recorded: &Value) {
    assert_eq!(key_set(ours), key_set(recorded), "{ours:#}");
    for key in ["involvedObject", "source"] {
        assert_eq!(
            key_set(&ours[key]),
            key_set(&recorded[key]),
            "{key}: {ours:#}"
        );
    }
    assert_eq!(key_set(&ours["metadata"]), key_set(&recorded["metadata"]));
    for key in ["reason", "type", "count", "eventTime", "reportingInstance"] {
        assert_eq!(ours[key], recorded[key], "{key}");
    }
    for key in ["kind", "apiVersion"] {
        assert_eq!(ours["involvedObject"][key], recorded["involvedObject"][key]);
    }
    assert_eq!(ours["source"], recorded["source"]);
    assert_eq!(ours["reportingComponent"], ours["source"]["component"]);
    assert_eq!(ours["firstTimestamp"], ours["lastTimestamp"]);
    let whole = |v: &Value| v.as_str().unwrap().len() == "2026-12-01T09:37:09Z".len();
    assert!(whole(&ours["firstTimestamp"]) && whole(&ours["lastTimestamp"]));
    let fields = |v: &Value| {
        let mut entry = v["metadata"]["managedFields"][0].clone();
        entry["time"] = json!("-");
        entry
    };
    assert_eq!(fields(ours), fields(recorded), "managedFields");
}

#[tokio::test]
async fn events_match_recordings() {
    let Some(_shared) = kube_sim::shared_for_test("events_match_recordings") else {
        return;
    };
    let sim = Sim::start(SimOptions {
        tls: false,
        time_scale: 10.0,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-val").await;
    let created = api
        .apply(
            &format!(
                "{}?fieldManager=rec",
                deployment_path("rec-val", "rec-events")
            ),
            &recording("15-deployment-doesnotexist-create-request-body.yaml"),
        )
        .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let dep_uid = created.json()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    // A Service may have the Deployment's name: names are unique per resource.
    let service = api
        .send(
            "POST",
            "/api/v1/namespaces/rec-val/services",
            Some(JSON),
            recording("15-service-same-name-create-request-body.json").to_string(),
        )
        .await;
    assert_eq!(
        service.status,
        201,
        "{}",
        String::from_utf8_lossy(&service.body)
    );
    let recorded_service = recording("15-service-same-name-create-response.json");
    assert_eq!(
        service.json()["metadata"]["name"],
        recorded_service["metadata"]["name"]
    );

    // The controllers' events come; the pod's image pull fails (the kubelet's events).
    let mut list = Value::Null;
    for _ in 0..100 {
        list = api.get("/api/v1/namespaces/rec-val/events").await.json();
        let reasons: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["reason"].as_str())
            .collect();
        if reasons.contains(&"ScalingReplicaSet") && reasons.contains(&"SuccessfulCreate") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recorded_list = recording("15-events-core-v1-list.json");
    assert_eq!(list["kind"], recorded_list["kind"]);
    assert_eq!(list["apiVersion"], recorded_list["apiVersion"]);
    let items = list["items"].as_array().unwrap();
    let of_kind = |kind: &str| -> Vec<&Value> {
        items
            .iter()
            .filter(|e| e["involvedObject"]["kind"] == kind)
            .collect()
    };
    let deployment_events = of_kind("Deployment");
    assert_eq!(deployment_events.len(), 1, "{deployment_events:#?}");
    let dep_event = deployment_events[0];
    let rs_events = of_kind("ReplicaSet");
    assert_eq!(rs_events.len(), 1, "{rs_events:#?}");
    let rs_event = rs_events[0];
    // List items carry no kind/apiVersion, as recorded.
    assert_eq!(key_set(dep_event), key_set(&recorded_list["items"][0]));

    // One event read back in core v1, field for field as recorded.
    let name = dep_event["metadata"]["name"].as_str().unwrap().to_string();
    let core = api
        .get(&format!("/api/v1/namespaces/rec-val/events/{name}"))
        .await
        .json();
    assert_core_event_like(&core, &recording("15-event-deployment-core-v1-get.json"));
    assert_event_name(&core, "rec-events");
    assert_eq!(core["involvedObject"]["uid"], dep_uid.as_str());
    assert!(core["involvedObject"]["resourceVersion"].is_string());
    let rs_name = rs_event["involvedObject"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let hash = rs_name.strip_prefix("rec-events-").unwrap();
    assert_eq!(
        core["message"],
        format!("Scaled up replica set rec-events-{hash} from 0 to 1")
    );
    let rs_core = api
        .get(&format!(
            "/api/v1/namespaces/rec-val/events/{}",
            rs_event["metadata"]["name"].as_str().unwrap()
        ))
        .await
        .json();
    assert_core_event_like(&rs_core, &recording("15-event-replicaset-core-v1-get.json"));
    assert_event_name(&rs_core, &rs_name);
    let pods = api
        .get("/api/v1/namespaces/rec-val/pods?labelSelector=app%3Drec-events")
        .await
        .json();
    let pod = pods["items"][0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(rs_core["message"], format!("Created pod: {pod}"));

    // The same object through events.k8s.io/v1: one storage, two views.
    let view = api
        .get(&format!(
            "/apis/events.k8s.io/v1/namespaces/rec-val/events/{name}"
        ))
        .await;
    assert_eq!(view.status, 200);
    let view = view.json();
    let recorded_view = recording("15-event-deployment-events.k8s.io-v1-get.json");
    let keys = key_set;
    assert_eq!(keys(&view), keys(&recorded_view), "{view:#}");
    assert_eq!(view["metadata"], core["metadata"]);
    assert_eq!(view["regarding"], core["involvedObject"]);
    assert_eq!(view["note"], core["message"]);
    assert_eq!(view["reportingController"], core["reportingComponent"]);
    assert_eq!(view["deprecatedSource"], core["source"]);
    assert_eq!(view["deprecatedFirstTimestamp"], core["firstTimestamp"]);
    assert_eq!(view["deprecatedLastTimestamp"], core["lastTimestamp"]);
    assert_eq!(view["deprecatedCount"], core["count"]);
    assert!(view["eventTime"].is_null());
    assert_eq!(view["metadata"]["managedFields"][0]["apiVersion"], "v1");
    let rs_view = api
        .get(&format!(
            "/apis/events.k8s.io/v1/namespaces/rec-val/events/{}",
            rs_event["metadata"]["name"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(
        keys(&rs_view),
        keys(&recording("15-event-replicaset-events.k8s.io-v1-get.json"))
    );
    let view_list = api
        .get("/apis/events.k8s.io/v1/namespaces/rec-val/events")
        .await
        .json();
    let recorded_view_list = recording("15-events-events.k8s.io-v1-list.json");
    assert_eq!(view_list["kind"], recorded_view_list["kind"]);
    assert_eq!(view_list["apiVersion"], recorded_view_list["apiVersion"]);
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let core_now = api.get("/api/v1/namespaces/rec-val/events").await.json();
    assert_eq!(names(&view_list), names(&core_now));

    // Field selectors: involvedObject.* on core v1 (what kubectl describe sends) ...
    let recorded = recording("15-events-core-v1-list-fieldSelector-involvedObject.json");
    let selected = api
        .get(&format!(
            "/api/v1/namespaces/rec-val/events?fieldSelector=involvedObject.name%3Drec-events%2CinvolvedObject.namespace%3Drec-val%2CinvolvedObject.kind%3DDeployment%2CinvolvedObject.uid%3D{dep_uid}&limit=500"
        ))
        .await;
    assert_eq!(selected.status, 200);
    assert_eq!(names(&selected.json()), vec![name.clone()]);
    assert_eq!(
        recorded["items"].as_array().unwrap().len(),
        selected.json()["items"].as_array().unwrap().len()
    );
    // ... regarding.* on events.k8s.io/v1 ...
    let recorded = recording("15-events-events.k8s.io-v1-list-fieldSelector-regarding.json");
    let selected = api
        .get("/apis/events.k8s.io/v1/namespaces/rec-val/events?fieldSelector=regarding.name%3Drec-events%2Cregarding.kind%3DDeployment")
        .await;
    assert_eq!(selected.status, 200);
    let selected = selected.json();
    assert_eq!(names(&selected), vec![name.clone()]);
    assert_eq!(selected["kind"], recorded["kind"]);
    assert_eq!(
        keys(&selected["items"][0]),
        keys(&recorded["items"][0]),
        "list items in the events.k8s.io shape"
    );
    // ... which refuses the core names, as recorded.
    let refused = api
        .get("/apis/events.k8s.io/v1/namespaces/rec-val/events?fieldSelector=involvedObject.name%3Drec-events")
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json(),
        recording("15-error-400-events.k8s.io-v1-fieldSelector-involvedObject.json")
    );
    let refused = api
        .get("/api/v1/namespaces/rec-val/events?fieldSelector=regarding.name%3Drec-events")
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json()["message"],
        "field label not supported: regarding.name"
    );
}

#[tokio::test]
async fn a_repeated_event_keeps_its_name_and_counts() {
    let sim = Sim::start(SimOptions {
        tls: false,
        time_scale: 20.0,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api = Api::new(&sim, 0);
    api.create_namespace("shop").await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "web", "image": "example/web:doesnotexist"}]}});
    let r = api
        .send(
            "POST",
            "/api/v1/namespaces/shop/pods",
            Some(JSON),
            pod.to_string(),
        )
        .await;
    assert_eq!(r.status, 201);
    // ErrImagePull then ImagePullBackOff, alternating: the BackOff event repeats.
    let mut backoff = Value::Null;
    for _ in 0..200 {
        let list = api
            .get("/api/v1/namespaces/shop/events?fieldSelector=involvedObject.name%3Dweb%2Creason%3DBackOff")
            .await
            .json();
        if let Some(e) = list["items"].as_array().unwrap().first()
            && e["count"].as_i64() >= Some(2)
        {
            assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list:#}");
            backoff = e.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(backoff.is_object(), "no repeated BackOff event");
    assert_event_name(&backoff, "web");
    let first: jiff::Timestamp = backoff["firstTimestamp"].as_str().unwrap().parse().unwrap();
    let last: jiff::Timestamp = backoff["lastTimestamp"].as_str().unwrap().parse().unwrap();
    assert!(last >= first);
    assert!(last <= jiff::Timestamp::now());
    assert_eq!(backoff["reportingComponent"], "kubelet");
}

/// Every timestamp in `value` (any string that parses as one), with its path.
fn timestamps(value: &Value, path: &str, out: &mut Vec<(String, jiff::Timestamp)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                timestamps(v, &format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                timestamps(v, &format!("{path}/{i}"), out);
            }
        }
        Value::String(s) => {
            if let Ok(ts) = s.parse::<jiff::Timestamp>() {
                out.push((path.to_string(), ts));
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn no_served_timestamp_is_ahead_of_the_wall_clock_at_time_scale_100() {
    let sim = Sim::start(SimOptions {
        tls: false,
        time_scale: 100.0,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api = Api::new(&sim, 0);
    api.create_namespace("shop").await;
    let deployment = |name: &str, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"replicas": 2, "progressDeadlineSeconds": 60, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": image}]}}}})
    };
    for (name, image) in [
        ("web", "example/web:v1"),
        ("stuck", "example/web:doesnotexist"),
        ("crash", "example/web:crashloop"),
    ] {
        let r = api
            .apply(
                &format!("{}?fieldManager=test", deployment_path("shop", name)),
                &deployment(name, image),
            )
            .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": "shop"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example/job:v1"}]}}}});
    let r = api
        .send(
            "POST",
            "/apis/batch/v1/namespaces/shop/jobs",
            Some(JSON),
            job.to_string(),
        )
        .await;
    assert_eq!(r.status, 201);
    let started = jiff::Timestamp::now();
    // 3 s of real time is 300 simulated seconds: pods Ready, crash loops with restarts, the
    // stuck Deployment past its 60 s progress deadline, the Job complete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut seen = 0;
    for path in [
        "/api/v1/namespaces/shop/pods",
        "/apis/apps/v1/namespaces/shop/deployments",
        "/apis/apps/v1/namespaces/shop/replicasets",
        "/apis/batch/v1/namespaces/shop/jobs",
        "/api/v1/namespaces/shop/events",
        "/apis/events.k8s.io/v1/namespaces/shop/events",
        "/api/v1/nodes",
    ] {
        let body = api.get(path).await.json();
        let now = jiff::Timestamp::now();
        let mut found = Vec::new();
        timestamps(&body, path, &mut found);
        for (at, ts) in found {
            seen += 1;
            assert!(ts <= now, "{at} = {ts} is after the wall clock ({now})");
        }
    }
    assert!(seen > 50, "only {seen} timestamps");
    // The decisions still came in simulated time.
    let stuck = api.get(&deployment_path("shop", "stuck")).await.json();
    let progressing = stuck["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap()
        .clone();
    assert_eq!(
        progressing["reason"], "ProgressDeadlineExceeded",
        "{stuck:#}"
    );
    let flipped: jiff::Timestamp = progressing["lastUpdateTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(flipped >= jiff::Timestamp::from_second(started.as_second()).unwrap());
    let pods = api
        .get("/api/v1/namespaces/shop/pods?labelSelector=app%3Dcrash")
        .await
        .json();
    let restarts = pods["items"][0]["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap();
    assert!(restarts >= 2, "{pods:#}");
    let job = api
        .get("/apis/batch/v1/namespaces/shop/jobs/once")
        .await
        .json();
    assert!(job["status"]["completionTime"].is_string(), "{job:#}");
    // A graceful delete: the deletionTimestamp is when the grace period ends, which at scale
    // 100 is 0.3 s of the 30 s away: ahead of the wall clock by at most that.
    let web = api
        .get("/api/v1/namespaces/shop/pods?labelSelector=app%3Dweb")
        .await
        .json();
    let pod = web["items"][0]["metadata"]["name"].as_str().unwrap();
    let deleted = api
        .send(
            "DELETE",
            &format!("/api/v1/namespaces/shop/pods/{pod}"),
            None,
            Bytes::new(),
        )
        .await;
    assert_eq!(deleted.status, 200);
    let deleted = deleted.json();
    assert_eq!(deleted["metadata"]["deletionGracePeriodSeconds"], 30);
    let at: jiff::Timestamp = deleted["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ahead = at.duration_since(jiff::Timestamp::now());
    assert!(
        ahead <= jiff::SignedDuration::from_millis(300),
        "{ahead:?} ahead"
    );
}

#[tokio::test]
async fn events_k8s_io_writes_and_watches_the_core_events() {
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("shop").await;
    let mut watch = api
        .watch("/apis/events.k8s.io/v1/namespaces/shop/events?watch=true&fieldSelector=regarding.name%3Dweb")
        .await;
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "shop"},
        "eventTime": "2026-12-01T09:37:09.375700Z", "reportingController": "example.com/ci",
        "reportingInstance": "ci-1", "action": "Deploy", "reason": "Deployed", "type": "Normal",
        "regarding": {"kind": "Deployment", "namespace": "shop", "name": "web", "apiVersion": "apps/v1"},
        "note": "deployed by ci"});
    let created = api
        .send(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/shop/events",
            Some(JSON),
            event.to_string(),
        )
        .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let created = created.json();
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "deployed by ci");
    // Stored once: core v1 reads it in its own shape.
    let core = api.get("/api/v1/namespaces/shop/events/web.1").await.json();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "deployed by ci");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["reportingComponent"], "example.com/ci");
    assert_eq!(core["reportingInstance"], "ci-1");
    assert_eq!(core["action"], "Deploy");
    assert_eq!(core["metadata"]["uid"], created["metadata"]["uid"]);
    // The watch on events.k8s.io/v1 sees it in that shape, selected on regarding.*.
    let added = watch.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(added["object"]["regarding"]["name"], "web");
    // A merge patch through events.k8s.io/v1 patches the view.
    let patched = api
        .send(
            "PATCH",
            "/apis/events.k8s.io/v1/namespaces/shop/events/web.1",
            Some(MERGE),
            json!({"note": "deployed again"}).to_string(),
        )
        .await;
    assert_eq!(
        patched.status,
        200,
        "{}",
        String::from_utf8_lossy(&patched.body)
    );
    let core = api.get("/api/v1/namespaces/shop/events/web.1").await.json();
    assert_eq!(core["message"], "deployed again");
    let modified = watch.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["note"], "deployed again");
    let deleted = api
        .send(
            "DELETE",
            "/apis/events.k8s.io/v1/namespaces/shop/events/web.1",
            None,
            Bytes::new(),
        )
        .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        api.get("/api/v1/namespaces/shop/events/web.1").await.status,
        404
    );
    let missing = api
        .get("/apis/events.k8s.io/v1/namespaces/shop/events/web.1")
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json()["message"],
        "events.events.k8s.io \"web.1\" not found"
    );
}

/// The bytes of a binary recording; a recording that cannot be read fails the test.
fn recording_bytes(name: &str) -> Vec<u8> {
    let dir = kube_sim::shared_dir()
        .expect("shared/apiserver-recordings must be beside the repository")
        .join("apiserver-recordings");
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `value` with the object's own uid (which a Job's labels and selector repeat) replaced by
/// `<uid>` wherever it occurs.
fn uid_blanked(value: &Value) -> Value {
    let uid = value["metadata"]["uid"].as_str().unwrap_or("-").to_string();
    let text = value.to_string().replace(&uid, "<uid>");
    serde_json::from_str(&text).unwrap()
}

/// The exact bodies kubectl v1.32 sent for `kubectl create deployment|job|service
/// clusterip` (section 14), POSTed to kube-sim in protobuf: the stored objects read back as
/// JSON as the real server's did (spec, labels, selector, containers, ports, kubectl-create's
/// managed fields), apart from uid, times, resourceVersion and the allocated cluster IP.
#[tokio::test]
async fn kubectl_create_protobuf_bodies_are_stored_as_recorded() {
    let Some(_shared) =
        kube_sim::shared_for_test("kubectl_create_protobuf_bodies_are_stored_as_recorded")
    else {
        return;
    };
    let sim = plain_sim().await;
    let api = Api::new(&sim, 0);
    api.create_namespace("rec-val").await;
    let token = api.token.clone();
    for (collection, name, body, get) in [
        (
            "/apis/apps/v1/namespaces/rec-val/deployments",
            "rec-proto",
            "14-kubectl-create-deployment-request-body.bin",
            "14-kubectl-created-deployment-get.json",
        ),
        (
            "/apis/batch/v1/namespaces/rec-val/jobs",
            "rec-job",
            "14-kubectl-create-job-request-body.bin",
            "14-kubectl-created-job-get.json",
        ),
        (
            "/api/v1/namespaces/rec-val/services",
            "rec-svc",
            "14-kubectl-create-service-clusterip-request-body.bin",
            "14-kubectl-created-service-get.json",
        ),
    ] {
        let created = api
            .send_as(
                "POST",
                &format!("{collection}?fieldManager=kubectl-create&fieldValidation=Strict"),
                Some("application/vnd.kubernetes.protobuf"),
                recording_bytes(body),
                Some(&token),
                "application/vnd.kubernetes.protobuf,application/json",
            )
            .await;
        assert_eq!(
            created.status,
            201,
            "{body}: {}",
            String::from_utf8_lossy(&created.body)
        );
        assert_eq!(created.header("content-type"), JSON);
        let got = api.get(&format!("{collection}/{name}")).await;
        assert_eq!(got.status, 200);
        let (got, recorded) = (uid_blanked(&got.json()), uid_blanked(&recording(get)));
        let (mut spec, mut want) = (got["spec"].clone(), recorded["spec"].clone());
        if name == "rec-svc" {
            // The cluster IP is allocated: present in both, the value differs.
            for key in ["clusterIP", "clusterIPs"] {
                assert!(spec.get(key).is_some(), "{name}: {key} allocated");
                spec[key] = json!("-");
                want[key] = json!("-");
            }
        }
        assert_eq!(spec, want, "{name}: spec as recorded");
        for key in ["name", "namespace", "labels", "generation"] {
            assert_eq!(
                got["metadata"][key], recorded["metadata"][key],
                "{name}: metadata.{key}"
            );
        }
        let by_kubectl = |v: &Value| {
            v["metadata"]["managedFields"]
                .as_array()
                .and_then(|entries| {
                    entries
                        .iter()
                        .find(|e| e["manager"] == "kubectl-create")
                        .cloned()
                })
                .map(|mut e| {
                    e["time"] = json!("-");
                    e
                })
        };
        assert_eq!(
            by_kubectl(&got),
            by_kubectl(&recorded),
            "{name}: kubectl-create's managed fields"
        );
    }
}
