//! A target's checks: rendered for the target, then each run at its interval (all at once)
//! until the bake ends or one fails its target; or each once (a target without a bake).

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{CallError, HttpClient};
use super::judge::{self, Reading, Streak};
use super::template::{Escape, TemplateValues, mask_url, render};
use super::{probe, prometheus};
use crate::config::{CheckConfig, CheckSource, Config, TargetConfig};
use crate::report::redact;
use crate::report::{CheckKind, CheckReport, CheckSample, CheckVerdict};

/// A Prometheus call's deadline, retries included: its interval, within these bounds.
const MIN_QUERY_DEADLINE: Duration = Duration::from_secs(1);
const MAX_QUERY_DEADLINE: Duration = Duration::from_secs(30);

/// A check rendered for one target.
#[derive(Debug, Clone)]
pub struct PreparedCheck {
    pub check: CheckConfig,
    /// The Prometheus base URL or the probe's URL, rendered.
    pub url: String,
    /// The PromQL, rendered (None for a probe).
    pub query: Option<String>,
    /// The rendered query or URL for output, credentials masked.
    pub source: String,
}

/// The template values of `target` in this deploy.
pub fn values(
    config: &Config,
    target: &TargetConfig,
    revision: Option<u64>,
    commit: Option<&str>,
) -> TemplateValues {
    TemplateValues {
        target: target.name.clone(),
        app: config.app.clone(),
        namespace: config.namespace_for(target).unwrap_or_default().to_string(),
        revision: revision.map(|r| r.to_string()).unwrap_or_default(),
        commit: commit.unwrap_or_default().to_string(),
        vars: target.vars.clone(),
    }
}

/// The checks `target` runs (top-level, then its wave's), rendered with `values`.
pub fn prepare(
    config: &Config,
    target: &TargetConfig,
    values: &TemplateValues,
) -> Vec<PreparedCheck> {
    config
        .checks_for(target)
        .into_iter()
        .map(|check| {
            // Credentials are known to the scrubber before anything of the check is said.
            if let CheckSource::Prometheus(p) = &check.source {
                prometheus::auth_headers(&p.auth);
            }
            let (url, query) = match &check.source {
                CheckSource::Prometheus(p) => (
                    render(&p.url, values, Escape::Url),
                    Some(render(&p.query, values, Escape::PromQl)),
                ),
                CheckSource::Http(h) => (render(&h.url, values, Escape::Url), None),
            };
            let source = redact::scrub(&match &query {
                Some(q) => format!("{} on {}", q.trim(), mask_url(&url)),
                None => format!("GET {}", mask_url(&url)),
            });
            PreparedCheck {
                check: check.clone(),
                url,
                query,
                source,
            }
        })
        .collect()
}

/// A report of `prepared` with `samples`.
pub fn report(
    prepared: &PreparedCheck,
    samples: Vec<CheckSample>,
    message: Option<String>,
) -> CheckReport {
    let check = &prepared.check;
    let (kind, fail_if) = match &check.source {
        CheckSource::Prometheus(_) => (CheckKind::Prometheus, check.fail_if.map(|f| f.to_string())),
        CheckSource::Http(h) => (
            CheckKind::Http,
            Some(format!(
                "status != {}",
                judge::statuses_text(&h.expect_status)
            )),
        ),
    };
    CheckReport {
        name: check.name.clone(),
        kind,
        verdict: judge::verdict(&samples, message.is_some()),
        fail_if,
        threshold: check.fail_if.map(|f| f.threshold),
        source: prepared.source.clone(),
        samples,
        message,
    }
}

/// Reports of checks that never ran.
pub fn not_run(prepared: &[PreparedCheck]) -> Vec<CheckReport> {
    prepared
        .iter()
        .map(|p| report(p, Vec::new(), None))
        .collect()
}

/// What a target's checks came to.
#[derive(Debug, Clone, PartialEq)]
pub struct ChecksOutcome {
    /// One per check, in config order.
    pub reports: Vec<CheckReport>,
    /// The one line of the check that failed the target: "error-rate = 0.043 > 0.01 at ...".
    pub failed: Option<String>,
}

/// Runs checks; one HTTP client for all of them.
pub struct CheckRunner {
    client: Result<HttpClient, CallError>,
}

impl Default for CheckRunner {
    fn default() -> Self {
        CheckRunner::new()
    }
}

impl CheckRunner {
    pub fn new() -> CheckRunner {
        CheckRunner {
            client: HttpClient::new(),
        }
    }

    /// One reading of `prepared` now (None: cancelled).
    pub async fn read(
        &self,
        prepared: &PreparedCheck,
        cancel: &CancellationToken,
    ) -> Option<Reading> {
        let client = match &self.client {
            Ok(client) => client,
            Err(e) => return Some(Reading::Error(e.to_string())),
        };
        let read = async {
            match (&prepared.check.source, &prepared.query) {
                (CheckSource::Prometheus(p), Some(query)) => {
                    let headers = prometheus::auth_headers(&p.auth);
                    let deadline = prepared
                        .check
                        .interval
                        .clamp(MIN_QUERY_DEADLINE, MAX_QUERY_DEADLINE);
                    prometheus::read(client, &prepared.url, query, &headers, deadline, cancel).await
                }
                (CheckSource::Http(h), _) => probe::read(client, &prepared.url, h).await,
                (CheckSource::Prometheus(_), None) => Some(Reading::Error("no query".into())),
            }
        };
        tokio::select! {
            reading = read => reading,
            _ = cancel.cancelled() => None,
        }
    }

    /// Runs `checks` at their intervals until `stop` fires or one fails its target (which
    /// ends the others); with `once`, each runs one time. `live` gets the last value of
    /// each check, for the live view ("error-rate 0.02, healthz 200").
    pub async fn run(
        &self,
        checks: &[PreparedCheck],
        once: bool,
        stop: &CancellationToken,
        live: &(dyn Fn(String) + Sync),
    ) -> ChecksOutcome {
        let all = stop.child_token();
        let last: Mutex<Vec<Option<String>>> = Mutex::new(vec![None; checks.len()]);
        let shown = |index: usize, sample: &CheckSample| {
            let Ok(mut last) = last.lock() else { return };
            if let Some(slot) = last.get_mut(index) {
                *slot = Some(format!(
                    "{} {}",
                    checks[index].check.name,
                    judge::short(sample)
                ));
            }
            live(
                last.iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        };
        let runs = checks
            .iter()
            .enumerate()
            .map(|(index, prepared)| self.run_one(prepared, once, &all, move |s| shown(index, s)));
        let results = join_all(runs).await;
        let failed = results.iter().find_map(|(_, message)| message.clone());
        let reports = checks
            .iter()
            .zip(results)
            .map(|(prepared, (samples, message))| report(prepared, samples, message))
            .collect();
        ChecksOutcome { reports, failed }
    }

    /// One check's loop: its samples, and its failure message when it failed the target
    /// (then `all` is cancelled, ending the others).
    async fn run_one(
        &self,
        prepared: &PreparedCheck,
        once: bool,
        all: &CancellationToken,
        shown: impl Fn(&CheckSample),
    ) -> (Vec<CheckSample>, Option<String>) {
        let check = &prepared.check;
        let mut samples = Vec::new();
        let mut streak = Streak::default();
        loop {
            let started = Instant::now();
            let time = Timestamp::now();
            let Some(reading) = self.read(prepared, all).await else {
                break;
            };
            let sample = judge::judge(check, &reading, time);
            shown(&sample);
            let fails = streak.record(sample.verdict, check.failures_allowed);
            if sample.verdict != CheckVerdict::Passed {
                tracing::info!(check = %check.name, value = ?sample.value, note = ?sample.note, verdict = ?sample.verdict, "check result");
            }
            let message = fails.then(|| judge::failure_message(check, &sample));
            samples.push(sample);
            if message.is_some() {
                all.cancel();
                return (samples, message);
            }
            if once {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(started + check.interval) => {}
                _ = all.cancelled() => break,
            }
        }
        (samples, None)
    }
}

/// The lines of a dry run (`diff`, `plan`, `deploy --dry-run`) that list the checks each
/// target would run, rendered, credentials masked ({{revision}} is the deploy's own: empty).
pub fn describe(config: &Config, commit: Option<&str>) -> Vec<String> {
    let mut lines = Vec::new();
    for target in &config.targets {
        let values = values(config, target, None, commit);
        for prepared in prepare(config, target, &values) {
            let check = &prepared.check;
            let rule = match (&check.source, &check.fail_if) {
                (CheckSource::Prometheus(_), Some(f)) => format!("fails if {f}"),
                (CheckSource::Http(h), _) => {
                    format!(
                        "fails if status != {}",
                        judge::statuses_text(&h.expect_status)
                    )
                }
                (CheckSource::Prometheus(_), None) => String::new(),
            };
            lines.push(format!(
                "  {}: {} (every {}, {rule}): {}",
                target.name,
                check.name,
                crate::util::duration::format_duration(check.interval),
                prepared.source
            ));
        }
    }
    if !lines.is_empty() {
        lines.insert(
            0,
            "dry run: the checks each target would run once healthy (not run in a dry run; `rollguard check` runs them now):".into(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CONFIG: &str = r#"app: shop
namespace: prod
manifests: [k8s/]
targets:
  - {name: canary, context: c, vars: {region: "eu \"1\""}}
  - {name: eu, context: e, wave: 1, vars: {region: eu}}
checks:
  - name: error-rate
    prometheus:
      url_env: PROM_URL
      token_env: PROM_TOKEN
      query: max(x{cluster="{{target}}",region="{{vars.region}}",app="{{app}}",ns="{{namespace}}"})
    fail_if: ">= 0.5"
waves:
  - wave: 1
    checks:
      - name: healthz
        http: {url: "https://{{target}}.example.com/h?r={{vars.region}}&c={{commit}}"}
"#;

    fn config() -> Config {
        let env = |k: &str| match k {
            "PROM_URL" => Some("https://reader:pw-run-tests-77@prom.example.com".to_string()),
            "PROM_TOKEN" => Some("tok-run-tests-0042".to_string()),
            _ => None,
        };
        crate::config::parse(
            CONFIG,
            Path::new("rollguard.yaml"),
            &crate::config::Overrides::default(),
            &env,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn checks_are_rendered_per_target_with_credentials_masked() {
        let config = config();
        let lines = describe(&config, Some("abc123"));
        assert_eq!(
            lines,
            vec![
                "dry run: the checks each target would run once healthy (not run in a dry run; `rollguard check` runs them now):".to_string(),
                r#"  canary: error-rate (every 10s, fails if >= 0.5): max(x{cluster="canary",region="eu \"1\"",app="shop",ns="prod"}) on https://***@prom.example.com"#.to_string(),
                r#"  eu: error-rate (every 10s, fails if >= 0.5): max(x{cluster="eu",region="eu",app="shop",ns="prod"}) on https://***@prom.example.com"#.to_string(),
                "  eu: healthz (every 10s, fails if status != 200): GET https://eu.example.com/h?r=eu&c=abc123".to_string(),
            ]
        );
        // The token was taught to the scrubber when the checks were prepared.
        assert!(!redact::scrub("Bearer tok-run-tests-0042").contains("0042"));
        let eu = &config.targets[1];
        let prepared = prepare(&config, eu, &values(&config, eu, Some(7), None));
        let reports = not_run(&prepared);
        let verdicts: Vec<(&str, CheckVerdict, Option<&str>)> = reports
            .iter()
            .map(|r| (r.name.as_str(), r.verdict, r.fail_if.as_deref()))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("error-rate", CheckVerdict::NotRun, Some(">= 0.5")),
                ("healthz", CheckVerdict::NotRun, Some("status != 200")),
            ]
        );
        assert_eq!(reports[0].threshold, Some(0.5));
        assert_eq!(reports[1].kind, CheckKind::Http);
    }
}
