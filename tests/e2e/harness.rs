//! Everything the tests need from clusters and the binary, in one place, so that the suite
//! can later point at real clusters (e.g. kind, via ROLLGUARD_E2E_KUBECONFIG) by changing
//! only this module.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;
use tempfile::TempDir;

/// Simulated seconds per real second: a 10 s readiness delay takes half a second.
pub const TIME_SCALE: f64 = 20.0;

/// A small app: a ConfigMap and a Deployment `web` with two replicas of `image`.
pub fn small_app(image: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: {image}
"
    )
}

/// A config for `app: shop` in namespace `shop` with targets eu/us/ap on sim-1/2/3 (as many
/// as clusters), manifests in `k8s/`.
pub fn config(targets: usize, timeout: &str) -> String {
    let names = ["eu", "us", "ap", "sa", "af"];
    let mut text = format!(
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  timeout: {timeout}\ntargets:\n"
    );
    for (i, name) in names.iter().take(targets).enumerate() {
        text.push_str(&format!("  - name: {name}\n    context: sim-{}\n", i + 1));
    }
    text
}

/// Clusters plus a scratch folder with the kubeconfig, config and manifests.
pub struct TestEnv {
    pub dir: TempDir,
    pub kubeconfig: PathBuf,
    pub sim: kube_sim::cluster::Sim,
}

/// The result of one run of the binary.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub report: Option<Value>,
    // No wall-clock duration here: tests assert on simulated time or order (issue 21.10).
}

impl Run {
    /// The report's entry for a target.
    pub fn target(&self, name: &str) -> &Value {
        let report = self
            .report
            .as_ref()
            .unwrap_or_else(|| panic!("no report; stderr:\n{}", self.stderr));
        report["targets"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == name))
            .unwrap_or_else(|| panic!("target {name} not in report: {report:#}"))
    }

    /// The index of the first stderr log line of `target` that contains `words` (log lines
    /// carry `target=<name>`): their order is the order things happened.
    pub fn line_of(&self, target: &str, words: &str) -> usize {
        self.stderr
            .lines()
            .position(|l| l.contains(&format!("target={target}")) && l.contains(words))
            .unwrap_or_else(|| panic!("no `{words}` line of {target}:\n{}", self.output()))
    }

    /// `targets` one after the other as each first logged a line with `words`, earliest first.
    pub fn order_of<'a>(&self, targets: &[&'a str], words: &str) -> Vec<&'a str> {
        let mut order: Vec<(usize, &str)> = targets
            .iter()
            .map(|t| (self.line_of(t, words), *t))
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, t)| t).collect()
    }

    /// Every target of `targets` logged `words` only once the one before it (in the order
    /// they did) logged `after`: a bound of one target at a time.
    pub fn assert_one_at_a_time(&self, targets: &[&str], words: &str, after: &str) {
        let order = self.order_of(targets, words);
        for pair in order.windows(2) {
            assert!(
                self.line_of(pair[0], after) < self.line_of(pair[1], words),
                "{} logged `{words}` before {} logged `{after}`:\n{}",
                pair[1],
                pair[0],
                self.output()
            );
        }
    }

    pub fn outcome(&self, name: &str) -> String {
        self.target(name)["outcome"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Everything printed, for assertion messages.
    pub fn output(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl TestEnv {
    /// Starts `clusters` simulated clusters (contexts sim-1..) with these kube-sim rules.
    pub async fn start(clusters: usize, rules: &str) -> TestEnv {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = kube_sim::rules::parse(rules).expect("rules parse");
        let kubeconfig = dir.path().join("kubeconfig");
        let options = kube_sim::SimOptions {
            clusters,
            time_scale: TIME_SCALE,
            rules,
            ..Default::default()
        };
        let sim = kube_sim::Sim::start_with_kubeconfig(options, &kubeconfig)
            .await
            .expect("kube-sim starts and writes its kubeconfig");
        TestEnv {
            dir,
            kubeconfig,
            sim,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// Runs `rollguard deploy --config <dir>/rollguard.yaml --kubeconfig <kc> --report <r>`
    /// plus `extra`, with a clean environment (no KUBECONFIG, no GITHUB_*, no TTY).
    pub async fn deploy(&self, extra: &[&str]) -> Run {
        self.deploy_with_env(extra, &[]).await
    }

    /// `deploy` with extra environment variables (GITHUB_* for the GitHub tests).
    pub async fn deploy_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let report = self.path("report.json");
        let _ = std::fs::remove_file(&report);
        let mut args = self.deploy_args(&report);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut run = rollguard(&args, self.dir.path(), env).await;
        run.report = read_report(&report);
        run
    }

    /// `deploy` with this environment's config and kubeconfig, its report at `report`.
    fn deploy_args(&self, report: &Path) -> Vec<String> {
        let config = self.path("rollguard.yaml");
        [
            "deploy".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--kubeconfig".as_ref(),
            self.kubeconfig.as_os_str(),
            "--report".as_ref(),
            report.as_os_str(),
        ]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
    }

    /// Starts `rollguard deploy` (as [`TestEnv::deploy`] runs it) in the background with
    /// extra environment variables; stdout and stderr are piped.
    pub fn spawn_deploy(&self, envs: &[(&str, &str)]) -> tokio::process::Child {
        self.spawn_deploy_to("report.json", envs)
    }

    /// [`TestEnv::spawn_deploy`] with the report written to `report` in the scratch folder
    /// (runs started together, as separate processes, as CI starts them).
    pub fn spawn_deploy_to(&self, report: &str, envs: &[(&str, &str)]) -> tokio::process::Child {
        let report = self.path(report);
        let _ = std::fs::remove_file(&report);
        command(&self.deploy_args(&report), self.dir.path(), envs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rollguard starts")
    }

    /// Waits for a spawned run (at most 120 s) and reads its report.
    pub async fn finish(&self, child: tokio::process::Child, report: &str) -> Run {
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("rollguard finished within 120 s")
            .expect("rollguard ran");
        let mut run = run_of(out);
        run.report = read_report(&self.path(report));
        run
    }

    /// Server-side applies `body` to cluster `sim-N` as field manager `manager` (what another
    /// tool, or an older rollguard, left behind).
    pub async fn apply_as(&self, cluster: usize, manager: &str, body: &Value) {
        let client = self.client(cluster).await;
        let api_version = body["apiVersion"].as_str().expect("apiVersion");
        let kind = body["kind"].as_str().expect("kind");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, &plural);
        let name = body["metadata"]["name"].as_str().expect("name");
        let api: Api<DynamicObject> = match body["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        api.patch(
            name,
            &kube::api::PatchParams::apply(manager),
            &kube::api::Patch::Apply(body),
        )
        .await
        .expect("apply as another manager");
    }

    /// Runs `rollguard <command> --config <dir>/rollguard.yaml --kubeconfig <kc>` plus `extra`
    /// (history, show, rollback, unlock, diff, plan).
    pub async fn command(&self, command: &str, extra: &[&str]) -> Run {
        self.command_env(command, extra, &[]).await
    }

    /// [`TestEnv::command`] with extra environment variables (e.g. `RUST_LOG=trace`).
    pub async fn command_env(&self, command: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let mut args: Vec<String> = vec![
            command.into(),
            "--config".into(),
            self.path("rollguard.yaml").display().to_string(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        rollguard(&args, self.dir.path(), env).await
    }

    /// Every request cluster `sim-N` has answered (reads, writes, dry runs).
    pub fn requests(&self, cluster: usize) -> u64 {
        self.cluster(cluster).counters().counts.values().sum()
    }

    /// The names of the namespaces of cluster `sim-N`.
    pub async fn namespaces(&self, cluster: usize) -> Vec<String> {
        use k8s_openapi::api::core::v1::Namespace;
        let api: Api<Namespace> = Api::all(self.client(cluster).await);
        api.list(&ListParams::default())
            .await
            .expect("list namespaces")
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect()
    }

    /// Writes an executable shell script (for script stages).
    pub fn write_script(&self, rel: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        self.write(rel, &format!("#!/bin/sh\n{body}\n"));
        std::fs::set_permissions(self.path(rel), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }

    /// The text of a file in the scratch folder ("" when it does not exist).
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// Creates ConfigMap `name` in namespace `default` on cluster `sim-N` (a marker only
    /// that cluster has).
    pub async fn put_configmap(&self, cluster: usize, name: &str) {
        use k8s_openapi::api::core::v1::ConfigMap;
        let api: Api<ConfigMap> = Api::namespaced(self.client(cluster).await, "default");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
        }))
        .expect("configmap");
        api.create(&kube::api::PostParams::default(), &cm)
            .await
            .expect("configmap created");
    }

    /// Cluster `sim-N` (1-based, as the contexts are named).
    pub fn cluster(&self, n: usize) -> &kube_sim::cluster::Cluster {
        &self.sim.clusters()[n - 1]
    }

    /// A kube client for context `sim-N`.
    pub async fn client(&self, cluster: usize) -> kube::Client {
        client_for(&self.kubeconfig, &format!("sim-{cluster}")).await
    }

    /// Writes to cluster `sim-N` counted by kube-sim (create, update, patch, apply, delete).
    pub fn writes(&self, cluster: usize) -> u64 {
        self.cluster(cluster).counters().writes()
    }

    /// Writes to cluster `sim-N` other than to Leases (the locks), dry runs aside.
    pub fn writes_besides_locks(&self, cluster: usize) -> u64 {
        self.cluster(cluster)
            .counters()
            .counts
            .iter()
            .filter(|(k, _)| {
                !k.dry_run
                    && k.resource != "leases.coordination.k8s.io"
                    && kube_sim::faults::WRITE_VERBS.contains(&k.verb.as_str())
            })
            .map(|(_, n)| n)
            .sum()
    }
}

pub async fn client_for(kubeconfig: &Path, context: &str) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// `RUST_LOG` removed, for [`rollguard`]'s `env`: the binary's default log filter, as a user
/// gets it (the harness otherwise sets `RUST_LOG=rollguard=info`).
pub const DEFAULT_LOGS: (&str, &str) = ("RUST_LOG", "");

/// Runs the real binary with a clean environment plus `env` ([`DEFAULT_LOGS`] removes
/// `RUST_LOG`).
pub async fn rollguard(args: &[String], cwd: &Path, env: &[(&str, &str)]) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(120), command(args, cwd, env).output())
        .await
        .expect("rollguard finished within 120 s")
        .expect("rollguard runs");
    run_of(out)
}

/// The one environment every test run of the binary gets: a clean one with PATH, HOME and
/// TMPDIR kept, `RUST_LOG=rollguard=info`, then `env` ([`DEFAULT_LOGS`] removes `RUST_LOG`).
fn command(args: &[String], cwd: &Path, env: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollguard"));
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for key in ["PATH", "HOME", "TMPDIR"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.env("RUST_LOG", "rollguard=info");
    for (k, v) in env {
        if (*k, *v) == DEFAULT_LOGS {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    cmd
}

fn run_of(out: std::process::Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        report: None,
    }
}

fn read_report(path: &Path) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// Sends `sig` ("-TERM", "-INT", "-KILL") to a running child.
pub fn signal(child: &tokio::process::Child, sig: &str) {
    let pid = child.id().expect("running").to_string();
    let ok = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Whether process `pid` is gone: no such process, or a zombie (dead, not yet reaped by
/// whoever inherited it).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// All objects of a kind in a namespace, as JSON.
pub async fn list(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
) -> Vec<Value> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    api.list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .collect()
}

/// Creates an object (e.g. an Event another controller would record) in a namespace.
pub async fn create(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
    body: Value,
) {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let object: DynamicObject = serde_json::from_value(body).expect("object");
    api.create(&Default::default(), &object)
        .await
        .expect("create");
}

/// True when a Deployment has all replicas updated, ready and available for its generation.
pub fn deployment_available(d: &Value) -> bool {
    let want = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let status = &d["status"];
    status["observedGeneration"] == d["metadata"]["generation"]
        && status["availableReplicas"].as_i64() == Some(want)
        && status["updatedReplicas"].as_i64() == Some(want)
        && status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        })
}

/// No ANSI escape in anything the binary printed (stdout and stderr are not terminals).
pub fn assert_no_ansi(run: &Run) {
    assert!(
        !run.stdout.contains('\u{1b}'),
        "ANSI escape in stdout:\n{}",
        run.output()
    );
    assert!(
        !run.stderr.contains('\u{1b}'),
        "ANSI escape in stderr:\n{}",
        run.output()
    );
}

/// A file of the shared corpus of real manifests (`shared/corpus` beside the repository), for
/// `test`: None, after saying why `test` skips, when there is no shared folder (a plain clone;
/// with ROLLGUARD_REQUIRE_SHARED=1 that fails instead). kube-sim's lookup, the one rule.
pub fn corpus_file(test: &str, rel: &str) -> Option<String> {
    let shared = kube_sim::shared_for_test(test)?;
    let path = shared.join("corpus").join(rel);
    Some(
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("corpus file {}: {e}", path.display())),
    )
}

/// `name`'s path on this process's PATH, if it is there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether `program` is on PATH, for `test`. When it is not, `test` skips, saying why and
/// how to get it (`install`), or, under ROLLGUARD_REQUIRE_SHARED=1 (.ci/run, which installs
/// it), fails.
pub fn needs_program(test: &str, program: &str, install: &str) -> bool {
    let found = on_path(program).is_some();
    if !found {
        assert!(
            std::env::var("ROLLGUARD_REQUIRE_SHARED").as_deref() != Ok("1"),
            "{test}: {program} is not on PATH and ROLLGUARD_REQUIRE_SHARED=1 says this test must run ({install})"
        );
        kube_sim::skip_test(
            test,
            &format!("{program} is not on PATH ({install}; .ci/run installs it)"),
        );
    }
    found
}

/// git with a fixed identity, in `dir`.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    git_with(dir, &[], args)
}

/// git with a fixed identity and the extra `-c` settings in `config`, in `dir`.
pub fn git_with(dir: &std::path::Path, config: &[&str], args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(config.iter().flat_map(|c| ["-c", c]))
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
