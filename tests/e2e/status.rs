//! `rollguard status` and `status --drift` (issue 24), end to end: three kube-sim clusters on
//! two commits, one of them down; a `kubectl scale` and a deleted ConfigMap as drift.

use serde_json::Value;

use crate::harness::{Run, TestEnv, config, create, git, small_app};

const V1: &str = "example.com/web:v1";
const V2: &str = "example.com/web:v2";

/// `kubectl --kubeconfig <env's> --context sim-N` plus `args`; its stdout.
async fn kubectl(env: &TestEnv, cluster: usize, args: &[&str]) -> String {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--context")
        .arg(format!("sim-{cluster}"))
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of the status table that starts with `target`.
fn row<'a>(run: &'a Run, target: &str) -> &'a str {
    run.stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{target} ")))
        .unwrap_or_else(|| panic!("no row of {target}:\n{}", run.output()))
}

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("status -o json is JSON ({e}):\n{}", run.output()))
}

/// Commits the manifests in the scratch folder (a git repository) and returns the sha.
fn commit(env: &TestEnv, image: &str, subject: &str) -> String {
    env.write("k8s/app.yaml", &small_app(image));
    git(env.dir.path(), &["add", "rollguard.yaml", "k8s"]);
    git(env.dir.path(), &["commit", "-q", "-m", subject]);
    git(env.dir.path(), &["rev-parse", "HEAD"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_mixed_fleet_then_one_commit_then_a_cluster_down() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    git(env.dir.path(), &["init", "-q"]);
    let first = commit(&env, V1, "first release");
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let second = commit(&env, V2, "second release");
    let run = env.deploy(&["--target", "ap"]).await;
    assert_eq!(run.code, 0, "{}", run.output());

    let status = env.command("status", &[]).await;
    assert_eq!(status.code, 1, "two commits: {}", status.output());
    let mixed = format!(
        "2 versions across 3 targets: {} on eu, us; {} on ap",
        &first[..7],
        &second[..7]
    );
    assert_eq!(
        status.stdout.lines().next(),
        Some(mixed.as_str()),
        "{}",
        status.output()
    );
    for (target, sha, subject) in [
        ("eu", &first, "first release"),
        ("us", &first, "first release"),
        ("ap", &second, "second release"),
    ] {
        let line = row(&status, target);
        assert!(
            line.contains(&format!("{} {subject}", &sha[..7]))
                && line.contains("deployed")
                && line.contains("free")
                && line.ends_with("healthy"),
            "{target}: {line}\n{}",
            status.output()
        );
    }

    let as_json = env.command("status", &["-o", "json"]).await;
    assert_eq!(as_json.code, 1, "{}", as_json.output());
    let doc = json(&as_json);
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["app"], "shop");
    assert_eq!(doc["mixed"], mixed.as_str());
    assert_eq!(doc["exit_code"], 1);
    let targets = doc["targets"].as_array().expect("targets");
    let names: Vec<&str> = targets
        .iter()
        .filter_map(|t| t["target"].as_str())
        .collect();
    assert_eq!(names, ["eu", "us", "ap"], "the config's order");
    for t in targets {
        assert_eq!(t["reachable"], true, "{t:#}");
        assert_eq!(t["status"], "deployed", "{t:#}");
        assert_eq!(t["on_last_good"], true, "{t:#}");
        assert_eq!(t["lock"], Value::Null, "{t:#}");
        assert_eq!(t["health"]["verdict"], "healthy", "{t:#}");
        assert!(t["deployed_at"].is_string() && t["deployed_by"].is_string());
        assert!(
            t["health"]["objects"].as_array().is_some_and(|o| o
                .iter()
                .any(|o| o["object"] == "Deployment shop/web" && o["status"] == "Current")),
            "{t:#}"
        );
        assert_eq!(t["drift"], Value::Null, "no --drift: {t:#}");
    }
    assert_eq!(targets[2]["commit"]["sha"], second.as_str());
    assert_eq!(targets[0]["commit"]["message"], "first release");

    // The same commit everywhere: exit 0, no mixed line.
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let status = env.command("status", &[]).await;
    assert_eq!(status.code, 0, "{}", status.output());
    assert!(
        !status.stdout.contains("versions across"),
        "{}",
        status.output()
    );
    assert!(
        status
            .stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("TARGET"))
    );

    // A lock a run left behind: who holds it, since when, and that it expired.
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "rollguard-shop"},
        "spec": {
            "holderIdentity": "ci#42@runner:7",
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:10.000000Z",
            "leaseDurationSeconds": 30
        }
    });
    let client = env.client(1).await;
    create(
        &client,
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        "shop",
        lease,
    )
    .await;
    let locked = env.command("status", &["-o", "json"]).await;
    let lock = &json(&locked)["targets"][0]["lock"];
    assert_eq!(lock["holder"], "ci#42@runner:7", "{}", locked.output());
    assert_eq!(lock["expired"], true, "{}", locked.output());
    let locked = env.command("status", &[]).await;
    assert!(
        row(&locked, "eu").contains("expired (ci#42@runner:7 since 2026-01-01 00:00Z)"),
        "{}",
        locked.output()
    );

    // One cluster down: its row says why, the others are shown, exit 1.
    env.cluster(3).set_down(true);
    let status = env.command("status", &["--timeout", "20s"]).await;
    assert_eq!(status.code, 1, "{}", status.output());
    let down = row(&status, "ap");
    assert!(
        down.contains("unreachable: ConnectionRefused"),
        "{down}\n{}",
        status.output()
    );
    assert!(
        status.stderr.contains(&format!(
            "target ap: unreachable: ConnectionRefused: connection to {}",
            env.cluster(3).url()
        )),
        "{}",
        status.output()
    );
    for target in ["eu", "us"] {
        assert!(
            row(&status, target).contains(&second[..7]),
            "{}",
            status.output()
        );
    }
    let doc = json(&env.command("status", &["-o", "yaml"]).await.with_yaml());
    assert_eq!(doc["targets"][2]["reachable"], false, "{doc:#}");
    assert!(
        doc["targets"][2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "{doc:#}"
    );
}

trait YamlRun {
    /// The run with its YAML stdout rewritten as JSON (for [`json`]).
    fn with_yaml(self) -> Run;
}

impl YamlRun for Run {
    fn with_yaml(mut self) -> Run {
        let value: Value = serde_saphyr::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("status -o yaml is YAML ({e}):\n{}", self.output()));
        self.stdout = value.to_string();
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_drift_lists_a_scaled_deployment_and_a_deleted_configmap() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: hunter2-in-the-manifest\n---\n";
    env.write("k8s/app.yaml", &format!("{secret}{}", small_app(V1)));
    let run = env.deploy(&["--commit", "0123456789abcdef0123"]).await;
    assert_eq!(run.code, 0, "{}", run.output());

    // Right after a deploy nothing has drifted.
    let clean = env.command("status", &["--drift"]).await;
    assert_eq!(clean.code, 0, "{}", clean.output());
    assert!(
        row(&clean, "eu").ends_with("none") && row(&clean, "us").ends_with("none"),
        "{}",
        clean.output()
    );

    // Someone else's hands: kubectl scale on eu, a deleted ConfigMap and a Secret changed on us.
    kubectl(
        &env,
        1,
        &["-n", "shop", "scale", "deployment/web", "--replicas=3"],
    )
    .await;
    kubectl(
        &env,
        2,
        &["-n", "shop", "delete", "configmap", "web-config"],
    )
    .await;
    kubectl(
        &env,
        2,
        &[
            "-n",
            "shop",
            "patch",
            "secret",
            "db",
            "-p",
            r#"{"stringData":{"password":"changed-by-hand"}}"#,
        ],
    )
    .await;

    let drift = env.command("status", &["--drift"]).await;
    assert_eq!(drift.code, 1, "{}", drift.output());
    let out = &drift.stdout;
    let eu = out
        .find("target eu: drift from v1")
        .unwrap_or_else(|| panic!("{}", drift.output()));
    let us = out
        .find("target us: drift from v1")
        .unwrap_or_else(|| panic!("{}", drift.output()));
    let eu_part = &out[eu..us];
    assert!(
        eu_part.contains("~ Deployment shop/web: changed in the cluster")
            && eu_part.contains("-  replicas: 3")
            && eu_part.contains("+  replicas: 2"),
        "{}",
        drift.output()
    );
    let us_part = &out[us..];
    assert!(
        us_part.contains("- ConfigMap shop/web-config: missing (declared by v1"),
        "{}",
        drift.output()
    );
    assert!(
        us_part.contains("~ Secret shop/db"),
        "a changed Secret is drift: {}",
        drift.output()
    );
    for value in ["hunter2-in-the-manifest", "changed-by-hand"] {
        assert!(!drift.stdout.contains(value), "{value}: {}", drift.output());
        assert!(!drift.stderr.contains(value), "{value}: {}", drift.output());
    }

    let as_json = env.command("status", &["--drift", "-o", "json"]).await;
    assert_eq!(as_json.code, 1, "{}", as_json.output());
    let doc = json(&as_json);
    let eu = &doc["targets"][0]["drift"];
    assert_eq!(eu["drifted"], true, "{doc:#}");
    assert_eq!(eu["changed"][0]["object"], "Deployment shop/web", "{doc:#}");
    assert!(
        eu["changed"][0]["diff"]
            .as_str()
            .is_some_and(|d| d.contains("replicas")),
        "{doc:#}"
    );
    assert_eq!(eu["missing"], serde_json::json!([]));
    let us = &doc["targets"][1]["drift"];
    assert_eq!(
        us["missing"],
        serde_json::json!(["ConfigMap shop/web-config"]),
        "{doc:#}"
    );
    for value in ["hunter2-in-the-manifest", "changed-by-hand"] {
        assert!(!as_json.stdout.contains(value), "{value}");
    }
}
