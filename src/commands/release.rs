//! The release commands for humans: `history`, `show`, `rollback`, `unlock`.
//!
//! Formatting is pure (tested by table); the commands connect to each selected target, read
//! its records, and for `rollback` re-apply a chosen revision as a new one through the
//! deploy's coordinator. Every target
//! problem is said as deploy says it: the config and each target's kubeconfig are checked
//! offline first (bad input, exit 2), and an error of a cluster is said through
//! `kube::connect`'s one table of reasons, with the server's address.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use tokio::time::Instant;

use crate::cli::{
    HistoryArgs, RecordFormat, ReleaseCommand, RollbackArgs, Selection, ShowArgs, UnlockArgs,
};
use crate::cluster::connect::{ClusterAccess, KubeconfigCache, check_targets, connect};
use crate::commands::manual_report;
use crate::config::{self, Config, ConfigError, Overrides, TargetConfig};
use crate::engine::plan::Plan;
use crate::engine::policy::{self, RollbackResult};
use crate::engine::reapply;
use crate::engine::target_run::TargetRun;
use crate::engine::wave_gate::{self, Unreadable, WaveRefused};
use crate::error::exit;
use crate::release::lock::{self, LockError};
use crate::release::session::{OpenHistory, ReleaseSettings};
use crate::release::{self, ReleaseError, ReleaseOrigin, ReleaseRecord, ReleaseStore};
use crate::report::{Failure, TargetOutcome, clip_columns, display_width, redact};
use crate::util::duration::format_duration;
use crate::util::git::{self, CommitInfo};

/// Terminal columns of a NOTE cell in `history` (longer notes end in an ellipsis), so that a
/// line fits a terminal of about 120 columns.
pub const NOTE_COLUMNS: usize = 60;
/// Terminal columns of a COMMIT cell ("abc1234 first line of the message").
pub const COMMIT_COLUMNS: usize = 50;

/// Short commit for a table: "abc1234 first line", at most [`COMMIT_COLUMNS`] wide.
pub fn short_commit(record: &ReleaseRecord) -> String {
    let Some(commit) = &record.commit else {
        return "-".to_string();
    };
    let sha = commit.label();
    match &commit.message {
        Some(m) if !m.is_empty() => clip_columns(&format!("{sha} {m}"), COMMIT_COLUMNS),
        _ => sha,
    }
}

/// The `history` table of one target, oldest first. Cells are one line each and NOTE is
/// clipped, so that no line wraps.
pub fn history_table(target: &str, records: &[ReleaseRecord]) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "REVISION".into(),
        "STATUS".into(),
        "COMMIT".into(),
        "STARTED".into(),
        "DURATION".into(),
        "NOTE".into(),
    ]];
    let one_line = |text: String| text.replace(['\r', '\n'], " ");
    for r in records {
        rows.push([
            r.revision.to_string(),
            r.status.to_string(),
            one_line(short_commit(r)),
            format!("{:.0}", r.started_at),
            r.duration()
                .map(format_duration)
                .unwrap_or_else(|| "-".into()),
            clip_columns(&one_line(r.note()), NOTE_COLUMNS),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(display_width(cell));
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
                line.push_str(&" ".repeat(widths[i] - display_width(cell) + 1));
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

/// An object whose keys keep the given order (the config's order of targets).
struct Keyed<'a>(&'a [(String, Value)]);

impl serde::Serialize for Keyed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `show` and `history -o`: every target's value as one document. JSON: one object keyed
/// by target name, in the config's order. YAML: a stream of one document per target, `---`
/// between them, each a mapping from the target's name to the same value as in the JSON.
/// Nothing at all when no target has a value (each one's error is on stderr).
pub fn render_documents(
    entries: &[(String, Value)],
    format: RecordFormat,
) -> Result<String, RenderError> {
    if entries.is_empty() {
        return Ok(String::new());
    }
    match format {
        RecordFormat::Json => Ok(serde_json::to_string_pretty(&Keyed(entries))?),
        RecordFormat::Yaml => {
            let mut out = String::new();
            for entry in entries {
                if !out.is_empty() {
                    if !out.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str("---\n");
                }
                let one = serde_saphyr::to_string(&Keyed(std::slice::from_ref(entry)))?;
                out.push_str(&one);
            }
            Ok(out)
        }
    }
}

/// A record as `show` prints it: Secret values redacted, manifests named as applied.
pub fn shown_record(record: &ReleaseRecord) -> Result<Value, serde_json::Error> {
    serde_json::to_value(redacted_record(record))
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
    /// `rollback --from-git`: the commit's manifests could not be read.
    #[error(transparent)]
    Manifests(#[from] reapply::ManifestsError),
}

impl ManageError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ManageError::Usage(_) | ManageError::Config(_) => exit::BAD_INPUT,
            ManageError::Manifests(e) => manifests_error_code(e),
        }
    }
}

/// A revision that keeps too little to roll back to is refused input (2); git, the network
/// and the cluster are failures (1): a failed `git fetch` is never bad input.
pub fn manifests_error_code(e: &reapply::ManifestsError) -> i32 {
    if e.is_refusal() {
        exit::BAD_INPUT
    } else {
        exit::FAILED
    }
}

/// Why `show` or `history -o` could not render its documents (said as the serializer says it).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
}

/// Why one target of a release command failed; said after "target NAME: " (see
/// [`TargetProblem`]), its exit code decided by [`TargetFailure::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum TargetFailure {
    /// The target could not be reached or its access is wrong (kube::connect's reasons).
    #[error("{0}")]
    Connect(#[source] crate::cluster::connect::TargetError),
    /// Reading its release history (a revision that does not exist included).
    #[error("{0}")]
    Release(#[from] ReleaseError),
    /// `rollback` refused the revision asked for.
    #[error("{0}")]
    Choice(#[from] policy::RollbackChoiceError),
    /// The destination's manifests could not be read (a record keeping too little, git).
    #[error("{0}")]
    Manifests(#[from] reapply::ManifestsError),
    /// Force-releasing its lock (`unlock`).
    #[error("{0}")]
    Lock(#[from] LockError),
}

impl TargetFailure {
    /// The exit code of this target: refused input 2, every other failure 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            TargetFailure::Release(e) => release_error_code(e),
            TargetFailure::Choice(_) => exit::BAD_INPUT,
            TargetFailure::Manifests(e) => manifests_error_code(e),
            TargetFailure::Connect(_) | TargetFailure::Lock(_) => exit::FAILED,
        }
    }
}

/// A problem of a release command over several targets, said on its own line.
#[derive(Debug, thiserror::Error)]
pub enum TargetProblem {
    #[error("target {target}: {source}")]
    Target {
        target: String,
        #[source]
        source: TargetFailure,
    },
    /// `--revision N` names different runs on different targets (the text says which).
    #[error("{0}")]
    Ambiguous(String),
}

impl TargetProblem {
    fn on(target: &str, source: TargetFailure) -> TargetProblem {
        TargetProblem::Target {
            target: target.to_string(),
            source,
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            TargetProblem::Target { source, .. } => source.exit_code(),
            TargetProblem::Ambiguous(_) => exit::BAD_INPUT,
        }
    }
}

/// The exit code of one target's release error: a revision that does not exist is a
/// mistake in the input (as `rollback --revision` refusing it), anything else a failure of
/// that target.
pub fn release_error_code(e: &ReleaseError) -> i32 {
    match e {
        ReleaseError::NotFound { .. } => exit::BAD_INPUT,
        _ => exit::FAILED,
    }
}

/// The exit code of a command over several targets: 0 when every target succeeded, else
/// the lowest code among those that did not (a target that failed, 1, before a refused
/// input, 2), the same rule for every release command.
pub fn combined_exit(codes: impl IntoIterator<Item = i32>) -> i32 {
    codes
        .into_iter()
        .filter(|c| *c != exit::OK)
        .min()
        .unwrap_or(exit::OK)
}

pub(crate) type Env = HashMap<String, String>;

/// The config with the targets of `--target` (by name or context, as deploy selects them),
/// each one's kubeconfig, context and credentials checked offline as deploy checks them.
pub(crate) fn load_config(selection: &Selection, env: &Env) -> Result<Config, ManageError> {
    let lookup = |k: &str| env.get(k).cloned();
    let path = config::config_path(selection.files.config.as_deref(), &lookup);
    let overrides = Overrides {
        kubeconfig: selection.files.kubeconfig.clone(),
        targets: selection.targets.clone(),
        ..Overrides::default()
    };
    let config = config::load(&path, &overrides, &lookup)?;
    // Its own read of the kubeconfigs: the commands that connect afterwards (connect_all)
    // read them once more, which costs one parse per file.
    check_targets(
        &config,
        &config.targets,
        &lookup,
        &KubeconfigCache::default(),
    )?;
    Ok(config)
}

/// One connected target with its release store.
pub(crate) struct Connected {
    pub(crate) target: TargetConfig,
    pub(crate) access: ClusterAccess,
    pub(crate) store: ReleaseStore,
    pub(crate) namespace: String,
}

/// Connects to every selected target at once; a target that fails says why as
/// "target NAME: REASON: what happened and what to do".
pub(crate) async fn connect_all(
    config: &Config,
    env: &Env,
) -> Vec<Result<Connected, TargetProblem>> {
    let lookup = |k: &str| env.get(k).cloned();
    let settings = ReleaseSettings::from_config(config);
    // Nothing cancels these commands (a signal ends the process); connect wants a token.
    let never = tokio_util::sync::CancellationToken::new();
    let cli_kubeconfig = config.kubeconfig.as_deref();
    let kubeconfigs = KubeconfigCache::default();
    futures::future::join_all(config.targets.iter().map(|target| async {
        let access = connect(
            target,
            cli_kubeconfig,
            &config.base_dir,
            &lookup,
            &kubeconfigs,
            &never,
        )
        .await
        .map_err(|e| TargetProblem::on(&target.name, TargetFailure::Connect(e)))?;
        let namespace = config.history_namespace(target, &access.context_namespace);
        let store = ReleaseStore::for_access(&access, &config.app, &namespace, settings.keep);
        Ok(Connected {
            target: target.clone(),
            access,
            store,
            namespace,
        })
    }))
    .await
}

/// Targets the record commands (`history`, `show`, `unlock`, `conclude`) read at once when
/// no `concurrency` is set. What a target's records hold (every revision's manifests, for
/// `history`) is known only once read, so the memory budget cannot size this beforehand, as
/// it does a deploy's; 64 read 1,000 targets in 16 rounds (one at a time took 23 s).
const RECORD_READS_AT_ONCE: usize = 64;

/// Runs `each` on every connected target, [`RECORD_READS_AT_ONCE`] (or `concurrency`) at
/// once; says every error on stderr. Returns the values of the targets that gave one (in
/// the config's order) and the command's exit code.
pub(crate) async fn for_each_target<T, F, Fut>(
    config: &Config,
    env: &Env,
    each: F,
) -> (Vec<(String, T)>, i32)
where
    F: Fn(Connected) -> Fut,
    Fut: std::future::Future<Output = Result<T, TargetFailure>>,
{
    let at_once = match crate::engine::budget::Source::of(config) {
        crate::engine::budget::Source::Set { value, .. } => value.max(1),
        crate::engine::budget::Source::Budget(_) => RECORD_READS_AT_ONCE,
    };
    let each = &each;
    let reads = connect_all(config, env)
        .await
        .into_iter()
        .map(|connected| async move {
            let c = connected?;
            let name = c.target.name.clone();
            match each(c).await {
                Ok(v) => Ok((name, v)),
                Err(e) => Err(TargetProblem::on(&name, e)),
            }
        });
    let mut values = Vec::new();
    let mut codes = Vec::new();
    for result in crate::util::in_order::in_order(reads.collect(), at_once).await {
        match result {
            Ok(value) => values.push(value),
            Err(problem) => {
                redact::print_err(&problem.to_string());
                codes.push(problem.exit_code());
            }
        }
    }
    (values, combined_exit(codes))
}

/// Prints `show` / `history -o` documents; a rendering problem is a failure (exit 1).
fn print_documents(entries: &[(String, Value)], format: RecordFormat) -> i32 {
    // Scrubbed before JSON or YAML escapes (or folds) a value the scrubber would then miss.
    let entries: Vec<(String, Value)> = entries
        .iter()
        .map(|(name, value)| {
            let mut value = value.clone();
            crate::report::clean::scrub_tree(&mut value);
            (name.clone(), value)
        })
        .collect();
    match render_documents(&entries, format) {
        Ok(text) if text.is_empty() => exit::OK,
        Ok(text) => {
            redact::print_out(text.trim_end());
            exit::OK
        }
        Err(e) => {
            redact::print_err(&format!("rollguard: cannot render the records: {e}"));
            exit::FAILED
        }
    }
}

/// `rollguard history`: every target's records, oldest first, as tables or one document.
pub async fn history(args: HistoryArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let (listed, code) = for_each_target(&config, &env, |c| async move {
        // With their manifests, so that the scrubber knows the Secret values a stored
        // message may quote; the manifests themselves are not shown.
        let mut records = c.store.list_with_manifests().await?;
        for record in &mut records {
            redact::learn(record.manifests.iter().flatten());
            record.manifests = None;
        }
        Ok(records)
    })
    .await;
    let Some(format) = args.output else {
        for (name, records) in &listed {
            redact::print_out(history_table(name, records).trim_end());
        }
        return Ok(code);
    };
    let mut entries = Vec::new();
    for (name, records) in listed {
        match serde_json::to_value(&records) {
            Ok(value) => entries.push((name, value)),
            Err(e) => {
                redact::print_err(&format!("target {name}: cannot render its records: {e}"));
                return Ok(exit::FAILED);
            }
        }
    }
    Ok(combined_exit([code, print_documents(&entries, format)]))
}

/// `rollguard show --revision N`: the record with its manifests, Secret values redacted,
/// one document for every target.
pub async fn show(args: ShowArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let revision = args.revision;
    let (records, code) = for_each_target(&config, &env, |c| async move {
        c.store.get(revision).await.map_err(TargetFailure::from)
    })
    .await;
    let runs: Vec<(&str, &ReleaseRecord)> = records.iter().map(|(n, r)| (n.as_str(), r)).collect();
    if let Some(why) = release::ambiguous_revision(revision, &runs) {
        redact::print_err(&why);
        return Ok(exit::BAD_INPUT);
    }
    let mut shown = Vec::new();
    let mut codes = vec![code];
    for (name, record) in &records {
        // Structure redacts; the scrubber is the second line for the printed text.
        redact::learn(record.manifests.iter().flatten());
        match shown_record(record) {
            Ok(value) => shown.push((name.clone(), value)),
            Err(e) => {
                redact::print_err(&format!("target {name}: cannot render v{revision}: {e}"));
                codes.push(exit::FAILED);
            }
        }
    }
    codes.push(print_documents(&shown, args.output));
    Ok(combined_exit(codes))
}

/// `rollguard unlock`: force-release the lock on each selected target.
pub async fn unlock(args: UnlockArgs, env: Env) -> Result<i32, ManageError> {
    let config = load_config(&args.selection, &env)?;
    let app = &config.app;
    let (said, code) = for_each_target(&config, &env, |c| async move {
        let unlocked =
            lock::force_unlock(c.access.client.clone(), &c.access.server, app, &c.namespace)
                .await?;
        Ok(match unlocked.previous {
            Some(previous) => format!(
                "released lock {} in namespace {} (held by {}{})",
                unlocked.lease,
                unlocked.namespace,
                previous.holder.as_deref().unwrap_or("nobody"),
                previous
                    .acquired_at
                    .map(|t| format!(" since {t:.0}"))
                    .unwrap_or_default()
            ),
            None => format!(
                "no lock {} in namespace {}",
                unlocked.lease, unlocked.namespace
            ),
        })
    })
    .await;
    for (name, line) in said {
        redact::print_out(&format!("target {name}: {line}"));
    }
    Ok(code)
}

/// One target's planned manual rollback.
struct Planned {
    connected: Connected,
    /// The record `--revision` chose, to tell whether the number names one run everywhere.
    chosen_record: Option<ReleaseRecord>,
    bodies: Vec<Value>,
    commit: Option<CommitInfo>,
    origin: ReleaseOrigin,
    destination: String,
    default_namespace: String,
    changes: Vec<String>,
    /// The rollback commands it will run, as the prompt lists them.
    commands: Vec<String>,
    /// Objects of the current release the destination lacks (left in place).
    left_in_place: Vec<String>,
    headline: String,
    /// The revision rolled back from and the script stages it ran (their rollback commands
    /// run after the manifests).
    from_revision: Option<u64>,
    /// The revision chosen to go back to (None: from git).
    chosen: Option<u64>,
    ran: Vec<crate::report::StageResult>,
    /// The record rolled back from (without manifests): which release the fleet stages'
    /// rollback commands belong to.
    from_record: Option<ReleaseRecord>,
}

/// Whether a target's history, read again once its lock is held, still says what the person
/// confirmed: the same newest revision, and the same revision to go back to. Pure.
pub fn still_current(
    planned_newest: Option<u64>,
    planned_choice: Option<u64>,
    newest: Option<u64>,
    choice: Option<u64>,
) -> Result<(), HistoryMoved> {
    if newest != planned_newest {
        return Err(HistoryMoved::Newest { newest });
    }
    if choice != planned_choice {
        return Err(HistoryMoved::Choice);
    }
    Ok(())
}

/// How a target's history moved while the rollback waited for confirmation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryMoved {
    #[error(
        "its history changed while the rollback waited for confirmation (the newest release is now {}): nothing was changed; run the rollback again to see what it would do",
        newest_text(*.newest)
    )]
    Newest { newest: Option<u64> },
    #[error(
        "the revision to go back to is no longer the one confirmed: nothing was changed; run the rollback again"
    )]
    Choice,
}

fn newest_text(newest: Option<u64>) -> String {
    newest.map_or("no release".to_string(), |r| format!("v{r}"))
}

/// `rollguard rollback`: re-apply an earlier revision (or a commit's manifests) as a new one.
/// It plans and asks first, and takes the locks only once confirmed (a prompt blocks no
/// deploy); SIGINT/SIGTERM stop it as they stop a deploy (scripts killed, records marked,
/// locks released, exit 130).
pub async fn rollback(args: RollbackArgs, env: Env) -> Result<i32, ManageError> {
    // A rollback writes: bad access on any selected target is bad input before the first
    // write (load_config checks every one).
    let config = load_config(&args.selection, &env)?;
    if let Some(token) = &args.github.github_token {
        redact::learn_value(token.trim().as_bytes());
    }
    let lookup = |k: &str| env.get(k).cloned();
    let cancel = crate::commands::deploy::cancel_on_signals();

    // From git: the same manifests and commit for every target, read once.
    let from_git = match &args.from_git {
        Some(sha) => {
            let bodies = reapply::manifests_from_git_off_runtime(&config, sha, None).await?;
            let (dir, text, t) = (config.base_dir.clone(), sha.clone(), config.git_timeout);
            // The commit's message is only for the record: without it the rollback goes on;
            // a panic reading it is a bug (exit 4), not swallowed.
            let read = tokio::task::spawn_blocking(move || git::commit_info(&dir, &text, t));
            let commit = match read.await {
                Ok(info) => info.ok(),
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    Err(_) => None,
                },
            };
            Some((bodies, commit))
        }
        None => None,
    };
    let connected = connect_all(&config, &env).await;
    let plans = futures::future::join_all(connected.into_iter().map(|c| {
        let (config, from_git, args) = (&config, &from_git, &args);
        async move {
            let c = c?;
            let name = c.target.name.clone();
            plan_one(config, c, args, from_git)
                .await
                .map_err(|e| TargetProblem::on(&name, e))
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
    // One number may name different runs on different targets (after `--target` deploys).
    if let Some(revision) = args.revision {
        let runs: Vec<(&str, &ReleaseRecord)> = ready
            .iter()
            .filter_map(|p| Some((p.connected.target.name.as_str(), p.chosen_record.as_ref()?)))
            .collect();
        if let Some(why) = release::ambiguous_revision(revision, &runs) {
            problems.push(TargetProblem::Ambiguous(why));
        }
    }
    // The manifests of both sides may hold Secrets: the scrubber knows them before output.
    for p in &ready {
        redact::learn(p.bodies.iter());
    }
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let plan_failed = show_rollback(
        &config,
        &ready,
        &args,
        interactive && problems.is_empty(),
        &lookup,
    )
    .await;
    for problem in &problems {
        redact::print_err(&problem.to_string());
    }
    if !problems.is_empty() {
        // Unreachable targets fail (1); a refused choice is bad input (2).
        return Ok(combined_exit(problems.iter().map(TargetProblem::exit_code)));
    }
    if args.dry_run {
        println!("dry run: nothing changed");
        return Ok(if plan_failed { exit::FAILED } else { exit::OK });
    }
    if interactive && !confirm(ready.len(), &cancel).await {
        println!("nothing changed");
        return Ok(if cancel.is_cancelled() {
            exit::CANCELLED
        } else {
            exit::FAILED
        });
    }
    // Confirmed: the coordinator takes the locks and looks at each history again under them.
    let code = apply_rollbacks(&config, &ready, &args, &env, &cancel).await;
    Ok(if cancel.is_cancelled() && code != exit::ROLLBACK_FAILED {
        exit::CANCELLED
    } else {
        code
    })
}

/// Prints what the rollback will do: per target its headline, then (in a terminal or a dry
/// run) the clusters' diff, else the change summary; and the rollback commands it will run.
/// Returns whether the diff had errors.
async fn show_rollback(
    config: &Config,
    ready: &[Planned],
    args: &RollbackArgs,
    diff: bool,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
) -> bool {
    let mut plan_failed = false;
    if args.dry_run || diff {
        let settings = ReleaseSettings::from_config(config);
        // What the clusters say a rollback would change: the same diff as `rollguard diff`.
        let deadline = Instant::now() + settings.rollback_timeout;
        let plan = rollback_plan(config, ready, args.force_conflicts, deadline).await;
        for p in ready {
            redact::print_out(&p.headline);
        }
        crate::commands::diff::print_plan(&plan, crate::cli::PlanFormat::Text, lookup);
        plan_failed = plan.has_errors();
        for p in ready.iter().filter(|p| !p.commands.is_empty()) {
            redact::print_out(&format!("target {}:", p.connected.target.name));
            for line in &p.commands {
                redact::print_out(line);
            }
        }
    } else {
        for p in ready {
            redact::print_out(&p.headline);
            for line in p.changes.iter().chain(&p.commands) {
                redact::print_out(line);
            }
        }
    }
    plan_failed
}

/// Whether a target's history, read again under its lock, still says what was confirmed:
/// the newest revision and the choice compared with the plan's. Pure.
fn recheck(
    p: &Planned,
    records: &[ReleaseRecord],
    args: &RollbackArgs,
) -> Result<(), HistoryMoved> {
    let newest = records.iter().map(|r| r.revision).max();
    let choice = match args.from_git {
        Some(_) => None,
        None => policy::choose_manual_target(records, args.revision, args.force).ok(),
    };
    still_current(p.from_revision, p.chosen, newest, choice)
}

/// The rollback itself, once confirmed, through the deploy's coordinator: every target's
/// lock taken as a deploy takes them (all or none), each history read and checked again
/// under them ([`recheck`]: one that moved stops all before any write), then every target's
/// manifests re-applied at once as a new revision, then the rollback commands of the stages
/// the revisions it leaves ran. `cancel` (a signal) stops both: the re-apply ends and its
/// record is marked, the scripts' process groups are killed. Returns the exit code.
async fn apply_rollbacks(
    config: &Config,
    ready: &[Planned],
    args: &RollbackArgs,
    env: &Env,
    cancel: &tokio_util::sync::CancellationToken,
) -> i32 {
    let settings = ReleaseSettings::from_config(config);
    let started_at = jiff::Timestamp::now();
    let plan = manual_plan(config, ready, args, env, settings.rollback_timeout);
    let concurrency = plan.concurrency.clone();
    // Records a dead run left, marked abandoned under the lock (read by the check).
    let abandoned: std::sync::Mutex<HashMap<String, Vec<u64>>> = Default::default();
    let check = |run: &TargetRun, history: &OpenHistory| -> Result<(), Box<Failure>> {
        let name = &run.target.name;
        if !history.abandoned.is_empty() {
            abandoned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.clone(), history.abandoned.clone());
        }
        match ready.iter().find(|p| &p.connected.target.name == name) {
            Some(p) => recheck(p, history.records(), args).map_err(|e| Box::new(moved(&e))),
            None => Ok(()),
        }
    };
    let check: &crate::engine::fleet::HistoryCheck<'_> = &check;
    let runs = crate::engine::fleet::run_targets_checked(
        std::sync::Arc::new(plan),
        cancel.clone(),
        crate::report::progress::Progress::quiet(),
        Some(check),
    )
    .await;
    let abandoned = abandoned
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reports: Vec<Option<&crate::report::TargetReport>> = ready
        .iter()
        .map(|p| {
            runs.iter()
                .find(|r| r.target.name == p.connected.target.name)
                .map(|r| &r.report)
        })
        .collect();
    if let Some(code) = stopped_before_a_write(ready, &reports) {
        return code;
    }
    // GitHub starts once the rollback went on (refused input and refused locks reach no sink).
    let sink = crate::github::Sink::start(
        crate::commands::deploy::resolve_github(&args.github, env, config.github.timeout),
        crate::github::SinkOptions {
            app: config.app.clone(),
            deployments: None,
        },
    );
    let (results, summary) = say_applied(ready, &reports, &abandoned);
    let recorded: Vec<Option<u64>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    let (commands_ok, commands) =
        run_rollback_commands(config, ready, &recorded, &args.selection, env, cancel).await;
    redact::print_out(&policy::summary(&summary));
    let finished_at = jiff::Timestamp::now();
    let targets = ready
        .iter()
        .zip(results)
        .zip(commands)
        .map(|((p, applied), commands)| manual_report::ManualTarget {
            finished_at,
            abandoned: abandoned
                .get(&p.connected.target.name)
                .cloned()
                .unwrap_or_default(),
            ..manual_target(p, applied, commands, cancel.is_cancelled(), started_at)
        })
        .collect();
    let run = ManualRun {
        started_at,
        concurrency,
        sink,
    };
    publish_manual_report(config, ready, targets, run, args, env).await;
    // A re-apply that a signal stopped is the cancel (exit 130), as in a deploy.
    let applied_ok = reports.iter().all(|r| {
        r.is_some_and(|r| {
            r.outcome == TargetOutcome::Deployed
                || (r.outcome == TargetOutcome::Cancelled && cancel.is_cancelled())
        })
    });
    if commands_ok && applied_ok {
        exit::OK
    } else {
        exit::ROLLBACK_FAILED
    }
}

/// Says what each target's re-apply did ("rolled back to v1 (recorded as v3)", or why not,
/// after the records a dead run left that it marked abandoned); returns each one's applied
/// result (the revision recorded, or why not) and the rollback summary's entries.
fn say_applied(
    ready: &[Planned],
    reports: &[Option<&crate::report::TargetReport>],
    abandoned: &HashMap<String, Vec<u64>>,
) -> (
    Vec<Result<u64, manual_report::ReapplyError>>,
    Vec<RollbackResult>,
) {
    let mut summary = Vec::new();
    let mut results = Vec::new();
    for (p, report) in ready.iter().zip(reports) {
        let name = &p.connected.target.name;
        if let Some(marked) = abandoned.get(name) {
            redact::print_out(&format!(
                "target {name}: marked abandoned: {}",
                marked
                    .iter()
                    .map(|r| format!("v{r}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let result = match report {
            Some(report) => manual_report::applied_by_coordinator(report, &p.destination),
            None => Err(manual_report::ReapplyError::NotRun {
                destination: p.destination.clone(),
            }),
        };
        match &result {
            Ok(recorded) => println!(
                "target {name}: rolled back to {} (recorded as v{recorded})",
                p.destination
            ),
            Err(why) => redact::print_out(&format!("target {name}: rollback failed: {why}")),
        }
        summary.push(RollbackResult {
            target: name.clone(),
            ok: result.is_ok(),
            message: result.as_ref().err().map(ToString::to_string),
        });
        results.push(result);
    }
    (results, summary)
}

/// The reason of the failure a history that moved under the lock gives its target.
const HISTORY_MOVED: &str = "HistoryMoved";

fn moved(e: &HistoryMoved) -> Failure {
    Failure {
        object: "history".into(),
        reason: HISTORY_MOVED.into(),
        message: e.to_string(),
        ..Default::default()
    }
}

/// Whether the coordinator's run stopped before it wrote anything anywhere (a lock refused,
/// a history that moved, a cancel while locking: all or none): then every target says why
/// and the exit code is 1, or 130 when cancelled. None when some target went on (its record
/// written): the rollback's outcome is then its targets'.
fn stopped_before_a_write(
    ready: &[Planned],
    reports: &[Option<&crate::report::TargetReport>],
) -> Option<i32> {
    let went_on = |r: &Option<&crate::report::TargetReport>| {
        r.is_some_and(|r| r.outcome == TargetOutcome::Deployed || r.revision.is_some())
    };
    for (p, report) in ready.iter().zip(reports) {
        let Some(report) = report.filter(|r| !went_on(&Some(r))) else {
            continue;
        };
        if report.outcome == TargetOutcome::Cancelled {
            continue;
        }
        let name = &p.connected.target.name;
        let said = match report.failures.first() {
            Some(f) if f.reason == HISTORY_MOVED => format!("target {name}: {}", f.message),
            Some(f) => format!(
                "target {name}: {}: {}; nothing was rolled back",
                f.reason, f.message
            ),
            None => format!(
                "target {name}: {}; nothing was rolled back",
                report
                    .message
                    .clone()
                    .unwrap_or_else(|| report.outcome.as_str().to_string())
            ),
        };
        redact::print_err(&said);
    }
    if reports.iter().any(went_on) {
        return None;
    }
    if reports
        .iter()
        .any(|r| r.is_some_and(|r| r.outcome == TargetOutcome::Cancelled))
    {
        redact::print_err("rollguard: cancelled while taking the locks: nothing was changed");
        return Some(exit::CANCELLED);
    }
    Some(exit::FAILED)
}

/// The engine's plan of a manual rollback: every target's destination's manifests (its own
/// commit, recorded as a manual rollback), in the plan's manual-rollback mode.
fn manual_plan(
    config: &Config,
    ready: &[Planned],
    args: &RollbackArgs,
    env: &Env,
    rollback_timeout: std::time::Duration,
) -> Plan {
    let options = crate::engine::plan::DeployOptions {
        force_conflicts: args.force_conflicts,
        cli_kubeconfig: config.kubeconfig.clone(),
        ..Default::default()
    };
    let empty = crate::manifests::ManifestSet {
        objects: Vec::new(),
    };
    let mut plan = Plan::new(config.clone(), empty, None, options, env.clone());
    for p in ready {
        plan = plan.with_target_manifests(
            &p.connected.target.name,
            crate::engine::plan::TargetManifests {
                manifests: reapply::manifest_set_from_bodies(&p.bodies, &p.destination),
                commit: p.commit.clone(),
                origin: p.origin,
            },
        );
    }
    plan.manual_rollback(rollback_timeout)
}

/// The script stages the rolled-back revisions ran: their rollback commands, after the
/// manifests (the commands come from this config, by stage name: a record in the cluster
/// never decides what runs here). A fleet stage's waits while a target outside `--target`
/// that took part still runs the release (its records say so). `recorded[i]`: the revision
/// `ready[i]`'s re-apply was recorded as, None when it did not finish. Returns whether every
/// one succeeded (a fleet rollback held back is no failure: it runs with theirs), and each
/// target's results in the order of `ready`.
async fn run_rollback_commands(
    config: &Config,
    ready: &[Planned],
    recorded: &[Option<u64>],
    selection: &Selection,
    env: &Env,
    cancel: &tokio_util::sync::CancellationToken,
) -> (bool, Vec<Vec<crate::report::StageResult>>) {
    let due: Vec<crate::engine::scripts::ManualTarget> = ready
        .iter()
        .zip(recorded)
        .filter(|(p, _)| !p.ran.is_empty())
        .map(|(p, recorded)| crate::engine::scripts::ManualTarget {
            target: p.connected.target.clone(),
            access: p.connected.access.clone(),
            revision: p.from_revision.unwrap_or(0),
            ran: p.ran.clone(),
            recorded_as: *recorded,
        })
        .collect();
    let fleet_due = !crate::stages::plan::fleet_rollbacks(
        &config.pipeline,
        due.iter().map(|d| d.ran.as_slice()),
        config.rollback_order,
    )
    .is_empty();
    let others = if fleet_due {
        still_on_elsewhere(ready, selection, env).await
    } else {
        Vec::new()
    };
    let names: Vec<String> = due.iter().map(|d| d.target.name.clone()).collect();
    let mut plan = engine_plan(config, env);
    // What the commands print is scrubbed of the Secret values of the revision gone back to.
    plan.scripts.scrubber =
        crate::report::redact::Scrubber::from_objects(ready.iter().flat_map(|p| p.bodies.iter()));
    let mut commands_ok = true;
    let results = crate::engine::scripts::manual_stage_rollbacks(&plan, due, others, cancel).await;
    let mut per_target: Vec<Vec<crate::report::StageResult>> = vec![Vec::new(); ready.len()];
    for (name, results) in names.iter().zip(results) {
        for r in &results {
            // Stopped by a signal is the cancel (exit 130), not a failed rollback command.
            commands_ok &= crate::commands::manual_report::command_ok(r, cancel.is_cancelled());
            redact::print_out(&format!(
                "target {name}: rollback command of stage {} ({}): {}{}",
                r.name,
                r.scope,
                r.outcome.as_str(),
                r.message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
        let position = ready.iter().position(|p| &p.connected.target.name == name);
        if let Some(slot) = position.and_then(|i| per_target.get_mut(i)) {
            *slot = results;
        }
    }
    (commands_ok, per_target)
}

/// The engine's plan of a manual rollback: the config and the environment (the manifests
/// are each target's destination's, not a set of the repository's).
fn engine_plan(config: &Config, env: &Env) -> Plan {
    Plan::new(
        config.clone(),
        crate::manifests::ManifestSet {
            objects: Vec::new(),
        },
        None,
        crate::engine::plan::DeployOptions::default(),
        env.clone(),
    )
}

/// What one target's manual rollback did, for its report.
fn manual_target(
    p: &Planned,
    applied: Result<u64, manual_report::ReapplyError>,
    commands: Vec<crate::report::StageResult>,
    cancelled: bool,
    started_at: jiff::Timestamp,
) -> crate::commands::manual_report::ManualTarget {
    crate::commands::manual_report::ManualTarget {
        name: p.connected.target.name.clone(),
        wave: p.connected.target.wave,
        destination: p.destination.clone(),
        to_revision: p.chosen,
        to_commit: p.commit.as_ref().map(|c| c.short_sha().to_string()),
        left_in_place: p.left_in_place.clone(),
        abandoned: Vec::new(),
        applied,
        commands,
        cancelled,
        started_at,
        finished_at: started_at,
    }
}

/// What the report of a manual rollback says of the run as a whole.
struct ManualRun {
    started_at: jiff::Timestamp,
    /// The bound the re-applies kept to (the plan's).
    concurrency: crate::report::ConcurrencyInfo,
    sink: crate::github::Sink,
}

/// The manual rollback's report through the deploy's sinks ([`deploy::publish`]): the final
/// table, `--report` and `--report-markdown`, and GitHub (step summary, outputs, PR comment),
/// scrubbed as a deploy's; a sink that fails is a warning, never the rollback's outcome.
///
/// [`deploy::publish`]: crate::commands::deploy::publish
async fn publish_manual_report(
    config: &Config,
    ready: &[Planned],
    targets: Vec<crate::commands::manual_report::ManualTarget>,
    run: ManualRun,
    args: &RollbackArgs,
    env: &Env,
) {
    let ManualRun {
        started_at,
        concurrency,
        sink,
    } = run;
    // The commit gone back to, when every target went back to the same one.
    let first = ready.first().and_then(|p| p.commit.clone());
    let commit = first.filter(|c| {
        ready
            .iter()
            .all(|p| p.commit.as_ref().map(|o| &o.sha) == Some(&c.sha))
    });
    let mut report =
        crate::commands::manual_report::report(&config.app, commit, started_at, targets);
    report.run_url = sink.run_url();
    report.concurrency = Some(concurrency);
    let in_actions = env.get("GITHUB_ACTIONS").map(String::as_str) == Some("true");
    // Stored manifests come from no file: a failure has no line to point at.
    let origin = |_: &str| None;
    crate::commands::deploy::publish(
        &report,
        sink,
        crate::commands::deploy::Outputs {
            report: args.report.as_ref(),
            report_markdown: args.github.report_markdown.as_ref(),
            env,
            in_actions,
            origin: &origin,
        },
    )
    .await;
}

/// The targets outside this rollback (`--target` chose others) that took part in a release
/// it leaves and still run it, read from their records. A target whose records cannot be
/// read counts as still on it (said on stderr): a fleet rollback ("migrate down") must not
/// pull the ground from under a cluster nobody could look at.
async fn still_on_elsewhere(
    ready: &[Planned],
    selection: &Selection,
    env: &Env,
) -> Vec<crate::engine::scripts::StillOn> {
    let releases: Vec<&ReleaseRecord> = ready
        .iter()
        .filter(|p| !p.ran.is_empty())
        .filter_map(|p| p.from_record.as_ref())
        .collect();
    let selected: Vec<&str> = ready
        .iter()
        .map(|p| p.connected.target.name.as_str())
        .collect();
    let every = Selection {
        files: selection.files.clone(),
        targets: Vec::new(),
    };
    // Every target of the file: the variables that select targets (as --target does) are
    // left out too.
    let lookup = |k: &str| match k {
        "ROLLGUARD_CONTEXTS" | "INPUT_CONTEXTS" | "ROLLGUARD_CONTEXT" | "INPUT_CONTEXT" => None,
        _ => env.get(k).cloned(),
    };
    let path = config::config_path(every.files.config.as_deref(), &lookup);
    let overrides = Overrides {
        kubeconfig: every.files.kubeconfig.clone(),
        ..Overrides::default()
    };
    let all = match config::load(&path, &overrides, &lookup) {
        Ok(all) => all,
        // The same file loaded a moment ago with --target: nothing else can fail here.
        Err(e) => {
            redact::print_err(&format!(
                "rollguard: could not read the other targets of {}: {e}",
                path.display()
            ));
            return Vec::new();
        }
    };
    let mut others = all.clone();
    others
        .targets
        .retain(|t| !selected.contains(&t.name.as_str()));
    if others.targets.is_empty() {
        return Vec::new();
    }
    let mut still_on = Vec::new();
    for (target, records) in read_records(&others, env).await {
        match records {
            Ok(records) => {
                if let Some(ran) = releases
                    .iter()
                    .find_map(|release| still_on_release(&records, release))
                {
                    still_on.push(crate::engine::scripts::StillOn { target, ran });
                }
            }
            Err(why) => {
                redact::print_err(&format!(
                    "target {}: could not read its release records ({why}): counted as still on the release rolled back here, so its fleet stages' rollback commands wait; run the rollback again once it answers",
                    target.name
                ));
                let ran = releases
                    .iter()
                    .flat_map(|r| r.stages.iter().cloned())
                    .collect();
                still_on.push(crate::engine::scripts::StillOn { target, ran });
            }
        }
    }
    still_on
}

/// Every target of `config` with its release records, or why they could not be read (its
/// connection's or the listing's reason), all at once, in the config's order.
async fn read_records(config: &Config, env: &Env) -> Vec<(TargetConfig, wave_gate::Records)> {
    let connected = connect_all(config, env).await;
    let reads = config
        .targets
        .iter()
        .zip(connected)
        .map(|(target, connected)| async move {
            let records = match connected {
                Ok(c) => c.store.list().await.map_err(Unreadable::new),
                Err(TargetProblem::Target { source, .. }) => Err(Unreadable::new(source)),
                Err(problem) => Err(Unreadable::new(problem)),
            };
            (target.clone(), records)
        });
    futures::future::join_all(reads).await
}

/// `deploy --wave N`: before anything is written anywhere, the records of every target of
/// the waves before N (read as a manual rollback reads the targets it leaves) must say they
/// run this deploy's commit ([`wave_gate::judge`]). Nothing to check without `--wave`, or
/// for the file's first wave.
pub async fn check_earlier_waves(plan: &Plan) -> Result<(), WaveRefused> {
    let Some(wave) = plan.options.wave else {
        return Ok(());
    };
    if plan.config.earlier_waves.is_empty() {
        return Ok(());
    }
    let Some(commit) = &plan.commit else {
        return Err(WaveRefused::NoCommit { wave });
    };
    let mut earlier = plan.config.clone();
    earlier.targets = plan.config.earlier_waves.clone();
    let read = read_records(&earlier, &plan.env).await;
    let earlier: Vec<wave_gate::Earlier> = read
        .into_iter()
        .map(|(target, records)| wave_gate::Earlier { target, records })
        .collect();
    wave_gate::judge(wave, commit, &earlier)
}

/// Whether a target whose history is `records` took part in `release` (a record of the same
/// run) and still runs it: None when it did not take part or went back to a revision before
/// it; else the stages its record of that release lists. A newer deploy, or a rollback to
/// that release or later, counts as still on it (it runs code at least as new). Pure.
pub fn still_on_release(
    records: &[ReleaseRecord],
    release: &ReleaseRecord,
) -> Option<Vec<crate::report::StageResult>> {
    let mine = records.iter().find(|r| same_run(r, release))?;
    let newest = records.iter().max_by_key(|r| r.revision)?;
    let went_back = newest.revision > mine.revision
        && newest.kind != release::ReleaseKind::Deploy
        && newest.status == release::ReleaseStatus::Deployed
        && newest.rollback_of.is_none_or(|to| to < mine.revision);
    (!went_back).then(|| mine.stages.clone())
}

/// Whether two records (of two targets) were written by one run: the same revision, kind and
/// commit, and the same run id when both have one (older records have none).
pub fn same_run(a: &ReleaseRecord, b: &ReleaseRecord) -> bool {
    let sha = |r: &ReleaseRecord| r.commit.as_ref().map(|c| c.sha.clone());
    a.revision == b.revision
        && a.kind == b.kind
        && sha(a) == sha(b)
        && match (&a.run.id, &b.run.id) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        }
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
    // Every ready target is asked at once.
    let in_flight = crate::cluster::apply::fleet_window(ready.len());
    let targets = futures::future::join_all(ready.iter().map(|p| {
        let set = crate::engine::reapply::manifest_set_from_bodies(&p.bodies, &p.destination);
        let (cancel, in_flight) = (cancel.clone(), in_flight.clone());
        async move {
            let mut start = TargetPlan::new(p.connected.target.name.clone());
            start.to = Some(p.destination.clone());
            let mut plan = crate::commands::diff::diff_target(
                &p.connected.access,
                &set,
                p.default_namespace.clone(),
                force,
                crate::cluster::apply::field_manager(&config.app),
                deadline,
                in_flight,
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
) -> Result<Planned, TargetFailure> {
    let store = &connected.store;
    // Abandoned records are marked once the lock is held (see `recheck`), not here.
    let records = store.list().await?;
    // A list holds no manifests; the change summary compares the current ones.
    let current = match records.iter().map(|r| r.revision).max() {
        Some(revision) => Some(store.get(revision).await?),
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
                chosen_record: None,
                destination: format!("commit {short}"),
                default_namespace,
                connected,
                from_revision: None,
                chosen: None,
                commands: Vec::new(),
                ran: Vec::new(),
                from_record: None,
            }
        }
        None => {
            let revision = policy::choose_manual_target(&records, args.revision, args.force)?;
            let to = store.get(revision).await?;
            let mut bodies = reapply::record_manifests(config, &to, None).await?;
            // The coordinator puts objects without a namespace in the target's default
            // namespace of now; where the release applied them elsewhere (the config's
            // namespace changed since), they go back there.
            if to
                .default_namespace
                .as_ref()
                .is_some_and(|then| *then != default_namespace)
            {
                release::fill_namespaces(&mut bodies, &to.objects);
            }
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
                chosen_record: args.revision.is_some().then(|| ReleaseRecord {
                    manifests: None,
                    ..to.clone()
                }),
                destination: format!("v{revision}"),
                default_namespace: to.default_namespace.clone().unwrap_or(default_namespace),
                connected,
                from_revision: None,
                chosen: Some(revision),
                commands: Vec::new(),
                ran: Vec::new(),
                from_record: None,
            }
        }
    };
    // The revision rolled back from: its script stages' rollback commands are due too.
    if let Some(current) = &current {
        planned.from_revision = Some(current.revision);
        planned.ran = current.stages.clone();
        planned.commands = crate::stages::plan::rollback_command_lines(
            &config.pipeline,
            &current.stages,
            config.rollback_order,
        );
        planned.from_record = Some(ReleaseRecord {
            manifests: None,
            ..current.clone()
        });
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
        other_namespace_secrets: None,
        stages: Vec::new(),
    }
}

/// Ask on the terminal; anything but y/yes is no, and so is a signal while it waits (the
/// read is on a blocking thread, left behind: the process ends soon after).
async fn confirm(targets: usize, cancel: &tokio_util::sync::CancellationToken) -> bool {
    eprint!("Roll back {targets} target(s)? [y/N] ");
    let _ = std::io::stderr().flush();
    let read = tokio::task::spawn_blocking(|| {
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).map(|_| answer)
    });
    let answer = tokio::select! {
        answer = read => answer,
        _ = cancel.cancelled() => return false,
    };
    match answer {
        Ok(Ok(answer)) => matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        _ => false,
    }
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
                dirty: false,
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
    fn history_clips_long_notes_so_that_lines_do_not_wrap() {
        let mut long = rec(3, ReleaseStatus::Failed);
        long.reason = Some(format!(
            "ImagePullBackOff: {}\nsecond line",
            "x".repeat(300)
        ));
        let text = history_table("eu", &[rec(1, ReleaseStatus::Deployed), long]);
        let line = text.lines().nth(3).expect("the row of v3");
        let note = line.split("  ").last().unwrap_or_default();
        assert_eq!(display_width(note), NOTE_COLUMNS, "{line}");
        assert!(
            note.starts_with("ImagePullBackOff: xxx") && note.ends_with('…'),
            "{line}"
        );
        assert_eq!(text.lines().count(), 4, "one line per record:\n{text}");
    }

    #[test]
    fn show_and_history_documents_parse_with_several_targets() {
        let shown: Vec<(String, Value)> = ["eu", "us", "ap"]
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    shown_record(&rec(1, ReleaseStatus::Deployed)).unwrap(),
                )
            })
            .collect();
        let json = render_documents(&shown, RecordFormat::Json).unwrap();
        let parsed: Value = serde_json::from_str(&json).expect("one JSON document");
        let keys: Vec<&String> = parsed.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3, "{json}");
        assert_eq!(parsed["us"]["revision"], 1);
        assert!(
            json.find("\"eu\"") < json.find("\"us\"") && json.find("\"us\"") < json.find("\"ap\""),
            "config order: {json}"
        );
        let yaml = render_documents(&shown, RecordFormat::Yaml).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("a YAML stream");
        assert_eq!(docs.len(), 3, "{yaml}");
        for (doc, (name, value)) in docs.iter().zip(&shown) {
            assert_eq!(doc[name.as_str()], *value, "{yaml}");
        }
        for text in [&json, &yaml] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains(&redact::marker(b"hunter2")), "{text}");
        }
        let history = vec![
            (
                "eu".to_string(),
                serde_json::to_value(vec![
                    rec(1, ReleaseStatus::Superseded),
                    rec(2, ReleaseStatus::Deployed),
                ])
                .unwrap(),
            ),
            ("us".to_string(), json!([])),
        ];
        let parsed: Value =
            serde_json::from_str(&render_documents(&history, RecordFormat::Json).unwrap()).unwrap();
        assert_eq!(parsed["eu"][1]["revision"], 2);
        assert_eq!(parsed["us"], json!([]));
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&render_documents(&history, RecordFormat::Yaml).unwrap())
                .unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["eu"][0]["revision"], 1);
        assert_eq!(render_documents(&[], RecordFormat::Json).unwrap(), "");
    }

    #[test]
    fn exit_codes_over_targets() {
        // (per-target codes, the command's)
        let cases: &[(&[i32], i32)] = &[
            (&[], exit::OK),
            (&[exit::OK, exit::OK], exit::OK),
            (&[exit::OK, exit::BAD_INPUT], exit::BAD_INPUT),
            (&[exit::BAD_INPUT, exit::FAILED], exit::FAILED),
            (&[exit::FAILED, exit::OK], exit::FAILED),
        ];
        for (codes, want) in cases {
            assert_eq!(combined_exit(codes.iter().copied()), *want, "{codes:?}");
        }
        let missing = ReleaseError::NotFound {
            app: "shop".into(),
            namespace: "shop".into(),
            revision: 99,
        };
        assert_eq!(release_error_code(&missing), exit::BAD_INPUT);
        assert_eq!(
            release_error_code(&ReleaseError::NoFreeRevision {
                revision: 9,
                app: "shop".into()
            }),
            exit::FAILED
        );
    }

    #[test]
    fn a_history_that_moved_while_asking_is_refused() {
        // (newest when planned, choice when planned, newest now, choice now) -> ok?
        let cases = [
            ((Some(2), Some(1), Some(2), Some(1)), None),
            ((None, None, None, None), None),
            (
                (Some(2), Some(1), Some(3), Some(2)),
                Some("the newest release is now v3"),
            ),
            (
                (Some(2), Some(1), None, None),
                Some("the newest release is now no release"),
            ),
            (
                (Some(2), Some(1), Some(2), Some(0)),
                Some("no longer the one confirmed"),
            ),
            ((Some(2), None, Some(2), None), None),
        ];
        for ((pn, pc, n, c), want) in cases {
            let got = still_current(pn, pc, n, c);
            match want {
                None => assert!(got.is_ok(), "{got:?}"),
                Some(text) => {
                    let why = got.expect_err("refused").to_string();
                    assert!(
                        why.contains(text) && why.contains("nothing was changed"),
                        "{why}"
                    );
                }
            }
        }
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

    #[test]
    fn which_other_targets_still_run_the_release_rolled_back() {
        use crate::release::ReleaseKind;
        let run = |revision: u64, id: &str, kind: ReleaseKind, status: ReleaseStatus| {
            let mut r = rec(revision, status);
            r.manifests = None;
            r.kind = kind;
            r.run.id = Some(id.into());
            r
        };
        let deploy = |revision, id| run(revision, id, ReleaseKind::Deploy, ReleaseStatus::Deployed);
        let back = |revision, id, to: u64| {
            let mut r = run(revision, id, ReleaseKind::Rollback, ReleaseStatus::Deployed);
            r.rollback_of = Some(to);
            r
        };
        let mut release = deploy(2, "run-a");
        release.stages = vec![crate::report::StageResult {
            name: "migrate".into(),
            scope: "fleet".into(),
            rollback: false,
            outcome: crate::report::StageOutcome::Succeeded,
            exit_code: Some(0),
            seconds: 0.1,
            message: None,
            output: vec![],
        }];
        let mut failed_back = back(3, "run-a", 1);
        failed_back.status = ReleaseStatus::Failed;
        // (case, the other target's records, still on the release)
        let cases: Vec<(&str, Vec<ReleaseRecord>, bool)> = vec![
            (
                "still on it",
                vec![deploy(1, "run-0"), release.clone()],
                true,
            ),
            (
                "rolled back by the deploy's policy",
                vec![deploy(1, "run-0"), release.clone(), back(3, "run-a", 1)],
                false,
            ),
            (
                "rolled back by hand to before it",
                vec![
                    deploy(1, "run-0"),
                    release.clone(),
                    run(
                        3,
                        "run-b",
                        ReleaseKind::ManualRollback,
                        ReleaseStatus::Deployed,
                    ),
                ],
                false,
            ),
            (
                "a rollback that failed keeps it on the release",
                vec![deploy(1, "run-0"), release.clone(), failed_back],
                true,
            ),
            (
                "a newer deploy runs newer code",
                vec![deploy(1, "run-0"), release.clone(), deploy(3, "run-c")],
                true,
            ),
            (
                "the same number from another run (a --target deploy) is not this release",
                vec![deploy(1, "run-0"), deploy(2, "run-z")],
                false,
            ),
            ("no records", vec![], false),
        ];
        for (case, records, want) in cases {
            let got = still_on_release(&records, &release);
            assert_eq!(got.is_some(), want, "{case}");
            if let Some(ran) = got {
                assert_eq!(
                    ran.len(),
                    1,
                    "{case}: the stages of its record of the release"
                );
            }
        }
        // Records written before run ids existed match on revision, kind and commit.
        let mut old = release.clone();
        old.run.id = None;
        assert!(same_run(&old, &release));
        let mut other_commit = release.clone();
        other_commit.commit = None;
        assert!(!same_run(&other_commit, &release));
    }
}
