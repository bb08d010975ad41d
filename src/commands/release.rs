//! The release commands for humans: `history`, `show`, `rollback`, `unlock`.
//!
//! Formatting is pure (tested by table); the commands connect to each selected target, read
//! its records, and for `rollback` re-apply a chosen revision as a new one.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;

use serde_json::Value;
use tokio::time::Instant;

use crate::cli::{
    HistoryArgs, ReleaseCommand, RollbackArgs, Selection, ShowArgs, ShowFormat, UnlockArgs,
};
use crate::config::{self, Config, ConfigError, Overrides, TargetConfig};
use crate::engine::policy::{self, RollbackResult};
use crate::engine::reapply::{self, ReApply};
use crate::error::exit;
use crate::kube::connect::{ClusterAccess, connect};
use crate::release::lock::{self, Lock, LockGuard, LockOptions};
use crate::release::session::ReleaseSettings;
use crate::release::{self, ReleaseOrigin, ReleaseRecord, ReleaseStore};
use crate::report::redact;
use crate::util::duration::format_duration;
use crate::util::git::{self, CommitInfo};

/// Short commit for a table: "abc1234 first line" (trimmed to 50 chars).
pub fn short_commit(record: &ReleaseRecord) -> String {
    let Some(commit) = &record.commit else {
        return "-".to_string();
    };
    let sha: String = commit.sha.chars().take(7).collect();
    match &commit.message {
        Some(m) if !m.is_empty() => {
            let mut text = format!("{sha} {m}");
            if text.chars().count() > 50 {
                text = text.chars().take(49).collect::<String>() + "…";
            }
            text
        }
        _ => sha,
    }
}

/// The `history` table of one target, oldest first.
pub fn history_table(target: &str, records: &[ReleaseRecord]) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "REVISION".into(),
        "STATUS".into(),
        "COMMIT".into(),
        "STARTED".into(),
        "DURATION".into(),
        "NOTE".into(),
    ]];
    for r in records {
        rows.push([
            r.revision.to_string(),
            r.status.to_string(),
            short_commit(r),
            format!("{:.0}", r.started_at),
            r.duration()
                .map(format_duration)
                .unwrap_or_else(|| "-".into()),
            r.note(),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = format!("target {target}:\n");
    if records.is_empty() {
        out.push_str("  no releases recorded\n");
        return out;
    }
    for row in &rows {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            line.push(' ');
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A record as shown to humans: manifests named as applied, Secret values redacted.
pub fn redacted_record(record: &ReleaseRecord) -> ReleaseRecord {
    let mut out = record.clone();
    if let Some(manifests) = &out.manifests {
        let mut shown = redact::redact_objects(manifests);
        crate::release::fill_namespaces(&mut shown, &record.objects);
        out.manifests = Some(shown);
    }
    out
}

/// `show` output: the record (Secret values redacted). YAML: the record without its
/// manifests, then each manifest as its own document; JSON: one object.
pub fn render_show(record: &ReleaseRecord, format: ShowFormat) -> Result<String, String> {
    let shown = redacted_record(record);
    match format {
        ShowFormat::Json => serde_json::to_string_pretty(&shown).map_err(|e| e.to_string()),
        ShowFormat::Yaml => {
            let mut head = shown.clone();
            head.manifests = None;
            let mut out = serde_saphyr::to_string(&head).map_err(|e| e.to_string())?;
            for manifest in shown.manifests.iter().flatten() {
                if !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(manifest).map_err(|e| e.to_string())?);
            }
            Ok(out)
        }
    }
}

/// What a rollback to `to` would change, for the confirmation prompt: objects whose bodies
/// differ between the current manifests and the destination's, and those only one side has
/// (the latter stay in place: rollback never prunes). Secret values are not compared in
/// the text, only named.
pub fn change_summary(current: Option<&ReleaseRecord>, to: &ReleaseRecord) -> Vec<String> {
    let now = named_bodies(current);
    let then = named_bodies(Some(to));
    let mut lines = Vec::new();
    for (name, body) in &then {
        match now.iter().find(|(n, _)| n == name) {
            None => lines.push(format!("  + {name} (created)")),
            Some((_, current_body)) if current_body != body => {
                lines.push(format!("  ~ {name} (changed)"))
            }
            Some(_) => {}
        }
    }
    for name in left_in_place(current, to) {
        lines.push(format!(
            "  = {name} (not in v{}; left in place)",
            to.revision
        ));
    }
    lines
}

/// A record's manifests by name ("Deployment shop/web"), namespaces filled in as applied.
fn named_bodies(r: Option<&ReleaseRecord>) -> Vec<(String, Value)> {
    let Some(r) = r else { return Vec::new() };
    let mut bodies = r.manifests.clone().unwrap_or_default();
    crate::release::fill_namespaces(&mut bodies, &r.objects);
    bodies
        .into_iter()
        .filter_map(|b| crate::release::ObjectRef::from_body(&b).map(|o| (o.to_string(), b)))
        .collect()
}

/// Objects of the current release that `to` lacks: a rollback leaves them in place.
pub fn left_in_place(current: Option<&ReleaseRecord>, to: &ReleaseRecord) -> Vec<String> {
    let then = named_bodies(Some(to));
    named_bodies(current)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !then.iter().any(|(n, _)| n == name))
        .collect()
}

/// Run a release command; returns the exit code (errors are printed).
pub async fn run(command: ReleaseCommand, env: HashMap<String, String>) -> i32 {
    let result = match command {
        ReleaseCommand::History(args) => history(args, env).await,
        ReleaseCommand::Show(args) => show(args, env).await,
        ReleaseCommand::Rollback(args) => rollback(args, env).await,
        ReleaseCommand::Unlock(args) => unlock(args, env).await,
    };
    result.unwrap_or_else(|e| {
        redact::print_err(&format!("rollguard: {e}"));
        e.exit_code()
    })
}

/// A command's failure that is not about one target.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ManageError {
    pub fn exit_code(&self) -> i32 {
        exit::BAD_INPUT
    }
}

type Env = HashMap<String, String>;

fn load_config(selection: &Selection, env: &Env) -> Result<Config, ManageError> {
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(selection.files.config.as_deref(), &lookup);
    let overrides = Overrides {
        kubeconfig: selection.files.kubeconfig.clone(),
        ..Overrides::default()
    };
    Ok(config::load(&path, &overrides, &lookup)?)
}

/// The targets named by `--target` (by name or context), or all of them.
pub fn select_targets(
    config: &Config,
    wanted: &[String],
) -> Result<Vec<TargetConfig>, ManageError> {
    if wanted.is_empty() {
        return Ok(config.targets.clone());
    }
    let mut out = Vec::new();
    for name in wanted {
        let found = config
            .targets
            .iter()
            .find(|t| &t.name == name || t.context.as_deref() == Some(name.as_str()))
            .ok_or_else(|| {
                let names: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
                ManageError::Usage(format!(
                    "--target {name}: no such target in the config (targets: {})",
                    names.join(", ")
                ))
            })?;
        out.push(found.clone());
    }
    Ok(out)
}

/// One connected target with its release store.
struct Connected {
    target: TargetConfig,
    access: ClusterAccess,
    store: ReleaseStore,
    namespace: String,
}

async fn connect_all(
    config: &Config,
    targets: &[TargetConfig],
    cli_kubeconfig: Option<&Path>,
    env: &Env,
) -> Vec<Result<Connected, String>> {
    let lookup = |k: &str| env.get(k).cloned();
    let settings = ReleaseSettings::from_config(config);
    // Nothing cancels these commands (a signal ends the process); connect wants a token.
    let never = tokio_util::sync::CancellationToken::new();
    futures::future::join_all(targets.iter().map(|target| async {
        let access = connect(target, cli_kubeconfig, &config.base_dir, &lookup, &never)
            .await
            .map_err(|e| format!("target {}: {e}", target.name))?;
        let namespace = config.history_namespace(target, &access.context_namespace);
        let store = ReleaseStore::new(
            access.client.clone(),
            &config.app,
            &namespace,
            settings.keep,
        );
        Ok(Connected {
            target: target.clone(),
            access,
            store,
            namespace,
        })
    }))
    .await
}

/// `rollguard history`: every target's records, oldest first.
pub async fn history(args: HistoryArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let targets = select_targets(&config, &args.selection.targets)?;
    let mut code = exit::OK;
    for connected in connect_all(&config, &targets, config.kubeconfig.as_deref(), &env).await {
        match connected {
            Ok(c) => match c.store.list().await {
                Ok(records) => {
                    redact::print_out(history_table(&c.target.name, &records).trim_end())
                }
                Err(e) => {
                    redact::print_err(&format!("target {}: {e}", c.target.name));
                    code = exit::FAILED;
                }
            },
            Err(e) => {
                redact::print_err(&e);
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

/// `rollguard show --revision N`: the record with its manifests, Secret values redacted.
pub async fn show(args: ShowArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let targets = select_targets(&config, &args.selection.targets)?;
    let several = targets.len() > 1;
    let mut code = exit::OK;
    for connected in connect_all(&config, &targets, config.kubeconfig.as_deref(), &env).await {
        let c = match connected {
            Ok(c) => c,
            Err(e) => {
                redact::print_err(&e);
                code = exit::FAILED;
                continue;
            }
        };
        let fetched = c.store.get(args.revision).await;
        if let Ok(record) = &fetched {
            // Structure redacts; the scrubber is the second line for the printed text.
            redact::learn(record.manifests.iter().flatten());
        }
        match fetched {
            Ok(record) => match render_show(&record, args.output) {
                Ok(text) => {
                    if several && args.output == ShowFormat::Yaml {
                        println!("# target {}", c.target.name);
                    }
                    redact::print_out(text.trim_end());
                }
                Err(e) => {
                    eprintln!(
                        "target {}: cannot render v{}: {e}",
                        c.target.name, args.revision
                    );
                    code = exit::FAILED;
                }
            },
            Err(e) => {
                redact::print_err(&format!("target {}: {e}", c.target.name));
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

/// `rollguard unlock`: force-release the lock on each selected target.
pub async fn unlock(args: UnlockArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let targets = select_targets(&config, &args.selection.targets)?;
    let mut code = exit::OK;
    for connected in connect_all(&config, &targets, config.kubeconfig.as_deref(), &env).await {
        let c = match connected {
            Ok(c) => c,
            Err(e) => {
                redact::print_err(&e);
                code = exit::FAILED;
                continue;
            }
        };
        match lock::force_unlock(c.access.client.clone(), &config.app, &c.namespace).await {
            Ok(unlocked) => match unlocked.previous {
                Some(previous) => println!(
                    "target {}: released lock {} in namespace {} (held by {}{})",
                    c.target.name,
                    unlocked.lease,
                    unlocked.namespace,
                    previous.holder.as_deref().unwrap_or("nobody"),
                    previous
                        .acquired_at
                        .map(|t| format!(" since {t:.0}"))
                        .unwrap_or_default()
                ),
                None => println!(
                    "target {}: no lock {} in namespace {}",
                    c.target.name, unlocked.lease, unlocked.namespace
                ),
            },
            Err(e) => {
                redact::print_err(&format!("target {}: {e}", c.target.name));
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

/// One target's planned manual rollback.
struct Planned {
    connected: Connected,
    lock: Option<LockGuard>,
    /// The revisions kept on the target (the rollback's number is above every target's).
    revisions: Vec<u64>,
    bodies: Vec<Value>,
    commit: Option<CommitInfo>,
    origin: ReleaseOrigin,
    destination: String,
    default_namespace: String,
    changes: Vec<String>,
    /// Objects of the current release the destination lacks (left in place).
    left_in_place: Vec<String>,
    headline: String,
    /// The revision rolled back from and the script stages it ran (their rollback commands
    /// run after the manifests).
    from_revision: Option<u64>,
    ran: Vec<crate::report::StageResult>,
}

/// `rollguard rollback`: re-apply an earlier revision (or a commit's manifests) as a new one.
pub async fn rollback(args: RollbackArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let targets = select_targets(&config, &args.selection.targets)?;
    let settings = ReleaseSettings::from_config(&config);
    let lookup = |k: &str| env.get(k).cloned();
    // A rollback writes: bad access on any selected target is bad input before the first write.
    crate::kube::connect::check_targets(&config, &targets, &lookup)?;

    // From git: the same manifests and commit for every target, read once.
    let from_git = match &args.from_git {
        Some(sha) => {
            let bodies = reapply::manifests_from_git_off_runtime(&config, sha)
                .await
                .map_err(ManageError::Usage)?;
            let (base_dir, sha_text) = (config.base_dir.clone(), sha.clone());
            let commit =
                tokio::task::spawn_blocking(move || git::commit_info(&base_dir, &sha_text))
                    .await
                    .ok()
                    .and_then(Result::ok);
            Some((bodies, commit))
        }
        None => None,
    };

    let holder = lock::holder_identity(&lookup);
    let lock_options = LockOptions::from_env(settings.lock_timeout, &lookup);
    let connected = connect_all(&config, &targets, config.kubeconfig.as_deref(), &env).await;
    // The locks first, one at a time in the global lock order (as a deploy takes them), so
    // that a rollback and a deploy over the same clusters never wait for each other in a
    // cycle.
    let mut locks: Vec<Option<Result<LockGuard, String>>> =
        connected.iter().map(|_| None).collect();
    if !args.dry_run {
        let reachable: Vec<usize> = (0..connected.len())
            .filter(|i| connected[*i].is_ok())
            .collect();
        let keys: Vec<(String, String)> = reachable
            .iter()
            .filter_map(|i| connected[*i].as_ref().ok())
            .map(|c| lock::lock_key(&c.access.server, &c.namespace))
            .collect();
        let mut gave_up = false;
        for position in lock::lock_order(&keys) {
            let i = reachable[position];
            let Ok(c) = &connected[i] else { continue };
            if gave_up {
                locks[i] = Some(Err(format!(
                    "target {}: not rolled back: another target's lock could not be taken",
                    c.target.name
                )));
                continue;
            }
            let taken = Lock::acquire(
                c.access.client.clone(),
                &config.app,
                &c.namespace,
                &holder,
                &lock_options,
            )
            .await
            .map_err(|e| format!("target {}: {e}", c.target.name));
            gave_up = taken.is_err();
            locks[i] = Some(taken);
        }
        if gave_up {
            for slot in locks.iter_mut() {
                if let Some(Ok(_)) = slot
                    && let Some(Ok(guard)) = slot.take()
                {
                    let _ = guard.release().await;
                    *slot = Some(Err(
                        "not rolled back: another target's lock could not be taken".into(),
                    ));
                }
            }
        }
    }
    let plans = futures::future::join_all(connected.into_iter().zip(locks).map(|(c, lock)| {
        let (config, from_git, args) = (&config, &from_git, &args);
        async move {
            let c = c.map_err(|e| (e, exit::FAILED))?;
            let name = c.target.name.clone();
            let lock = match lock {
                Some(Ok(lock)) => Some(lock),
                Some(Err(why)) => return Err((why, exit::FAILED)),
                None => None,
            };
            let planned = plan_one(config, c, args, from_git).await;
            match planned {
                Ok(mut p) => {
                    p.lock = lock;
                    Ok(p)
                }
                Err(e) => {
                    if let Some(lock) = lock {
                        let _ = lock.release().await;
                    }
                    Err((format!("target {name}: {}", e.0), e.1))
                }
            }
        }
    }))
    .await;

    let mut ready = Vec::new();
    let mut problems = Vec::new();
    for plan in plans {
        match plan {
            Ok(p) => ready.push(p),
            Err(e) => problems.push(e),
        }
    }
    // The manifests of both sides may hold Secrets: the scrubber knows them before output.
    for p in &ready {
        redact::learn(p.bodies.iter());
    }
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let mut plan_failed = false;
    if problems.is_empty() && (args.dry_run || interactive) {
        // What the clusters say a rollback would change: the same diff as `rollguard diff`.
        let deadline = Instant::now() + settings.rollback_timeout;
        let plan = rollback_plan(&config, &ready, args.force_conflicts, deadline).await;
        for p in &ready {
            redact::print_out(&p.headline);
        }
        crate::commands::diff::print_plan(&plan, crate::cli::PlanFormat::Text, &lookup);
        plan_failed = plan.has_errors();
    } else {
        for p in &ready {
            redact::print_out(&p.headline);
            for line in &p.changes {
                redact::print_out(line);
            }
        }
    }
    for (e, _) in &problems {
        redact::print_err(e);
    }
    let release_all = |ready: Vec<Planned>| async move {
        for p in ready {
            if let Some(lock) = p.lock {
                let _ = lock.release().await;
            }
        }
    };
    if !problems.is_empty() {
        release_all(ready).await;
        // Unreachable targets fail (1); a refused choice is bad input (2).
        let code = problems
            .iter()
            .map(|(_, c)| *c)
            .min()
            .unwrap_or(exit::FAILED);
        return Ok(code);
    }
    if args.dry_run {
        println!("dry run: nothing changed");
        return Ok(if plan_failed { exit::FAILED } else { exit::OK });
    }
    if interactive && !confirm(ready.len()) {
        release_all(ready).await;
        println!("nothing changed");
        return Ok(exit::OK);
    }

    let run = release::RunInfo::from_env(&lookup);
    let deadline = Instant::now() + settings.rollback_timeout;
    // One number for this rollback on every target, as a deploy's.
    let revision = release::fleet_revision(
        &ready
            .iter()
            .map(|p| p.revisions.clone())
            .collect::<Vec<_>>(),
    );
    let results = futures::future::join_all(ready.iter().map(|p| {
        ReApply {
            access: &p.connected.access,
            store: &p.connected.store,
            target: &p.connected.target.name,
            default_namespace: p.default_namespace.clone(),
            bodies: p.bodies.clone(),
            commit: p.commit.clone(),
            origin: p.origin,
            revision: Some(revision),
            destination: p.destination.clone(),
            timeout: settings.rollback_timeout,
            deadline,
            cancelled: false,
            stop: tokio_util::sync::CancellationToken::new(),
            lost: p
                .lock
                .as_ref()
                .map(lock::LockGuard::lost_token)
                .unwrap_or_default(),
            field_manager: crate::kube::apply::field_manager(&config.app),
            force_conflicts: args.force_conflicts,
            fail_fast: config.wait.fail_fast.clone(),
            run: run.clone(),
        }
        .run()
    }))
    .await;
    let mut summary = Vec::new();
    for (p, result) in ready.iter().zip(&results) {
        let name = &p.connected.target.name;
        match result {
            Ok(recorded) => {
                println!(
                    "target {name}: rolled back to {} (recorded as v{recorded})",
                    p.destination
                );
                if let Some(note) = release::revision_moved("the rollback", revision, *recorded) {
                    println!("target {name}: {note}");
                }
            }
            Err((why, _)) => redact::print_out(&format!("target {name}: rollback failed: {why}")),
        }
        summary.push(RollbackResult {
            target: name.clone(),
            ok: result.is_ok(),
            message: result.as_ref().err().map(|(why, _)| why.clone()),
        });
    }
    // The script stages the rolled-back revisions ran: their rollback commands, after the
    // manifests (the commands come from this config, by stage name: a record in the
    // cluster never decides what runs here).
    let due: Vec<_> = ready
        .iter()
        .filter(|p| !p.ran.is_empty())
        .map(|p| {
            (
                p.connected.target.clone(),
                p.connected.access.clone(),
                p.from_revision.unwrap_or(0),
                p.ran.clone(),
            )
        })
        .collect();
    let names: Vec<String> = due.iter().map(|d| d.0.name.clone()).collect();
    let mut plan = crate::engine::plan::Plan::new(
        config.clone(),
        crate::manifests::ManifestSet {
            objects: Vec::new(),
        },
        None,
        crate::engine::plan::DeployOptions::default(),
        env.clone(),
    );
    // What the commands print is scrubbed of the Secret values of the revision gone back to.
    plan.scripts.scrubber =
        crate::report::redact::Scrubber::from_objects(ready.iter().flat_map(|p| p.bodies.iter()));
    let mut commands_ok = true;
    for (name, results) in names
        .iter()
        .zip(crate::engine::scripts::manual_stage_rollbacks(&plan, due).await)
    {
        for r in results {
            let ok = r.outcome == crate::report::StageOutcome::Succeeded;
            commands_ok &= ok;
            redact::print_out(&format!(
                "target {name}: rollback command of stage {} ({}): {}{}",
                r.name,
                r.scope,
                r.outcome.as_str(),
                r.message.map(|m| format!(": {m}")).unwrap_or_default()
            ));
        }
    }
    redact::print_out(&policy::summary(&summary));
    release_all(ready).await;
    Ok(if commands_ok && results.iter().all(Result::is_ok) {
        exit::OK
    } else {
        exit::ROLLBACK_FAILED
    })
}

/// Every ready target's rollback plan at once: its live objects against the destination's
/// manifests, by server-side dry run; what only the current release has stays in place.
async fn rollback_plan(
    config: &Config,
    ready: &[Planned],
    force: bool,
    deadline: Instant,
) -> crate::report::ChangePlan {
    use crate::report::plan::{PlanMode, TargetPlan};
    let cancel = tokio_util::sync::CancellationToken::new();
    let targets = futures::future::join_all(ready.iter().map(|p| {
        let set = crate::engine::reapply::manifest_set_from_bodies(&p.bodies, &p.destination);
        let cancel = cancel.clone();
        async move {
            let mut start = TargetPlan::new(p.connected.target.name.clone());
            start.to = Some(p.destination.clone());
            let mut plan = crate::commands::diff::diff_target(
                &p.connected.access,
                &set,
                p.default_namespace.clone(),
                force,
                crate::kube::apply::field_manager(&config.app),
                deadline,
                ("live".to_string(), p.destination.clone()),
                &cancel,
                start,
            )
            .await;
            plan.dropped = p.left_in_place.clone();
            plan
        }
    }))
    .await;
    crate::report::ChangePlan::new(config.app.clone(), PlanMode::Rollback, None, targets)
}

/// Choose the destination of one target and describe the change.
async fn plan_one(
    config: &Config,
    connected: Connected,
    args: &RollbackArgs,
    from_git: &Option<(Vec<Value>, Option<CommitInfo>)>,
) -> Result<Planned, (String, i32)> {
    let store = &connected.store;
    let unreachable = |e: release::ReleaseError| (e.to_string(), exit::FAILED);
    let abandoned = store.mark_abandoned().await.map_err(unreachable)?;
    let records = store.list().await.map_err(unreachable)?;
    // A list holds no manifests; the change summary compares the current ones.
    let current = match records.iter().map(|r| r.revision).max() {
        Some(revision) => Some(store.get(revision).await.map_err(unreachable)?),
        None => None,
    };
    let default_namespace =
        config.default_namespace(&connected.target, &connected.access.context_namespace);
    let name = connected.target.name.clone();
    let from = current
        .as_ref()
        .map(|c| format!("v{} ({})", c.revision, c.status))
        .unwrap_or_else(|| "no recorded release".to_string());
    let mut planned = match from_git {
        Some((bodies, commit)) => {
            let sha = args.from_git.clone().unwrap_or_default();
            let short: String = sha.chars().take(7).collect();
            let mut pseudo = current.clone().unwrap_or_else(|| empty_record(config));
            pseudo.revision = 0;
            pseudo.manifests = Some(bodies.clone());
            Planned {
                changes: change_summary(current.as_ref(), &pseudo),
                left_in_place: left_in_place(current.as_ref(), &pseudo),
                headline: format!("target {name}: {from} -> commit {short}"),
                bodies: bodies.clone(),
                commit: commit.clone(),
                origin: ReleaseOrigin::ManualFromGit,
                destination: format!("commit {short}"),
                default_namespace,
                lock: None,
                revisions: records.iter().map(|r| r.revision).collect(),
                connected,
                from_revision: None,
                ran: Vec::new(),
            }
        }
        None => {
            let revision = policy::choose_manual_target(&records, args.revision, args.force)
                .map_err(|e| (e.to_string(), exit::BAD_INPUT))?;
            let to = store.get(revision).await.map_err(unreachable)?;
            let bodies = reapply::record_manifests(config, &to)
                .await
                .map_err(|e| (e, exit::BAD_INPUT))?;
            let mut with_bodies = to.clone();
            with_bodies.manifests = Some(bodies.clone());
            Planned {
                changes: change_summary(current.as_ref(), &with_bodies),
                left_in_place: left_in_place(current.as_ref(), &with_bodies),
                headline: format!(
                    "target {name}: {from} -> v{revision} ({}, {})",
                    to.status,
                    short_commit(&to)
                ),
                bodies,
                commit: to.commit.clone(),
                origin: ReleaseOrigin::ManualRollback { to: revision },
                destination: format!("v{revision}"),
                default_namespace: to.default_namespace.clone().unwrap_or(default_namespace),
                lock: None,
                revisions: records.iter().map(|r| r.revision).collect(),
                connected,
                from_revision: None,
                ran: Vec::new(),
            }
        }
    };
    // The revision rolled back from: its script stages' rollback commands are due too.
    if let Some(current) = &current {
        planned.from_revision = Some(current.revision);
        planned.ran = current.stages.clone();
        let due = crate::stages::plan::due_rollback_names(&config.pipeline, &current.stages);
        if !due.is_empty() {
            planned.changes.push(format!(
                "  then the rollback commands of the script stages v{} ran: {}",
                current.revision,
                due.join(", ")
            ));
        }
    }
    if !abandoned.is_empty() {
        planned.headline.push_str(&format!(
            " (marked abandoned: {})",
            abandoned
                .iter()
                .map(|r| format!("v{r}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(planned)
}

fn empty_record(config: &Config) -> ReleaseRecord {
    ReleaseRecord {
        app: config.app.clone(),
        target: None,
        revision: 0,
        status: release::ReleaseStatus::Pending,
        reason: None,
        kind: release::ReleaseKind::ManualRollback,
        rollback_of: None,
        commit: None,
        started_at: jiff::Timestamp::now(),
        finished_at: None,
        run: release::RunInfo::default(),
        digest: None,
        default_namespace: None,
        objects: Vec::new(),
        manifests: None,
        manifests_omitted: false,
        stages: Vec::new(),
    }
}

/// Ask on the terminal; anything but y/yes is no.
fn confirm(targets: usize) -> bool {
    eprint!("Roll back {targets} target(s)? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::ReleaseStatus;
    use serde_json::json;

    fn rec(revision: u64, status: ReleaseStatus) -> ReleaseRecord {
        ReleaseRecord {
            target: Some("eu".into()),
            commit: Some(CommitInfo {
                sha: "0123456789abcdef".into(),
                r#ref: None,
                message: Some("bump web to v2".into()),
            }),
            started_at: "2026-11-30T09:00:00Z".parse().unwrap(),
            finished_at: Some("2026-11-30T09:01:05Z".parse().unwrap()),
            manifests: Some(vec![
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"},
                       "stringData": {"password": "hunter2"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"},
                       "data": {"a": "1"}}),
            ]),
            ..ReleaseRecord::for_test(revision, status)
        }
    }

    fn config_with(yaml: &str) -> Config {
        config::parse(
            yaml,
            Path::new("/x/rollguard.yaml"),
            &Overrides::default(),
            &|_| None,
        )
        .unwrap()
    }

    #[test]
    fn targets_selected_by_name_or_context() {
        let config = config_with(
            "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - {name: eu, context: sim-1}\n  - {name: us, context: sim-2}\n",
        );
        let names = |wanted: &[&str]| -> Result<Vec<String>, String> {
            let wanted: Vec<String> = wanted.iter().map(|s| s.to_string()).collect();
            select_targets(&config, &wanted)
                .map(|ts| ts.into_iter().map(|t| t.name).collect())
                .map_err(|e| e.to_string())
        };
        assert_eq!(names(&[]), Ok(vec!["eu".into(), "us".into()]));
        assert_eq!(names(&["us"]), Ok(vec!["us".into()]));
        assert_eq!(names(&["sim-1"]), Ok(vec!["eu".into()]));
        let err = names(&["ap"]).unwrap_err();
        assert!(
            err.contains("--target ap") && err.contains("eu, us"),
            "{err}"
        );
    }

    #[test]
    fn history_lists_every_revision() {
        let mut failed = rec(2, ReleaseStatus::Failed);
        failed.reason = Some("abandoned".into());
        failed.finished_at = None;
        let text = history_table("eu", &[rec(1, ReleaseStatus::Deployed), failed]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "target eu:");
        assert!(lines[1].contains("REVISION") && lines[1].contains("NOTE"));
        assert!(lines[2].contains("deployed") && lines[2].contains("0123456 bump web to v2"));
        assert!(lines[2].contains("1m5s"), "{}", lines[2]);
        assert!(lines[3].contains("failed") && lines[3].ends_with("abandoned"));
        assert!(history_table("us", &[]).contains("no releases recorded"));
    }

    #[test]
    fn show_redacts_in_both_formats() {
        let r = rec(1, ReleaseStatus::Deployed);
        for format in [ShowFormat::Yaml, ShowFormat::Json] {
            let text = render_show(&r, format).unwrap();
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains(&redact::marker(b"hunter2")), "{text}");
            assert!(text.contains("cfg"));
        }
        let yaml = render_show(&r, ShowFormat::Yaml).unwrap();
        assert_eq!(yaml.matches("\n---\n").count(), 2, "{yaml}");
    }

    #[test]
    fn changes_for_prompt() {
        let current = rec(3, ReleaseStatus::Deployed);
        let mut to = rec(1, ReleaseStatus::Superseded);
        let manifests = to.manifests.as_mut().unwrap();
        manifests[1]["data"]["a"] = json!("2");
        manifests.remove(0);
        manifests.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "shop"}}));
        let lines = change_summary(Some(&current), &to);
        assert_eq!(
            lines,
            vec![
                "  ~ ConfigMap shop/cfg (changed)",
                "  + ConfigMap shop/old (created)",
                "  = Secret shop/db (not in v1; left in place)",
            ]
        );
    }
}
