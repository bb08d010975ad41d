//! The real `kubectl` (from PATH) against kube-sim. These tests fail when kubectl is
//! missing: kubectl is the judge of whether the simulator is honest enough.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_sim::{Sim, SimOptions};
use serde_json::Value;

struct Kubectl {
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(sim: &Sim) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        Kubectl {
            kubeconfig,
            _dir: dir,
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            // Keep kubectl's discovery cache out of the user's home.
            .env("KUBECACHEDIR", self._dir.path().join("cache"))
            .env("HOME", self._dir.path())
            .args(args)
            .output()
            .await
            .expect("kubectl must be on PATH for these tests");
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {args:?} failed:\n{}\n{}",
            out.stdout, out.stderr
        );
        out.stdout
    }
}

fn corpus_file() -> PathBuf {
    kube_sim::shared_dir()
        .expect("shared/ must be beside the repository")
        .join("corpus/microservices-demo/release/kubernetes-manifests.yaml")
}

/// `kind/name` of every document in a manifest file.
fn kinds_in(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.is_object())
        .map(|v| {
            (
                v["kind"].as_str().unwrap_or_default().to_string(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

fn kubectl_present() {
    let found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "kubectl must be on PATH: these tests run the real kubectl"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_delete_microservices_demo() {
    let Some(_shared) = kube_sim::shared_for_test("kubectl_apply_get_delete_microservices_demo")
    else {
        return;
    };
    kubectl_present();
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let kubectl = Kubectl::new(&sim);
    let file = corpus_file();
    let file = file.to_str().unwrap();
    let objects = kinds_in(Path::new(file));
    let deployments: Vec<&String> = objects
        .iter()
        .filter(|(k, _)| k == "Deployment")
        .map(|(_, n)| n)
        .collect();
    assert!(deployments.len() >= 10);

    let out = kubectl
        .ok(&["apply", "--server-side", "--validate=false", "-f", file])
        .await;
    for (kind, name) in &objects {
        let line = format!("{}/{} serverside-applied", kind.to_lowercase(), name);
        let line = line.replace("deployment/", "deployment.apps/");
        assert!(out.contains(&line), "missing {line:?} in:\n{out}");
    }

    // Applying again (with kubectl's default validation, which reads OpenAPI v3) changes
    // nothing.
    let before = sim.clusters()[0].store().resource_version();
    sim.clusters()[0].reset_counters();
    kubectl.ok(&["apply", "--server-side", "-f", file]).await;
    let counters = sim.clusters()[0].counters();
    assert_eq!(counters.verb("apply") as usize, objects.len());

    let json: Value =
        serde_json::from_str(&kubectl.ok(&["get", "deploy", "-o", "json"]).await).unwrap();
    assert_eq!(json["kind"], "List");
    let items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), deployments.len());
    for d in items {
        assert_eq!(d["kind"], "Deployment");
        assert_eq!(
            d["metadata"]["generation"], 1,
            "re-apply must not bump generation"
        );
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert!(deployments.contains(&&d["metadata"]["name"].as_str().unwrap().to_string()));
    }
    assert!(sim.clusters()[0].store().resource_version() >= before);

    // Pods appear (controllers) and kubectl prints them as a table.
    let mut pods = String::new();
    for _ in 0..100 {
        pods = kubectl.ok(&["get", "pods"]).await;
        if pods.lines().count() > deployments.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let header = pods.lines().next().unwrap_or_default();
    for column in ["NAME", "READY", "STATUS", "RESTARTS", "AGE"] {
        assert!(header.contains(column), "{header}");
    }
    assert!(pods.lines().count() > deployments.len(), "{pods}");
    assert!(pods.contains("frontend-"), "{pods}");

    let out = kubectl.ok(&["delete", "-f", file]).await;
    assert!(
        out.contains("deployment.apps \"frontend\" deleted"),
        "{out}"
    );
    let left = kubectl.ok(&["get", "deploy", "-o", "json"]).await;
    let left: Value = serde_json::from_str(&left).unwrap();
    assert_eq!(left["items"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_errors_and_discovery() {
    kubectl_present();
    let sim = Sim::start(SimOptions {
        clusters: 2,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let kubectl = Kubectl::new(&sim);
    let out = kubectl
        .ok(&["--context", "sim-2", "api-resources", "--api-group=apps"])
        .await;
    assert!(
        out.contains("deployments") && out.contains("deploy"),
        "{out}"
    );
    let out = kubectl.run(&["get", "deploy", "nope"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("deployments.apps \"nope\" not found"),
        "{}",
        out.stderr
    );
    let out = kubectl.ok(&["get", "ns"]).await;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(out.contains(ns), "{out}");
    }
    // Imperative creates send protobuf bodies (Namespace, ConfigMap, Secret).
    kubectl.ok(&["create", "namespace", "demo"]).await;
    kubectl
        .ok(&[
            "-n",
            "demo",
            "create",
            "configmap",
            "c",
            "--from-literal=a=b",
        ])
        .await;
    kubectl
        .ok(&[
            "-n",
            "demo",
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=p=q",
        ])
        .await;
    let data = kubectl
        .ok(&[
            "-n",
            "demo",
            "get",
            "configmap",
            "c",
            "-o",
            "jsonpath={.data.a}",
        ])
        .await;
    assert_eq!(data, "b");
    let secret = kubectl
        .ok(&[
            "-n",
            "demo",
            "get",
            "secret",
            "s",
            "-o",
            "jsonpath={.type} {.data.p}",
        ])
        .await;
    assert_eq!(secret, "Opaque cQ==");
    kubectl.ok(&["delete", "namespace", "demo"]).await;

    // `kubectl get -w` asks for Tables in the watch too: rows with the kind's columns.
    let mut watch = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubectl.kubeconfig)
        .env("HOME", kubectl._dir.path())
        .args(["get", "configmaps", "-w"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kubectl
        .ok(&["create", "configmap", "watched", "--from-literal=a=b"])
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    watch.start_kill().unwrap();
    let out = watch.wait_with_output().await.unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let row = printed
        .lines()
        .find(|l| l.starts_with("watched"))
        .unwrap_or_else(|| panic!("no row for the new ConfigMap in:\n{printed}"));
    assert_eq!(
        row.split_whitespace().nth(1),
        Some("1"),
        "DATA column: {row}"
    );

    // A wrong token is refused.
    let broken = std::fs::read_to_string(&kubectl.kubeconfig)
        .unwrap()
        .replace(sim.clusters()[0].token(), "wrong");
    std::fs::write(&kubectl.kubeconfig, broken).unwrap();
    let out = kubectl.run(&["get", "ns"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Unauthorized") || out.stderr.contains("unauthorized"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_told_of_fields_the_kind_does_not_declare() {
    let Some(_shared) =
        kube_sim::shared_for_test("kubectl_is_told_of_fields_the_kind_does_not_declare")
    else {
        return;
    };
    kubectl_present();
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let kubectl = Kubectl::new(&sim);
    let redis = std::fs::read_to_string(
        kube_sim::shared_dir()
            .expect("shared/ must be beside the repository")
            .join("corpus/example-voting-app/k8s-specifications/redis-deployment.yaml"),
    )
    .unwrap();
    let misspelt = redis.replace(
        "      - image: redis:alpine\n",
        "      - image: redis:alpine\n        imagePullPolice: Always\n",
    );
    assert_ne!(misspelt, redis, "the corpus file changed: fix this test");
    let file = kubectl._dir.path().join("redis.yaml");
    std::fs::write(&file, misspelt).unwrap();
    let file = file.to_str().unwrap();

    // kubectl validates strictly by default: the server refuses the create.
    let strict = kubectl.run(&["create", "-f", file]).await;
    assert!(!strict.ok, "{}", strict.stdout);
    assert!(
        strict.stderr.contains(
            "strict decoding error: unknown field \"spec.template.spec.containers[0].imagePullPolice\""
        ),
        "{}",
        strict.stderr
    );
    // Server-side apply names the field by the container's key.
    let ssa = kubectl.run(&["apply", "--server-side", "-f", file]).await;
    assert!(!ssa.ok, "{}", ssa.stdout);
    assert!(
        ssa.stderr.contains(
            ".spec.template.spec.containers[name=\"redis\"].imagePullPolice: field not declared in schema"
        ),
        "{}",
        ssa.stderr
    );
    // With --validate=warn the object is created without the field, and kubectl says so.
    let warned = kubectl
        .run(&["create", "--validate=warn", "-f", file])
        .await;
    assert!(warned.ok, "{}", warned.stderr);
    assert!(
        warned
            .stderr
            .contains("unknown field \"spec.template.spec.containers[0].imagePullPolice\""),
        "{}",
        warned.stderr
    );
    let policy = kubectl
        .ok(&[
            "get",
            "deploy",
            "redis",
            "-o",
            "jsonpath={.spec.template.spec.containers[0]}",
        ])
        .await;
    assert!(!policy.contains("imagePullPolice"), "{policy}");
}

/// Each class of what kube-sim now refuses or serves, proven with the real kubectl: the
/// object is applied, then the forbidden change, and kubectl's exit code and message are
/// what a real cluster gives.
#[tokio::test]
async fn kubectl_sees_what_a_real_server_refuses() {
    kubectl_present();
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let kubectl = Kubectl::new(&sim);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };

    // Groups it did not serve before: a webhook configuration is stored (and has no effect).
    let out = kubectl
        .ok(&["api-resources", "--api-group=admissionregistration.k8s.io"])
        .await;
    assert!(out.contains("validatingwebhookconfigurations"), "{out}");
    let webhook = write(
        "webhook.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata:\n  name: check\nwebhooks:\n- name: check.example.io\n  clientConfig:\n    \
         service: {namespace: default, name: nope, path: /validate}\n  rules:\n  - \
         {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}\n  \
         sideEffects: None\n  admissionReviewVersions: [v1]\n",
    );
    kubectl.ok(&["apply", "-f", &webhook]).await;
    let out = kubectl
        .ok(&[
            "get",
            "validatingwebhookconfigurations",
            "check",
            "-o",
            "jsonpath={.webhooks[0].timeoutSeconds}",
        ])
        .await;
    assert_eq!(out, "10", "the server's default");

    // An immutable field: the selector of a Deployment.
    let deployment = |labels: &str, replicas: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n\
             spec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {labels}\n  template:\n    \
             metadata:\n      labels: {labels}\n    spec:\n      containers:\n      - name: web\n        \
             image: web:v1\n"
        )
    };
    let first = write("web.yaml", &deployment("{app: web}", "1"));
    kubectl.ok(&["apply", "--server-side", "-f", &first]).await;
    let changed = write("web-tier.yaml", &deployment("{app: web, tier: fe}", "1"));
    for extra in [&["--server-side", "--force-conflicts"][..], &[][..]] {
        let mut args = vec!["apply", "-f", changed.as_str()];
        args.extend_from_slice(extra);
        let out = kubectl.run(&args).await;
        assert!(!out.ok, "{args:?} must fail");
        assert!(
            out.stderr.contains(
                "The Deployment \"web\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"tier\":\"fe\"}}: field is immutable"
            ),
            "{args:?}: {}",
            out.stderr
        );
    }

    // A value of the wrong type.
    let typed = write("web-typed.yaml", &deployment("{app: web}", "\"2\""));
    let out = kubectl.run(&["apply", "--server-side", "-f", &typed]).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains(".spec.replicas: expected numeric (int or float), got string"),
        "{}",
        out.stderr
    );

    // Secret data that is not base64.
    let secret = write(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: default\n\
         data:\n  password: REPLACE_ME_NOT_BASE64!\n",
    );
    let out = kubectl.run(&["create", "-f", &secret]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("illegal base64 data at input byte 7"),
        "{}",
        out.stderr
    );

    // A ConfigMap over the 1 MiB limit.
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  namespace: default\n\
         data:\n  blob: {}\n",
        "x".repeat(1024 * 1024 + 1)
    );
    let big = write("big.yaml", &big);
    let out = kubectl.run(&["create", "-f", &big]).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("Too long: may not be more than 1048576 bytes"),
        "{}",
        out.stderr
    );
    kubectl.ok(&["get", "deployment", "web"]).await;
}

/// An age as kubectl prints it (`3s`, `2m5s`, `5m`) in seconds; None for anything else
/// (`<invalid>`, `<unknown>`).
fn age_seconds(age: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut digits = String::new();
    for c in age.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return None,
        };
    }
    digits.is_empty().then_some(total)
}

#[test]
fn ages_are_read_as_kubectl_prints_them() {
    assert_eq!(age_seconds("3s"), Some(3));
    assert_eq!(age_seconds("2m5s"), Some(125));
    assert_eq!(age_seconds("5m"), Some(300));
    assert_eq!(age_seconds("<invalid>"), None);
}

/// The AGE (last column; for events LAST SEEN, the first) of every row of a `kubectl get`
/// table, with the row.
fn ages(table: &str, first_column: bool) -> Vec<(String, String)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let age = if first_column {
                cols.first()?
            } else {
                cols.last()?
            };
            Some((line.to_string(), age.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_real_ages_and_events_at_time_scale_100() {
    kubectl_present();
    let sim = Sim::start(SimOptions {
        time_scale: 100.0,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let kubectl = Kubectl::new(&sim);
    let file = kubectl._dir.path().join("web.yaml");
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n\
         spec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n  template:\n    \
         metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        \
         image: example/web:v1\n",
    )
    .unwrap();
    kubectl.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let created = std::time::Instant::now();
    // 3 s of real time: 300 simulated seconds, which a simulated timestamp would show as 5m.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut checked = 0;
    for args in [
        vec!["get", "pods"],
        vec!["get", "deploy"],
        vec!["get", "rs"],
        // kubectl's own printing: it computes ages from the timestamps with its clock.
        vec!["get", "pods", "--server-print=false"],
        vec!["get", "deploy", "--server-print=false"],
        vec!["get", "events"],
    ] {
        let out = kubectl.ok(&args).await;
        let real = created.elapsed().as_secs() + 1;
        let rows = ages(&out, args[1] == "events");
        assert!(!rows.is_empty(), "{args:?}: {out}");
        for (name, age) in rows {
            let secs = age_seconds(&age)
                .unwrap_or_else(|| panic!("{args:?}: {name} is {age} old:\n{out}"));
            assert!(
                secs <= real,
                "{args:?}: {name} is {age} old after {real} s:\n{out}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8);

    // kubectl describe lists the Deployment's events (it selects them on involvedObject.*),
    // with real ages.
    let out = kubectl.ok(&["describe", "deployment", "web"]).await;
    let events = out
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{out}"));
    let line = events
        .lines()
        .find(|l| l.contains("ScalingReplicaSet"))
        .unwrap_or_else(|| panic!("no ScalingReplicaSet event:\n{out}"));
    assert!(line.contains("deployment-controller"), "{line}");
    assert!(
        line.contains("Scaled up replica set web-") && line.contains(" from 0 to 2"),
        "{line}"
    );
    assert!(!out.contains("<invalid>"), "{out}");
    let age = line.split_whitespace().nth(2).unwrap();
    assert!(
        age_seconds(age).is_some_and(|s| s <= created.elapsed().as_secs() + 1),
        "{line}"
    );
    let out = kubectl.ok(&["describe", "pods"]).await;
    assert!(!out.contains("<invalid>"), "{out}");
    assert!(out.contains("Started container web"), "{out}");
}

/// A scripted registry (`times`, `message`) reads in `kubectl describe pod` as a real
/// kubelet's would: the pull error in the `Failed` event, the back-off, then the retry that
/// pulls and starts the container; the built-in `doesnotexist` keeps containerd's NotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_scripted_pull_errors() {
    kubectl_present();
    const E503: &str = "failed to pull and unpack image \"docker.io/example/web:v2\": failed to resolve reference \"docker.io/example/web:v2\": pulling from host docker.io failed with status code [manifests v2]: 503 Service Unavailable";
    // At time scale 10 each pull's ErrImagePull lasts 200 ms: long enough for the kubelet
    // stand-in to write it (and its events) on a busy machine.
    let sim = Sim::start(SimOptions {
        time_scale: 10.0,
        rules: kube_sim::rules::parse(&format!(
            "- {{image: \"example/web:v2\", behaviour: ImagePullBackOff, times: 1, message: {}}}\n",
            serde_json::to_string(E503).unwrap()
        ))
        .unwrap(),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let kubectl = Kubectl::new(&sim);
    for (name, image) in [
        ("flaky", "example/web:v2"),
        ("gone", "example/doesnotexist:v1"),
    ] {
        kubectl
            .ok(&["run", name, "--image", image, "--restart", "Always"])
            .await;
    }
    // One failed pull, a 10 s back-off, a pull that works: ~13 simulated seconds.
    let mut running = false;
    for _ in 0..200 {
        let phase = kubectl
            .ok(&["get", "pod", "flaky", "-o", "jsonpath={.status.phase}"])
            .await;
        if phase == "Running" {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running, "the scripted pod never started");
    let out = kubectl.ok(&["describe", "pod", "flaky"]).await;
    let events = out.split("Events:").nth(1).unwrap_or_default();
    for want in [
        format!("Failed to pull image \"example/web:v2\": {E503}"),
        "Error: ErrImagePull".to_string(),
        "Back-off pulling image \"example/web:v2\"".to_string(),
        "Successfully pulled image \"example/web:v2\"".to_string(),
        "Started container flaky".to_string(),
    ] {
        // kubectl wraps nothing in the Events table; the message sits on one line.
        assert!(events.contains(&want), "{want:?} not in:\n{out}");
    }
    assert!(out.contains("State:          Running"), "{out}");
    let out = kubectl.ok(&["describe", "pod", "gone"]).await;
    assert!(
        out.contains("Reason:       ErrImagePull")
            || out.contains("Reason:       ImagePullBackOff"),
        "{out}"
    );
    assert!(
        out.contains("rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/example/doesnotexist:v1\""),
        "{out}"
    );
}

/// Every typed `kubectl create` sends its object in protobuf (kubectl's -v=8 log shows the
/// Content-Type): each is accepted, kubectl says what it created, and `kubectl get -o json`
/// reads back what the command line said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_of_each_kind_goes_through_protobuf() {
    kubectl_present();
    let sim = Sim::start(SimOptions::default()).await.unwrap();
    let kubectl = Kubectl::new(&sim);
    kubectl.ok(&["create", "namespace", "p"]).await;
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "deployment",
                "web",
                "--image=example/web:v1",
                "--replicas=0",
                "--port=8080",
            ],
            "deployment.apps/web created",
        ),
        (
            &["job", "j", "--image=example/job:v1", "--", "date", "-u"],
            "job.batch/j created",
        ),
        (
            &[
                "cronjob",
                "c",
                "--image=example/job:v1",
                "--schedule=*/5 * * * *",
                "--restart=OnFailure",
            ],
            "cronjob.batch/c created",
        ),
        (
            &["service", "clusterip", "s", "--tcp=80:8080"],
            "service/s created",
        ),
        (
            &["service", "nodeport", "np", "--tcp=443:https"],
            "service/np created",
        ),
        (
            &[
                "role",
                "r",
                "--verb=get,list",
                "--resource=pods,deployments.apps",
            ],
            "role.rbac.authorization.k8s.io/r created",
        ),
        (
            &[
                "rolebinding",
                "rb",
                "--role=r",
                "--user=alice",
                "--serviceaccount=p:default",
            ],
            "rolebinding.rbac.authorization.k8s.io/rb created",
        ),
        (
            &[
                "clusterrole",
                "cr",
                "--verb=get",
                "--non-resource-url=/healthz",
            ],
            "clusterrole.rbac.authorization.k8s.io/cr created",
        ),
        (
            &[
                "clusterrole",
                "agg",
                "--aggregation-rule=rbac.example.com/aggregate=true",
            ],
            "clusterrole.rbac.authorization.k8s.io/agg created",
        ),
        (
            &[
                "clusterrolebinding",
                "crb",
                "--clusterrole=cr",
                "--group=devs",
            ],
            "clusterrolebinding.rbac.authorization.k8s.io/crb created",
        ),
        (
            &[
                "priorityclass",
                "high",
                "--value=1000",
                "--description=important",
            ],
            "priorityclass.scheduling.k8s.io/high created",
        ),
        (
            &[
                "poddisruptionbudget",
                "pdb",
                "--selector=app=web",
                "--min-available=50%",
            ],
            "poddisruptionbudget.policy/pdb created",
        ),
        (
            &[
                "ingress",
                "ing",
                "--class=nginx",
                "--rule=foo.com/bar*=s:80,tls=cert",
                "--annotation=a=b",
            ],
            "ingress.networking.k8s.io/ing created",
        ),
        (
            &[
                "quota",
                "q",
                "--hard=cpu=1,memory=1Gi,pods=10",
                "--scopes=NotBestEffort",
            ],
            "resourcequota/q created",
        ),
        (&["serviceaccount", "sa"], "serviceaccount/sa created"),
        (
            &["configmap", "cm", "--from-literal=k=v"],
            "configmap/cm created",
        ),
        (
            &["secret", "generic", "sec", "--from-literal=p=q"],
            "secret/sec created",
        ),
    ];
    for (args, said) in cases {
        let mut all = vec!["-n", "p", "-v=8", "create"];
        all.extend_from_slice(args);
        let out = kubectl.run(&all).await;
        assert!(
            out.ok,
            "kubectl create {args:?} failed:\n{}\n{}",
            out.stdout, out.stderr
        );
        assert_eq!(out.stdout.trim(), *said, "kubectl create {args:?}");
        assert!(
            out.stderr
                .contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "kubectl create {args:?} did not send protobuf:\n{}",
            out.stderr
        );
    }
    let get = |kind: &'static str, name: &'static str| {
        let kubectl = &kubectl;
        async move {
            let text = kubectl
                .ok(&["-n", "p", "get", kind, name, "-o", "json"])
                .await;
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let d = get("deployment", "web").await;
    assert_eq!(d["spec"]["replicas"], 0, "--replicas=0 is kept");
    assert_eq!(d["metadata"]["labels"]["app"], "web");
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "web");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "web");
    assert_eq!(c["image"], "example/web:v1");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");

    let j = get("job", "j").await;
    let c = &j["spec"]["template"]["spec"];
    assert_eq!(c["restartPolicy"], "Never");
    assert_eq!(c["containers"][0]["name"], "j");
    assert_eq!(
        c["containers"][0]["command"],
        serde_json::json!(["date", "-u"])
    );

    // A Job made from the CronJob carries an owner reference and an annotation.
    let out = kubectl
        .ok(&["-n", "p", "create", "job", "from-c", "--from=cronjob/c"])
        .await;
    assert_eq!(out.trim(), "job.batch/from-c created");
    let from = get("job", "from-c").await;
    assert_eq!(from["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert_eq!(from["metadata"]["ownerReferences"][0]["name"], "c");
    assert_eq!(
        from["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );

    let cj = get("cronjob", "c").await;
    assert_eq!(cj["spec"]["schedule"], "*/5 * * * *");
    let t = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(t["restartPolicy"], "OnFailure");
    assert_eq!(t["containers"][0]["image"], "example/job:v1");

    let s = get("service", "s").await;
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(
        s["spec"]["ports"][0],
        serde_json::json!({"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080})
    );
    assert_eq!(s["spec"]["selector"]["app"], "s");
    let np = get("service", "np").await;
    assert_eq!(np["spec"]["type"], "NodePort");
    assert_eq!(
        np["spec"]["ports"][0]["targetPort"], "https",
        "a named target port"
    );

    let r = get("role", "r").await;
    assert_eq!(r["rules"][0]["verbs"], serde_json::json!(["get", "list"]));
    let resources: Vec<String> = r["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| {
            let groups = rule["apiGroups"].as_array().cloned().unwrap_or_default();
            let names = rule["resources"].as_array().cloned().unwrap_or_default();
            groups.into_iter().flat_map(move |g| {
                names.clone().into_iter().map(move |n| {
                    format!("{}/{}", g.as_str().unwrap_or(""), n.as_str().unwrap_or(""))
                })
            })
        })
        .collect();
    assert!(
        resources.contains(&"/pods".to_string())
            && resources.contains(&"apps/deployments".to_string()),
        "{resources:?}"
    );
    let rb = get("rolebinding", "rb").await;
    assert_eq!(
        rb["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"})
    );
    let subjects = rb["subjects"].as_array().unwrap();
    assert!(
        subjects
            .iter()
            .any(|s| s["kind"] == "User" && s["name"] == "alice")
    );
    assert!(
        subjects.iter().any(|s| s["kind"] == "ServiceAccount"
            && s["name"] == "default"
            && s["namespace"] == "p")
    );

    let cr = get("clusterrole", "cr").await;
    assert_eq!(
        cr["rules"][0]["nonResourceURLs"],
        serde_json::json!(["/healthz"])
    );
    let agg = get("clusterrole", "agg").await;
    assert_eq!(
        agg["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.example.com/aggregate"],
        "true"
    );
    let crb = get("clusterrolebinding", "crb").await;
    assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb["subjects"][0]["kind"], "Group");
    assert_eq!(crb["subjects"][0]["name"], "devs");

    let pc = get("priorityclass", "high").await;
    assert_eq!(pc["value"], 1000);
    assert_eq!(pc["description"], "important");
    assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");

    let pdb = get("poddisruptionbudget", "pdb").await;
    assert_eq!(pdb["spec"]["minAvailable"], "50%");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app"], "web");

    let ing = get("ingress", "ing").await;
    assert_eq!(ing["metadata"]["annotations"]["a"], "b");
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");
    let rule = &ing["spec"]["rules"][0];
    assert_eq!(rule["host"], "foo.com");
    let path = &rule["http"]["paths"][0];
    assert_eq!(path["path"], "/bar");
    assert_eq!(path["pathType"], "Prefix");
    assert_eq!(
        path["backend"],
        serde_json::json!({"service": {"name": "s", "port": {"number": 80}}})
    );
    assert_eq!(
        ing["spec"]["tls"][0],
        serde_json::json!({"hosts": ["foo.com"], "secretName": "cert"})
    );

    let q = get("quota", "q").await;
    assert_eq!(
        q["spec"]["hard"],
        serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "10"})
    );
    assert_eq!(q["spec"]["scopes"], serde_json::json!(["NotBestEffort"]));

    let sec = get("secret", "sec").await;
    assert_eq!(sec["data"]["p"], "cQ==");
    assert_eq!(get("configmap", "cm").await["data"]["k"], "v");
    assert_eq!(get("serviceaccount", "sa").await["metadata"]["name"], "sa");
}

/// `kubectl logs` reads what the simulated kubelet's containers wrote: a rule's lines for a
/// crash-looping container (its restart count among them), `--previous` and `--tail`, and
/// the real server's 400 for a container that never started or has no previous instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_the_kubelets_containers() {
    kubectl_present();
    // At time scale 2 the back-off after the second run lasts 5 real seconds: the pod
    // stays in it while kubectl reads.
    let sim = Sim::start(SimOptions {
        time_scale: 2.0,
        rules: kube_sim::rules::parse(
            "- {image: \"example/crash:v1\", behaviour: CrashLoopBackOff, exit_code: 3, \
             logs: [\"boot {restart}\", \"config loaded\", \"panic: boom\"]}\n",
        )
        .unwrap(),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let kubectl = Kubectl::new(&sim);
    for (name, image) in [
        ("crashy", "example/crash:v1"),
        ("gone", "example/doesnotexist:v1"),
        ("fine", "example/web:v1"),
    ] {
        kubectl
            .ok(&["run", name, "--image", image, "--restart", "Always"])
            .await;
    }
    let state = "jsonpath={.status.containerStatuses[0].restartCount} \
                 {.status.containerStatuses[0].state.waiting.reason} \
                 {.status.containerStatuses[0].lastState.terminated.exitCode}";
    let mut backing_off = false;
    for _ in 0..300 {
        let out = kubectl.ok(&["get", "pod", "crashy", "-o", state]).await;
        if out.trim() == "1 CrashLoopBackOff 3" {
            backing_off = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        backing_off,
        "the crashing pod never backed off after its second run"
    );
    let previous = kubectl.ok(&["logs", "crashy", "--previous"]).await;
    assert_eq!(previous, "boot 1\nconfig loaded\npanic: boom\n");
    // No new container yet: the current log is the one that just exited, as on a kubelet.
    assert_eq!(kubectl.ok(&["logs", "crashy"]).await, previous);
    assert_eq!(
        kubectl.ok(&["logs", "crashy", "--tail", "1"]).await,
        "panic: boom\n"
    );
    let stamped = kubectl.ok(&["logs", "crashy", "--timestamps"]).await;
    assert!(
        stamped.lines().all(|l| l
            .split_once(' ')
            .is_some_and(|(at, _)| at.parse::<jiff::Timestamp>().is_ok())),
        "{stamped}"
    );

    let mut refused = false;
    for _ in 0..100 {
        let out = kubectl.run(&["logs", "gone"]).await;
        if out.stderr.contains("is waiting to start: ") {
            assert!(!out.ok);
            assert!(
                out.stderr.contains(
                    "Error from server (BadRequest): container \"gone\" in pod \"gone\" is waiting to start: "
                ),
                "{}",
                out.stderr
            );
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "a container that never started must be refused");
    let out = kubectl.run(&["logs", "fine", "--previous"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "Error from server (BadRequest): previous terminated container \"fine\" in pod \"fine\" not found"
        ),
        "{}",
        out.stderr
    );
}
