//! The command side of saved plans: `diff --out` / `deploy --dry-run --out` write the plan
//! file and print its digest; `deploy --plan` reads it and refuses, before any cluster is
//! asked, a plan for another app, config or targets, an old one, one of another version, and
//! manifests that render differently now. What the clusters say is checked by the engine
//! under the locks (`engine::fleet`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cli::DeployArgs;
use crate::engine::plan::Plan;
use crate::engine::saved_plan::verify::{ThisRun, manifests_moved, not_this_run};
use crate::engine::saved_plan::{PlanToApply, Provenance, SavedPlan, config_digest};
use crate::error::Error;
use crate::github::context::PrSource;
use crate::report::plan::ChangePlan;
use crate::report::redact;

/// `--plan-max-age` when not given.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The config file this run read (as `commands::deploy::read_plan` found it).
fn config_file(args: &DeployArgs, plan: &Plan) -> PathBuf {
    let lookup = |k: &str| plan.env.get(k).cloned();
    crate::config::config_path(args.selection.files.config.as_deref(), &lookup)
}

/// The pull request number of this run, when GitHub's context names one.
fn pr_number(args: &DeployArgs, plan: &Plan) -> Option<u64> {
    match crate::commands::deploy::github_context(args, plan).pr {
        PrSource::Number(n) => Some(n),
        _ => None,
    }
}

/// `--out`: saves the dry run's plan and prints its digest; the digest goes into the
/// printed plan and its PR comment (`saved_as`). Nothing without `--out`.
pub fn save(args: &DeployArgs, plan: &Plan, change_plan: &mut ChangePlan) -> Result<(), Error> {
    let Some(path) = &args.plan_output.out else {
        return Ok(());
    };
    let provenance = Provenance {
        config_digest: config_digest(&config_file(args, plan))?,
        made_at: jiff::Timestamp::now(),
        pr: pr_number(args, plan),
        prune: plan.options.prune,
    };
    let saved = SavedPlan::from_dry_run(change_plan, &plan.manifests, provenance, path)?;
    saved.write(path)?;
    let digest = saved.digest();
    redact::print_err(&format!(
        "rollguard: plan saved to {}: {digest} (apply it with `rollguard deploy --plan {}`)",
        path.display(),
        path.display()
    ));
    change_plan.saved_as = Some(digest);
    Ok(())
}

/// `deploy --plan`: the plan file read and checked against this run and the manifests
/// rendered now, into the plan the engine runs (which checks the live objects under the
/// locks). Without `--plan`, the plan as it was (`--out` without `--dry-run` is refused).
pub fn attach(args: &DeployArgs, mut plan: Plan) -> Result<Plan, Error> {
    let Some(path) = &args.saved.plan else {
        if args.plan_output.out.is_some() {
            return Err(Error::Usage(
                "--out saves the plan of a dry run: add --dry-run (or run `rollguard diff --out`)"
                    .into(),
            ));
        }
        return Ok(plan);
    };
    let saved = SavedPlan::read(path)?;
    let config_path = config_file(args, &plan);
    let digest_now = config_digest(&config_path)?;
    let config_shown = config_path.display().to_string();
    let run = ThisRun {
        app: &plan.config.app,
        config_digest: &digest_now,
        config_path: &config_shown,
        targets: plan
            .config
            .targets
            .iter()
            .map(|t| t.name.as_str())
            .collect(),
        now: jiff::Timestamp::now(),
        max_age: args.saved.plan_max_age.unwrap_or(DEFAULT_MAX_AGE),
        prune: plan.options.prune,
    };
    let mut reasons: Vec<String> = not_this_run(&saved, &run)
        .iter()
        .map(ToString::to_string)
        .collect();
    let now = crate::engine::saved_plan::planned_manifests(&plan.manifests);
    let moved: Vec<String> = manifests_moved(&saved.manifests, &now)
        .iter()
        .map(ToString::to_string)
        .collect();
    // With --replan, manifests that moved are re-planned under the locks like live objects.
    if args.saved.replan {
        for m in &moved {
            redact::print_err(&format!("rollguard: {m}: re-planning"));
        }
    } else {
        reasons.extend(moved);
    }
    if !reasons.is_empty() {
        return Err(Error::PlanRefused {
            path: path.clone(),
            reasons,
        });
    }
    let digest = saved.digest();
    let pr = saved.pr.map(|n| format!(" on PR #{n}")).unwrap_or_default();
    redact::print_err(&format!(
        "rollguard: applying plan {digest} made at {}{pr} ({})",
        saved.made_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        path.display()
    ));
    plan.options.saved_plan = Some(Arc::new(PlanToApply {
        plan: saved,
        digest,
        replan: args.saved.replan,
        yes: args.saved.yes,
    }));
    Ok(plan)
}

/// `plan --offline --out` is refused: an offline plan asked no cluster, so it has no live
/// objects to hold a deploy to.
pub fn refuse_offline_out(out: Option<&Path>) -> Result<(), Error> {
    match out {
        Some(_) => Err(Error::Usage(
            "--out saves a plan the clusters answered and `plan --offline` asks none: drop --offline, or drop --out".into(),
        )),
        None => Ok(()),
    }
}
