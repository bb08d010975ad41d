//! `rollguard check`: every check (`checks:`) once now against every selected target, to try
//! a config before a deploy. One line per target and check, e.g.
//! `canary  error-rate  0.2 > 0.01  failed`; exit 0 when all pass, 1 otherwise, 2 on a bad
//! config (checked before anything is asked).

use std::collections::HashMap;

use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::checks::judge::{self, format_value};
use crate::checks::{CheckRunner, PreparedCheck, prepare};
use crate::cli::CheckArgs;
use crate::config::{self, CheckSource, Overrides};
use crate::error::{Error, exit};
use crate::report::{CheckSample, CheckVerdict};

/// Runs `rollguard check`.
pub async fn run(args: CheckArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(args.selection.files.config.as_deref(), &lookup);
    let overrides = Overrides {
        kubeconfig: args.selection.files.kubeconfig.clone(),
        targets: args.selection.targets.clone(),
        ..Overrides::default()
    };
    let config = config::load(&path, &overrides, &lookup)?;
    if !config.check_env_issues.is_empty() {
        return Err(config::ConfigError::Invalid(config.check_env_issues).into());
    }
    // {{commit}} as a deploy in CI would have it; {{revision}} is the deploy's own, unknown here.
    let commit = lookup("GITHUB_SHA");
    let runner = CheckRunner::new();
    let cancel = CancellationToken::new();
    let mut rows: Vec<(String, PreparedCheck)> = Vec::new();
    for target in &config.targets {
        let values = crate::checks::run::values(&config, target, None, commit.as_deref());
        for prepared in prepare(&config, target, &values) {
            rows.push((target.name.clone(), prepared));
        }
    }
    if rows.is_empty() {
        crate::report::redact::print_err(&format!(
            "rollguard: no checks: {} has no `checks:` for the selected targets",
            path.display()
        ));
        return Ok(exit::OK);
    }
    let samples = join_all(rows.iter().map(|(_, prepared)| async {
        let reading = runner.read(prepared, &cancel).await?;
        Some(judge::judge(
            &prepared.check,
            &reading,
            jiff::Timestamp::now(),
        ))
    }))
    .await;
    let lines: Vec<[String; 4]> = rows
        .iter()
        .zip(&samples)
        .map(|((target, prepared), sample)| line(target, prepared, sample.as_ref()))
        .collect();
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for [target, name, value, verdict] in &lines {
        crate::report::redact::print_out(&format!(
            "{target:<w0$}  {name:<w1$}  {value:<w2$}  {verdict}",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        ));
    }
    let all_passed = samples.iter().all(|s| {
        s.as_ref()
            .is_some_and(|s| s.verdict == CheckVerdict::Passed)
    });
    Ok(if all_passed { exit::OK } else { exit::FAILED })
}

/// `[target, check, what it read, verdict]`.
fn line(target: &str, prepared: &PreparedCheck, sample: Option<&CheckSample>) -> [String; 4] {
    let check = &prepared.check;
    let Some(sample) = sample else {
        return [
            target.into(),
            check.name.clone(),
            "-".into(),
            "not run".into(),
        ];
    };
    let value = match (sample.value, &check.source, &check.fail_if) {
        (Some(v), CheckSource::Prometheus(_), Some(f))
            if sample.verdict == CheckVerdict::Failed =>
        {
            format!("{} {f}", format_value(v))
        }
        (Some(v), CheckSource::Prometheus(_), Some(f)) => {
            format!("{} (fails if {f})", format_value(v))
        }
        (Some(v), _, _) => match &sample.note {
            Some(note) => format!("{} ({note})", format_value(v)),
            None => format_value(v),
        },
        (None, _, _) => sample.note.clone().unwrap_or_else(|| "no value".into()),
    };
    let verdict = match sample.verdict {
        CheckVerdict::Passed => "passed",
        CheckVerdict::Failed => "failed",
        CheckVerdict::Inconclusive => "inconclusive",
        CheckVerdict::NotRun => "not run",
    };
    [target.into(), check.name.clone(), value, verdict.into()]
}
