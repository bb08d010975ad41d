//! Apps, configs and rollguard runs shared by the sections.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube_sim::{Sim, SimOptions};
use rollguard::report::Report;

use super::procs::{self, Finished, RunError};

/// Why an app could not be written, the clusters started or a deploy run.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("{}", .path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `name`: the file, relative to the app's folder.
    #[error("{name}")]
    Write {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Sim(#[from] kube_sim::SimError),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Mix of kinds in a generated app.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub config_maps: usize,
    pub services: usize,
    pub deployments: usize,
}

impl Mix {
    pub fn total(&self) -> usize {
        self.config_maps + self.services + self.deployments
    }
}

/// One YAML document per object, without namespaces (the config or `-n` gives it).
/// Files: 00-namespace.yaml (only when `namespace` is given), configmaps.yaml,
/// services.yaml, deployments.yaml.
pub fn write_app(
    dir: &Path,
    namespace: Option<&str>,
    mix: Mix,
    image: &str,
    replicas: u32,
) -> Result<(), FixtureError> {
    std::fs::create_dir_all(dir).map_err(|source| FixtureError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let put = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|source| FixtureError::Write {
            name: name.to_string(),
            source,
        })
    };
    if let Some(ns) = namespace {
        put(
            "00-namespace.yaml",
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )?;
    }
    let mut cms = String::new();
    for i in 0..mix.config_maps {
        let _ = write!(
            cms,
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\n  labels:\n    app: bench\ndata:\n  index: \"{i}\"\n  greeting: hello\n  feature-flags: \"a=1,b=0,c=1\"\n"
        );
    }
    put("configmaps.yaml", &cms)?;
    let mut svcs = String::new();
    for i in 0..mix.services {
        let _ = write!(
            svcs,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\nspec:\n  selector:\n    app: app-{i}\n  ports:\n    - port: 80\n      targetPort: 8080\n"
        );
    }
    put("services.yaml", &svcs)?;
    let mut deps = String::new();
    for i in 0..mix.deployments {
        let _ = write!(
            deps,
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  labels:\n    app: app-{i}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n      labels:\n        app: app-{i}\n    spec:\n      containers:\n        - name: app\n          image: {image}\n          ports:\n            - containerPort: 8080\n"
        );
    }
    put("deployments.yaml", &deps)?;
    Ok(())
}

/// The small app of the fleet and rollback sections: Namespace, ConfigMap, Service and a
/// Deployment `web` with `replicas` pods of `image`.
pub fn small_app(namespace: &str, image: &str, replicas: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  greeting: hello\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n      targetPort: 8080\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: {image}\n          ports:\n            - containerPort: 8080\n"
    )
}

/// A rollguard.yaml deploying `manifests` (relative to the config) to contexts `contexts`.
pub fn config(
    app: &str,
    namespace: &str,
    manifests: &str,
    contexts: &[String],
    concurrency: usize,
    timeout: &str,
) -> String {
    let mut out = format!(
        "app: {app}\nnamespace: {namespace}\nmanifests: [{manifests}]\nconcurrency: {concurrency}\nwait:\n  timeout: {timeout}\ntargets:\n"
    );
    for (i, c) in contexts.iter().enumerate() {
        let _ = writeln!(out, "  - name: t{}\n    context: {c}", i + 1);
    }
    out
}

/// In-process kube-sim clusters, and their kubeconfig written to `scratch/kubeconfig`
/// (contexts sim-1 .. sim-n).
pub async fn start_sim(
    options: SimOptions,
    scratch: &Path,
) -> Result<(Sim, PathBuf), FixtureError> {
    let kubeconfig = scratch.join("kubeconfig");
    let sim = Sim::start_with_kubeconfig(options, &kubeconfig).await?;
    Ok((sim, kubeconfig))
}

/// Stops `sim` and waits until what its clusters held is freed, so that the runtime's
/// workers do not free it while the next measurement runs.
pub async fn stop_sim(sim: Sim) {
    if !sim.stop(Duration::from_secs(60)).await {
        eprintln!(
            "kube-sim: clusters still held after 60 s of stopping; the next section may be slowed by their freeing"
        );
    }
}

/// Contexts sim-1 .. sim-n.
pub fn contexts(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("sim-{i}")).collect()
}

/// One `rollguard deploy` run and its parsed report.
pub struct DeployRun {
    pub finished: Finished,
    pub report: Option<Report>,
    pub report_error: Option<String>,
}

impl DeployRun {
    /// How many targets ended with this outcome word (`deployed`, `rolled-back`, ...).
    pub fn count(&self, outcome: &str) -> usize {
        self.report.as_ref().map_or(0, |r| {
            r.targets
                .iter()
                .filter(|t| t.outcome.as_str() == outcome)
                .count()
        })
    }

    /// Why the run is not usable, for a SKIPPED/MISS line.
    pub fn problem(&self) -> String {
        match &self.report_error {
            Some(e) => format!(
                "exit {:?}{}: {e}; {}",
                self.finished.code,
                if self.finished.timed_out {
                    " (killed at the bench's limit)"
                } else {
                    ""
                },
                self.finished.tail()
            ),
            None => format!("exit {:?}: {}", self.finished.code, self.finished.tail()),
        }
    }

    /// Seconds of a named phase, summed over targets, and the max over targets.
    pub fn phase_max(&self, name: &str) -> Option<f64> {
        let r = self.report.as_ref()?;
        r.targets
            .iter()
            .filter_map(|t| {
                t.phases
                    .iter()
                    .filter(|p| p.name == name)
                    .map(|p| p.seconds)
                    .reduce(f64::max)
            })
            .reduce(f64::max)
    }
}

/// Runs `rollguard deploy --config DIR/rollguard.yaml --kubeconfig KC --report ...` plus
/// `extra` arguments, killed after `limit`.
pub async fn deploy(
    dir: &Path,
    kubeconfig: &Path,
    extra: &[&str],
    limit: Duration,
) -> Result<DeployRun, FixtureError> {
    deploy_with(&procs::rollguard_bin(), dir, kubeconfig, extra, limit).await
}

/// [`deploy`] with another rollguard binary (e.g. an older build, for a before/after figure).
pub async fn deploy_with(
    rollguard: &Path,
    dir: &Path,
    kubeconfig: &Path,
    extra: &[&str],
    limit: Duration,
) -> Result<DeployRun, FixtureError> {
    let report_path: PathBuf = dir.join(format!(
        "report-{}.json",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let mut cmd = Command::new(rollguard);
    cmd.arg("deploy")
        .arg("--config")
        .arg(dir.join("rollguard.yaml"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--report")
        .arg(&report_path)
        .args(["--commit", "0123456789abcdef0123456789abcdef01234567"])
        .args(extra)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .env_remove("GITHUB_SHA")
        .env_remove("ROLLGUARD_CONFIG");
    let finished = procs::run_measured_async(cmd, limit, dir).await?;
    let (report, report_error) = match std::fs::read_to_string(&report_path) {
        Ok(text) => match serde_json::from_str::<Report>(&text) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(format!("report unreadable: {e}"))),
        },
        Err(e) => (None, Some(format!("no report ({e})"))),
    };
    Ok(DeployRun {
        finished,
        report,
        report_error,
    })
}

/// Whether Deployment `namespace/name` runs `image` with all `replicas` updated, ready and
/// available, as the cluster's own status says; and a short description of its state.
pub fn deployment_healthy(
    store: &kube_sim::Store,
    namespace: &str,
    name: &str,
    image: &str,
    replicas: u32,
) -> (bool, String) {
    let rt = kube_sim::ResourceType::new("apps", "v1", "deployments");
    let d = store.get(&rt, namespace, name).unwrap_or_default();
    let running = d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or("?");
    let st = &d["status"];
    let want = u64::from(replicas);
    let ok = running == image
        && st["observedGeneration"] == d["metadata"]["generation"]
        && st["updatedReplicas"].as_u64() == Some(want)
        && st["readyReplicas"].as_u64() == Some(want)
        && st["availableReplicas"].as_u64() == Some(want)
        && st["replicas"].as_u64() == Some(want);
    let state = format!(
        "{running} {}/{} ready",
        st["readyReplicas"].as_u64().unwrap_or(0),
        st["replicas"].as_u64().unwrap_or(0)
    );
    (ok, state)
}
