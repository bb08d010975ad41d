//! The GitHub sink: the sticky PR comment, the step summary, the step outputs, error
//! annotations, per-target log groups and (optionally) Deployments.
//!
//! GitHub is a sink, never a dependency: nothing here changes a deploy's outcome or exit code.
//! Every problem (no token, 401/403, 404, a rate limit, the network down) is one warning with
//! the reason. All API calls of a run share one deadline (`github.timeout`, default 30 s);
//! Deployments are started in the background so that the deploy never waits for them, and
//! the comment and final statuses are posted after the deploy work (rollbacks, records) is done.

pub mod api;
pub mod comments;
pub mod context;
pub mod deployments;
pub mod logs;
pub mod workflow;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use api::{Client, GithubError, Octo, Transport};
use comments::{Posted, Purpose};
use context::{GithubContext, PrSource};
use deployments::{Planned, State};
use workflow::SourceLine;

use crate::report::{
    COMMENT_LIMIT, Clean, FullReport, MarkdownOptions, Report, STEP_SUMMARY_LIMIT, cut_to,
    to_markdown,
};

/// Title of rollguard's own warnings about GitHub.
const WARNING_TITLE: &str = "rollguard: GitHub";

/// What a run tells the user about GitHub: warnings (it did not work) and notes.
#[derive(Debug, Default)]
pub struct Messages {
    in_actions: bool,
}

impl Messages {
    /// A problem with GitHub: a `::warning` in Actions, a line on stderr elsewhere. Said once.
    pub fn warn(&self, text: &str) {
        if self.in_actions {
            println!("{}", workflow::warning(WARNING_TITLE, text));
        } else {
            eprintln!("rollguard: warning: GitHub: {text}");
        }
    }

    /// Something worth knowing that is not a problem (no PR to comment on).
    pub fn note(&self, text: &str) {
        if self.in_actions {
            println!("{}", workflow::notice(WARNING_TITLE, text));
        } else {
            eprintln!("rollguard: note: GitHub: {text}");
        }
    }
}

/// The comment body of a report, as posted, written to the step summary (with the larger
/// limit) and by `--report-markdown`: scrubbed, escaped, within `limit`.
pub fn report_body(
    report: &Report,
    limit: usize,
    full_report: FullReport,
    scrub: &dyn Fn(&str) -> String,
) -> String {
    // Scrub the text before it is escaped (escaping would hide a value from the scrubber),
    // then the body again as a second line.
    let clean = Clean::with(report, scrub);
    let mut room = limit;
    loop {
        let body = scrub(&to_markdown(
            &clean,
            &MarkdownOptions {
                limit: room,
                full_report: full_report.clone(),
            },
        ));
        // A marker may be longer than the value it replaced: render tighter and try again.
        if body.len() <= limit || room < 1024 {
            return cut_to(body, limit);
        }
        room -= body.len() - limit + 64;
    }
}

/// The target-independent inputs of the sink.
pub struct SinkOptions {
    pub app: String,
    /// Per target: its name and the GitHub environment of its deployment.
    pub deployments: Option<Vec<Planned>>,
}

/// A target's deployment as the background start left it: its id, or why there is none.
type Started = (Planned, Result<u64, GithubError>);

/// The GitHub sink of one run: started before the deploy, finished after it.
pub struct Sink {
    ctx: GithubContext,
    app: String,
    messages: Messages,
    client: Option<Arc<Client<Octo>>>,
    /// Problems found when starting, said at the end with the rest.
    early: Vec<GithubError>,
    /// Deployments being created in the background: (planned, id or why not).
    started: Option<tokio::task::JoinHandle<Vec<Started>>>,
}

impl Sink {
    /// Sets up the client and, with Deployments on, creates them and marks them in progress
    /// in the background (the deploy does not wait for GitHub).
    pub fn start(ctx: GithubContext, options: SinkOptions) -> Sink {
        let messages = Messages {
            in_actions: ctx.in_actions,
        };
        let mut early = Vec::new();
        let client = if !ctx.enabled {
            None
        } else {
            match (&ctx.token, &ctx.repo) {
                (None, _) => {
                    early.push(GithubError::NoToken);
                    None
                }
                (_, None) => {
                    early.push(GithubError::NoRepository);
                    None
                }
                (Some(token), Some(_)) => match Octo::new(&ctx.api_url, token) {
                    Ok(octo) => Some(Arc::new(Client::new(octo, ctx.api_url.clone(), ctx.budget))),
                    Err(e) => {
                        early.push(e);
                        None
                    }
                },
            }
        };
        let started = match (&client, options.deployments, &ctx.repo, &ctx.sha) {
            (Some(client), Some(planned), Some(repo), Some(sha)) => {
                let (client, repo, sha) = (client.clone(), repo.clone(), sha.clone());
                let log_url = ctx.run_url.clone();
                Some(tokio::spawn(async move {
                    start_deployments(&client, &repo, &sha, planned, log_url.as_deref()).await
                }))
            }
            (Some(_), Some(_), _, None) => {
                early.push(GithubError::BadResponse {
                    what: "create Deployments".into(),
                    reason: "GITHUB_SHA is not set, so there is no commit to deploy".into(),
                });
                None
            }
            _ => None,
        };
        Sink {
            ctx,
            app: options.app,
            messages,
            client,
            early,
            started,
        }
    }

    /// The run's page, checked to be on the run's own server (for the report's link).
    pub fn run_url(&self) -> Option<String> {
        self.ctx.run_url.clone()
    }

    /// Everything at the end of a run. Never fails: problems are warnings.
    pub async fn finish(self, run: Finish<'_>) {
        let Sink {
            ctx,
            app,
            messages,
            client,
            early,
            started,
        } = self;
        for e in &early {
            messages.warn(&e.to_string());
        }
        let full_report = FullReport {
            run_url: ctx.step_summary.as_ref().and(ctx.run_url.clone()),
            json_path: run.report_path.map(str::to_string),
        };
        if ctx.in_actions {
            write_runner_files(&ctx, &run, &messages);
        }
        let (Some(client), Some(repo)) = (client, ctx.repo.clone()) else {
            return;
        };
        // The start's budget covered creating the Deployments; the end gets its own.
        client.restart_budget();
        // Deployments: wait for the background start (within the budget), then final statuses.
        if let Some(handle) = started {
            let left = client.time_left();
            match tokio::time::timeout(left, handle).await {
                Ok(Ok(results)) => {
                    for (planned, id) in results {
                        let outcome = match id {
                            Ok(id) => {
                                finish_deployment(
                                    &client,
                                    &repo,
                                    id,
                                    &planned,
                                    run.report,
                                    ctx.run_url.as_deref(),
                                )
                                .await
                            }
                            Err(e) => Err(e),
                        };
                        if let Err(e) = outcome {
                            messages.warn(&e.to_string());
                        }
                    }
                }
                Ok(Err(e)) => messages.warn(&format!("creating Deployments stopped: {e}")),
                Err(_) => messages.warn(
                    &GithubError::OutOfTime {
                        what: "create Deployments".into(),
                        budget: ctx.budget,
                    }
                    .to_string(),
                ),
            }
        }
        // The PR comment.
        let marker = comments::marker(Purpose::Deploy, &app);
        let limit = COMMENT_LIMIT - marker.len() - 1;
        let body = report_body(run.report, limit, full_report, run.scrub);
        post_comment(&client, &ctx, &repo, &marker, &body, &messages).await;
    }
}

/// Posts `body` (escaped and scrubbed by the caller, at most [`COMMENT_LIMIT`] with the marker)
/// as the sticky comment of `purpose` for `app` on the run's pull request: what
/// `rollguard diff` calls for its plan (`Purpose::Plan`). Never fails: a problem is a
/// warning, no pull request a note.
pub async fn post_sticky_comment(ctx: &GithubContext, purpose: Purpose, app: &str, body: &str) {
    let messages = Messages {
        in_actions: ctx.in_actions,
    };
    if !ctx.enabled {
        return;
    }
    let (Some(token), Some(repo)) = (&ctx.token, &ctx.repo) else {
        let e = if ctx.token.is_none() {
            GithubError::NoToken
        } else {
            GithubError::NoRepository
        };
        messages.warn(&e.to_string());
        return;
    };
    match Octo::new(&ctx.api_url, token) {
        Ok(octo) => {
            let client = Client::new(octo, ctx.api_url.clone(), ctx.budget);
            let marker = comments::marker(purpose, app);
            post_comment(&client, ctx, repo, &marker, body, &messages).await;
        }
        Err(e) => messages.warn(&e.to_string()),
    }
}

/// Finds the pull request (the event's, `--pr`, or the commit's) and posts the comment.
async fn post_comment<T: Transport>(
    client: &Client<T>,
    ctx: &GithubContext,
    repo: &context::Repo,
    marker: &str,
    body: &str,
    messages: &Messages,
) {
    let pr = match &ctx.pr {
        PrSource::Number(n) => Some(*n),
        PrSource::Commit(sha) => match comments::pr_for_commit(client, repo, sha).await {
            Ok(Some(n)) => Some(n),
            Ok(None) => {
                messages.note(&format!(
                    "commit {sha} is on no pull request of {repo}; no PR comment"
                ));
                None
            }
            Err(e) => {
                messages.warn(&e.to_string());
                None
            }
        },
        PrSource::None(why) => {
            messages.note(&format!("no pull request to comment on: {why}"));
            None
        }
    };
    let Some(pr) = pr else {
        return;
    };
    match comments::post_sticky(client, repo, pr, marker, body).await {
        Ok(Posted::Created(id)) => tracing::info!(pr, id, "created the PR comment"),
        Ok(Posted::Updated(id)) => tracing::info!(pr, id, "updated the PR comment"),
        Err(e) => messages.warn(&e.to_string()),
    }
}

/// What `Sink::finish` needs of the finished run.
pub struct Finish<'a> {
    pub report: &'a Report,
    /// The `--report` JSON path, for the outputs and the truncation note.
    pub report_path: Option<&'a str>,
    /// Where a failed object's manifest is.
    pub origin: &'a dyn Fn(&str) -> Option<SourceLine>,
    /// Each target's log lines, for the groups.
    pub logs: &'a dyn Fn(&str) -> Vec<String>,
    /// rollguard's secret scrubber.
    pub scrub: &'a dyn Fn(&str) -> String,
}

/// Step summary, outputs, annotations and log groups: the runner's files and stdout.
fn write_runner_files(ctx: &GithubContext, run: &Finish<'_>, messages: &Messages) {
    let clean = Clean::with(run.report, run.scrub);
    if let Some(path) = &ctx.step_summary {
        // Other steps' summaries are in other files; what this step already wrote counts.
        let used = std::fs::metadata(path)
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        let room = STEP_SUMMARY_LIMIT.saturating_sub(used + 1);
        let full_report = FullReport {
            run_url: None,
            json_path: run.report_path.map(str::to_string),
        };
        let body = report_body(run.report, room, full_report, run.scrub);
        if let Err(e) = append(path, &format!("{body}\n")) {
            messages.warn(&format!(
                "cannot write the step summary to {} (GITHUB_STEP_SUMMARY): {e}",
                path.display()
            ));
        }
    }
    if let Some(path) = &ctx.output {
        let outputs = workflow::outputs(&clean, run.report_path);
        let written = workflow::output_file(&outputs, &workflow::random_token("ghadelimiter_"))
            .map_err(OutputsError::from)
            .and_then(|text| append(path, &text).map_err(OutputsError::from));
        if let Err(e) = written {
            messages.warn(&format!(
                "cannot write the step outputs to {} (GITHUB_OUTPUT): {e}",
                path.display()
            ));
        }
    }
    let mut out = String::new();
    for line in workflow::annotations(&clean, run.origin) {
        out.push_str(&line);
        out.push('\n');
    }
    let groups: Vec<_> = run
        .report
        .targets
        .iter()
        .map(|t| {
            let lines = (run.logs)(&t.name).iter().map(|l| (run.scrub)(l)).collect();
            (t.name.clone(), t.outcome, lines)
        })
        .collect();
    out.push_str(&workflow::log_groups(
        &groups,
        &workflow::random_token("rollguard-"),
    ));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
}

/// Why the step outputs could not be written.
#[derive(Debug, thiserror::Error)]
enum OutputsError {
    #[error(transparent)]
    Delimiter(#[from] workflow::DelimiterInValue),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A plan's runner files (`diff`, `deploy --dry-run`, `plan --offline`): in GitHub Actions
/// the step summary gets the plan's markdown (`markdown(room)`, scrubbed by the caller), and
/// the step outputs ([`workflow::plan_outputs`]) are written whenever `GITHUB_OUTPUT` is set,
/// `--no-github` included: that flag stops calls to GitHub's API, not the job's own files.
pub fn write_plan_files(
    ctx: &GithubContext,
    plan: &crate::report::plan::ChangePlan,
    exit_code: i32,
    markdown: &dyn Fn(usize) -> String,
) {
    let messages = Messages {
        in_actions: ctx.in_actions,
    };
    if ctx.in_actions
        && let Some(path) = &ctx.step_summary
    {
        let used = std::fs::metadata(path)
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        let room = STEP_SUMMARY_LIMIT.saturating_sub(used + 1);
        if let Err(e) = append(path, &format!("{}\n", markdown(room))) {
            messages.warn(&format!(
                "cannot write the step summary to {} (GITHUB_STEP_SUMMARY): {e}",
                path.display()
            ));
        }
    }
    if let Some(path) = &ctx.output {
        let outputs: Vec<(String, String)> = workflow::plan_outputs(plan, exit_code)
            .into_iter()
            .map(|(k, v)| (k, crate::report::redact::scrub(&v)))
            .collect();
        let written = workflow::output_file(&outputs, &workflow::random_token("ghadelimiter_"))
            .map_err(OutputsError::from)
            .and_then(|text| append(path, &text).map_err(OutputsError::from));
        if let Err(e) = written {
            messages.warn(&format!(
                "cannot write the step outputs to {} (GITHUB_OUTPUT): {e}",
                path.display()
            ));
        }
    }
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(text.as_bytes())
}

async fn start_deployments<T: Transport>(
    client: &Client<T>,
    repo: &context::Repo,
    sha: &str,
    planned: Vec<Planned>,
    log_url: Option<&str>,
) -> Vec<Started> {
    let mut out = Vec::new();
    for p in planned {
        let id = match deployments::create(client, repo, sha, &p).await {
            Ok(id) => deployments::set_status(
                client,
                repo,
                id,
                &p,
                State::InProgress,
                "deploying",
                log_url,
            )
            .await
            .map(|()| id),
            Err(e) => Err(e),
        };
        out.push((p, id));
    }
    out
}

async fn finish_deployment<T: Transport>(
    client: &Client<T>,
    repo: &context::Repo,
    id: u64,
    planned: &Planned,
    report: &Report,
    log_url: Option<&str>,
) -> Result<(), GithubError> {
    let Some(target) = report.targets.iter().find(|t| t.name == planned.target) else {
        return Ok(());
    };
    let (state, description) = deployments::final_status(target);
    deployments::set_status(client, repo, id, planned, state, &description, log_url).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::TargetOutcome;
    use crate::report::tests::{report, target};

    /// Every sink, with one report whose texts quote a secret value that each medium's
    /// escaping would change (`_` `*` for markdown, `"` for JSON, `%` and a line break for
    /// workflow commands): the value appears in none, raw or escaped.
    #[test]
    fn every_sink_scrubs_before_it_escapes() {
        use crate::report::redact;
        use crate::report::{ChangePlan, PlanMode, TargetPlan};
        let value = "s3cr_et*v%al\"ue\nline-two-9f3e";
        redact::learn_value(value.as_bytes());
        let poison = format!("the server said: {value}: no");
        let mut t = target("eu", TargetOutcome::Failed);
        t.message = Some(poison.clone());
        let mut failure = crate::report::tests::image_failure();
        failure.message = poison.clone();
        failure.events = vec![poison.clone()];
        t.failures.push(failure.clone());
        t.warnings.push(poison.clone());
        // The rollback's why is shown in the PR comment's table and details.
        let mut rollback = crate::report::RollbackReport::new(TargetOutcome::RolledBack, Some(3));
        rollback.why = Some(poison.clone());
        t.rollback = Some(rollback);
        let r = report(vec![t]);
        let mut tp = TargetPlan::new("eu");
        tp.errors.push(failure);
        tp.warnings.push(poison.clone());
        let plan = ChangePlan::new("shop", PlanMode::DryRun, None, vec![tp]);

        let clean = Clean::new(&r);
        let clean_plan = Clean::new(&plan);
        let origin = |_: &str| None;
        let mut history = serde_json::json!([{"reason": poison}]);
        crate::report::clean::scrub_tree(&mut history);
        let sinks: Vec<(&str, String)> = vec![
            ("table", crate::report::to_table(&clean, false, None)),
            ("json", crate::report::to_json(&clean)),
            (
                "markdown",
                report_body(&r, COMMENT_LIMIT, FullReport::default(), &redact::scrub),
            ),
            ("outputs", format!("{:?}", workflow::outputs(&clean, None))),
            (
                "annotations",
                workflow::annotations(&clean, &origin).join("\n"),
            ),
            (
                "plan markdown",
                crate::report::plan_to_markdown(&clean_plan, COMMENT_LIMIT),
            ),
            ("plan json", crate::report::plan_to_json(&clean_plan)),
            (
                "history yaml",
                serde_saphyr::to_string(&history).unwrap_or_default(),
            ),
            ("log", redact::log_text(&poison)),
        ];
        let forms = [
            value.to_string(),
            crate::report::escape::text(value),
            serde_json::to_string(value).unwrap_or_default(),
            workflow::escape_data(value),
            "s3cr".to_string() + "_et*v%al",
            "s3cr\\_et".to_string(),
        ];
        for (name, text) in &sinks {
            for form in &forms {
                assert!(
                    !text.contains(form.as_str()),
                    "{name} has {form:?}:\n{text}"
                );
            }
            // Where the whole message is shown, its marker stands in for the value.
            if ["json", "plan json", "history yaml", "log", "markdown"].contains(name) {
                assert!(text.contains("redacted sha256:"), "{name}:\n{text}");
            }
        }
    }

    #[test]
    fn body_is_scrubbed_before_escaping_and_fits() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.message = Some("password p@ss_w0rd leaked".into());
        let r = report(vec![t]);
        let scrub = |s: &str| s.replace("p@ss_w0rd", "<redacted sha256:1234abcd>");
        let body = report_body(&r, COMMENT_LIMIT, FullReport::default(), &scrub);
        assert!(
            !body.contains("ss_w0rd") && !body.contains("ss\\_w0rd"),
            "{body}"
        );
        assert!(body.contains("&lt;redacted sha256:1234abcd&gt;"), "{body}");
        // A scrubber that makes text longer never makes the body too long.
        let long = |s: &str| s.replace('e', "eeeeeeeeee");
        let body = report_body(&r, 2_000, FullReport::default(), &long);
        assert!(body.len() <= 2_000, "{}", body.len());
    }
}
