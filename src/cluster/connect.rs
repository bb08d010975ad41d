//! One target (a cluster, named for reports) -> a kube `Client`.
//!
//! The kubeconfig comes from, in order: the target's `kubeconfig_env` (the whole file in an
//! environment variable, raw YAML or base64, as CI secrets hold it), the target's
//! `kubeconfig` path, `--kubeconfig`, `$KUBECONFIG` (a list of files, merged), then
//! `~/.kube/config`. Errors name the target and what to do; errors of the first requests
//! are turned into a short reason (`ConnectionRefused`, `TLS`, `Unauthorized`, ...) by
//! [`describe_error`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig, NamedContext};

use crate::cluster::credentials::{AuthLayer, Refresher};
use crate::cluster::retry::{error_chain_text, io_error_kind, is_tls_problem, root_cause_text};
use crate::cluster::transport::{self, TransportError};
use crate::config::{Config, ConfigError, ConfigIssue, TargetConfig};
use crate::report::Failure;
use crate::util::bounded;

/// A connected target.
#[derive(Clone)]
pub struct ClusterAccess {
    /// For every request but watches: each read must come within the request timeout.
    pub client: kube::Client,
    /// For watches, which stay open and silent for minutes: no read timeout (a watch is
    /// bounded by its caller's deadline).
    pub watch_client: kube::Client,
    /// The namespace of the kubeconfig context (or "default").
    pub context_namespace: String,
    /// The API server URL, for messages.
    pub server: String,
    /// Only this target's cluster, user and context: what its script stages get.
    pub script_kubeconfig: Kubeconfig,
}

pub use crate::cluster::error::TargetError;

/// How long a TCP + TLS connect may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request (not a watch) may wait for the server's next bytes.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a kubeconfig was read from, for messages.
fn describe_source(source: &KubeconfigSource) -> String {
    match source {
        KubeconfigSource::Env(var) => format!("environment variable {var}"),
        KubeconfigSource::Files(paths) => paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    }
}

enum KubeconfigSource {
    Env(String),
    Files(Vec<PathBuf>),
}

/// What is wrong with the content of a `kubeconfig_env` variable (said after its name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigEnvError {
    #[error("is empty")]
    Empty,
    #[error("is neither YAML nor base64 ({0})")]
    NotBase64(#[source] base64::DecodeError),
    #[error("holds base64 that does not decode to text")]
    NotText(#[source] std::string::FromUtf8Error),
}

/// Decodes the content of a `kubeconfig_env` variable: raw YAML/JSON, or base64 of it.
pub fn decode_kubeconfig_env(text: &str) -> Result<String, KubeconfigEnvError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(KubeconfigEnvError::Empty);
    }
    // Raw YAML always has a ':' (keys); base64 never does.
    if trimmed.contains(':') {
        return Ok(text.to_string());
    }
    let compact: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(KubeconfigEnvError::NotBase64)?;
    String::from_utf8(bytes).map_err(KubeconfigEnvError::NotText)
}

/// Where a target's kubeconfig path came from, for the message when the file is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileOrigin {
    /// The target's `kubeconfig` in the config file.
    Target,
    /// `--kubeconfig` (or `$ROLLGUARD_KUBECONFIG` / `$INPUT_KUBECONFIG`).
    Flag,
    /// `$KUBECONFIG`.
    EnvVar,
    /// `~/.kube/config`, as nothing else named one.
    Home,
}

/// The kubeconfig files to read when neither the target nor env names one.
fn default_kubeconfig_files(
    cli_kubeconfig: Option<&Path>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> (Vec<PathBuf>, FileOrigin) {
    if let Some(path) = cli_kubeconfig {
        return (vec![path.to_path_buf()], FileOrigin::Flag);
    }
    if let Some(list) = env("KUBECONFIG").filter(|v| !v.trim().is_empty()) {
        let files = std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        return (files, FileOrigin::EnvVar);
    }
    let home = env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    (vec![home.join(".kube").join("config")], FileOrigin::Home)
}

/// A kubeconfig file that does not exist: where its path came from, and every way to give
/// one (a first run in CI usually has none of them set).
fn missing_kubeconfig(file: &Path, origin: FileOrigin) -> String {
    let from = match origin {
        FileOrigin::Target => "the target's `kubeconfig` in the config file",
        FileOrigin::Flag => "--kubeconfig or $ROLLGUARD_KUBECONFIG",
        FileOrigin::EnvVar => "$KUBECONFIG",
        FileOrigin::Home => "the default: neither --kubeconfig nor $KUBECONFIG is set",
    };
    format!(
        "kubeconfig {} does not exist ({from}): give one with --kubeconfig PATH, with $KUBECONFIG, \
         or in the target's entry of the config file with `kubeconfig_env` (an environment \
         variable holding the whole file) or `kubeconfig` (a path)",
        file.display()
    )
}

fn read_kubeconfig(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &KubeconfigCache,
) -> Result<(Arc<Kubeconfig>, KubeconfigSource), TargetError> {
    if let Some(var) = &target.kubeconfig_env {
        let raw = env(var).ok_or_else(|| {
            TargetError::new(
                "Kubeconfig",
                format!("environment variable {var} (kubeconfig_env) is not set: export the kubeconfig into it"),
            )
        })?;
        // The variable holds a whole kubeconfig (credentials included): known to the
        // scrubber as it is and decoded, before anything can print it.
        crate::report::redact::learn_document(raw.trim().as_bytes());
        let text = decode_kubeconfig_env(&raw).map_err(|why| {
            TargetError::new("Kubeconfig", format!("environment variable {var} {why}"))
        })?;
        crate::report::redact::learn_document(text.trim().as_bytes());
        let config = Kubeconfig::from_yaml(&text).map_err(|e| {
            TargetError::new(
                "Kubeconfig",
                format!("environment variable {var} does not hold a valid kubeconfig: {e}"),
            )
        })?;
        return Ok((Arc::new(config), KubeconfigSource::Env(var.clone())));
    }
    let (files, origin) = match &target.kubeconfig {
        Some(path) if path.is_relative() => (vec![base_dir.join(path)], FileOrigin::Target),
        Some(path) => (vec![path.clone()], FileOrigin::Target),
        None => default_kubeconfig_files(cli_kubeconfig, env),
    };
    let config = cache.read(&files, origin)?;
    Ok((config, KubeconfigSource::Files(files)))
}

/// Kubeconfig files already read by a run, by path, size and modification time: a fleet of
/// N targets in one kubeconfig of N contexts would otherwise parse it N times over (and three
/// times per target: the checks, the overlap check, the connection). A file that changed is
/// read again. Owned by what runs the targets (a deploy's plan, a release command) and handed
/// to every read; clones share it.
#[derive(Clone, Default)]
pub struct KubeconfigCache(
    Arc<std::sync::Mutex<std::collections::HashMap<FileKey, Arc<Kubeconfig>>>>,
);

type FileKey = Vec<(PathBuf, u64, Option<std::time::SystemTime>)>;

/// Says how many files it holds, never what is in them (credentials).
impl std::fmt::Debug for KubeconfigCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().map_or(0, |m| m.len());
        write!(f, "KubeconfigCache({held} read)")
    }
}

impl KubeconfigCache {
    /// The merged kubeconfig of `files`, read once while they do not change.
    fn read(&self, files: &[PathBuf], origin: FileOrigin) -> Result<Arc<Kubeconfig>, TargetError> {
        let key: FileKey = files
            .iter()
            .map(|f| {
                let meta = std::fs::metadata(f).ok();
                (
                    f.clone(),
                    meta.as_ref().map_or(0, |m| m.len()),
                    meta.and_then(|m| m.modified().ok()),
                )
            })
            .collect();
        if let Some(found) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(found);
        }
        let read = Arc::new(read_files(files, origin)?);
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, read.clone());
        }
        Ok(read)
    }
}

fn read_files(files: &[PathBuf], origin: FileOrigin) -> Result<Kubeconfig, TargetError> {
    let mut merged: Option<Kubeconfig> = None;
    for file in files {
        // kube reads the whole file; its size is checked first (the path fix-ups of
        // read_from are kept: relative certificate and token paths are the file's).
        if let Ok(meta) = std::fs::metadata(file)
            && meta.is_file()
            && meta.len() > bounded::MAX_KUBECONFIG_FILE
        {
            return Err(TargetError::new(
                "Kubeconfig",
                format!(
                    "kubeconfig {} is {}, over the {} cap on a kubeconfig file: is it the right file?",
                    file.display(),
                    bounded::size_text(meta.len()),
                    bounded::size_text(bounded::MAX_KUBECONFIG_FILE)
                ),
            ));
        }
        let one = Kubeconfig::read_from(file).map_err(|e| {
            let message = if io_error_kind(&e) == Some(std::io::ErrorKind::NotFound) {
                missing_kubeconfig(file, origin)
            } else {
                format!(
                    "cannot read kubeconfig {}: {}",
                    file.display(),
                    root_cause_text(&e)
                )
            };
            TargetError::new("Kubeconfig", message)
        })?;
        merged = Some(match merged {
            None => one,
            Some(m) => m.merge(one).map_err(|e| {
                TargetError::new(
                    "Kubeconfig",
                    format!("cannot merge kubeconfig {}: {e}", file.display()),
                )
            })?,
        });
    }
    merged.ok_or_else(|| TargetError::new("Kubeconfig", "no kubeconfig file given"))
}

/// The kubeconfig a target that names none would use (`--kubeconfig`, `$KUBECONFIG` merged,
/// `~/.kube/config`), and where it was read from: what `rollguard init` lists the contexts of.
pub fn read_default_kubeconfig(
    cli_kubeconfig: Option<&Path>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(Kubeconfig, String), TargetError> {
    let anonymous = TargetConfig::default();
    let once = KubeconfigCache::default();
    let (config, source) = read_kubeconfig(&anonymous, cli_kubeconfig, Path::new("."), env, &once)?;
    Ok((Kubeconfig::clone(&config), describe_source(&source)))
}

/// What a kubeconfig lacks for one of its contexts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("the kubeconfig names no context and has no current-context")]
    NoContext,
    #[error("context {0:?} is not in the kubeconfig")]
    MissingContext(String),
    #[error("context {0:?} is empty")]
    EmptyContext(String),
    #[error("cluster {cluster:?} of context {context:?} is not in the kubeconfig")]
    MissingCluster { cluster: String, context: String },
    #[error("user {user:?} of context {context:?} is not in the kubeconfig")]
    MissingUser { user: String, context: String },
}

/// The part of `full` that `context` (None: its current-context) needs, renamed to `rename`
/// when given (with its cluster and user, so that several such parts merge without clashes).
pub fn single_context(
    full: &Kubeconfig,
    context: Option<&str>,
    rename: Option<&str>,
) -> Result<Kubeconfig, ContextError> {
    let wanted = context
        .or(full.current_context.as_deref())
        .ok_or(ContextError::NoContext)?;
    let named = full
        .contexts
        .iter()
        .find(|c| c.name == wanted)
        .ok_or_else(|| ContextError::MissingContext(wanted.to_string()))?;
    let mut ctx = named
        .context
        .clone()
        .ok_or_else(|| ContextError::EmptyContext(wanted.to_string()))?;
    let mut cluster = full
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .cloned()
        .ok_or_else(|| ContextError::MissingCluster {
            cluster: ctx.cluster.clone(),
            context: wanted.to_string(),
        })?;
    let mut user = match &ctx.user {
        Some(u) => Some(
            full.auth_infos
                .iter()
                .find(|a| &a.name == u)
                .cloned()
                .ok_or_else(|| ContextError::MissingUser {
                    user: u.clone(),
                    context: wanted.to_string(),
                })?,
        ),
        None => None,
    };
    let name = rename.unwrap_or(wanted).to_string();
    if rename.is_some() {
        cluster.name = name.clone();
        ctx.cluster = name.clone();
        if let Some(user) = &mut user {
            user.name = name.clone();
            ctx.user = Some(name.clone());
        }
    }
    Ok(Kubeconfig {
        clusters: vec![cluster],
        auth_infos: user.into_iter().collect(),
        contexts: vec![NamedContext {
            name: name.clone(),
            context: Some(ctx),
            ..named.clone()
        }],
        current_context: Some(name),
        kind: Some("Config".into()),
        api_version: Some("v1".into()),
        ..Kubeconfig::default()
    })
}

/// A target's kubeconfig, read and checked offline: its context, cluster, user and
/// credentials source exist. Building the client from it sends no request.
pub struct ResolvedTarget {
    kubeconfig: Kubeconfig,
    source: KubeconfigSource,
    context: String,
    /// The context's user, for messages about its credentials.
    user: Option<String>,
}

/// Reads a target's kubeconfig and checks, without any request, everything that can be
/// checked: the context exists, names a cluster with a server and a user that exist, and the
/// user's credentials source is there (token file, client certificate and key files, the
/// exec plugin's command on `PATH`). Run for every target before anything is written.
pub fn resolve(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &KubeconfigCache,
) -> Result<ResolvedTarget, TargetError> {
    let (kubeconfig, source) = read_kubeconfig(target, cli_kubeconfig, base_dir, env, cache)?;
    let where_ = describe_source(&source);
    let context = match target
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
    {
        Some(context) => context,
        None => {
            return Err(TargetError::new(
                "ContextNotFound",
                format!(
                    "kubeconfig {where_} sets no current-context and the target names no `context`: set one"
                ),
            ));
        }
    };
    let named = kubeconfig.contexts.iter().find(|c| c.name == context);
    let Some(ctx) = named.and_then(|c| c.context.as_ref()) else {
        let available: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return Err(TargetError::new(
            "ContextNotFound",
            format!(
                "context {context:?} is not in kubeconfig {where_} (it has: {})",
                if available.is_empty() {
                    "no contexts".to_string()
                } else {
                    available.join(", ")
                }
            ),
        ));
    };
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref());
    let Some(cluster) = cluster else {
        return Err(TargetError::new(
            "Kubeconfig",
            format!(
                "context {context:?} names cluster {:?}, which is not in kubeconfig {where_}: add it or fix the context",
                ctx.cluster
            ),
        ));
    };
    if cluster
        .server
        .as_deref()
        .is_none_or(|s| s.trim().is_empty())
    {
        return Err(TargetError::new(
            "Kubeconfig",
            format!(
                "cluster {:?} of kubeconfig {where_} has no `server`: set the API server URL",
                ctx.cluster
            ),
        ));
    }
    if let Some(ca) = &cluster.certificate_authority {
        check_file(ca, "certificate-authority", &where_)?;
    }
    if let Some(user) = &ctx.user {
        let auth = kubeconfig
            .auth_infos
            .iter()
            .find(|u| &u.name == user)
            .and_then(|u| u.auth_info.as_ref());
        let Some(auth) = auth else {
            return Err(TargetError::new(
                "Kubeconfig",
                format!(
                    "context {context:?} names user {user:?}, which is not in kubeconfig {where_}: add it or fix the context"
                ),
            ));
        };
        check_credentials(auth, user, &where_, env)?;
        crate::cluster::known::learn_credentials(auth);
    }
    let user = ctx.user.clone();
    // Only this target's context, cluster and user: the rest of a large kubeconfig is not
    // carried (nor cloned) per target.
    let kubeconfig = single_context(&kubeconfig, Some(&context), None)
        .map_err(|why| TargetError::new("Kubeconfig", format!("kubeconfig {where_}: {why}")))?;
    Ok(ResolvedTarget {
        kubeconfig,
        source,
        context,
        user,
    })
}

/// [`resolve`] for every one of `targets`: all problems at once, each located at its
/// target's entry in the config file, so that bad access is bad input (exit 2) before any
/// target is written to.
pub fn check_targets(
    config: &Config,
    targets: &[TargetConfig],
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &KubeconfigCache,
) -> Result<(), ConfigError> {
    for (variable, checked) in [
        (
            "ROLLGUARD_EXEC_TIMEOUT",
            crate::cluster::exec_auth::plugin_timeout(env),
        ),
        ("ROLLGUARD_REQUEST_TIMEOUT", request_timeout(env)),
    ] {
        if let Err(why) = checked {
            return Err(ConfigError::Invalid(vec![ConfigIssue {
                location: format!("${variable}"),
                message: why.to_string(),
            }]));
        }
    }
    let file = config.source.display();
    let problems: Vec<TargetProblem> = targets
        .iter()
        .filter_map(|target| {
            let e = resolve(
                target,
                config.kubeconfig.as_deref(),
                &config.base_dir,
                env,
                cache,
            )
            .err()?;
            Some(TargetProblem {
                location: if target.line > 0 {
                    format!("{file}:{}", target.line)
                } else {
                    file.to_string()
                },
                target: &target.name,
                problem: format!("{}: {}", e.reason, e.message),
            })
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let mut issues = said_once(problems);
    bounded::cap_issues(&mut issues, |more| ConfigIssue {
        location: file.to_string(),
        message: format!(
            "... and {more} more problems of other targets: fix these and run again to see them"
        ),
    });
    Err(ConfigError::Invalid(issues))
}

/// One target's problem with its access, before [`said_once`] groups them.
struct TargetProblem<'a> {
    location: String,
    target: &'a str,
    problem: String,
}

/// How many targets a problem shared by several names before "and N more".
const SHARED_NAMES: usize = 3;

/// The issues of `problems`, each problem said once in full: a problem shared by several
/// targets (1,000 targets and one missing kubeconfig) is one issue at the first one's
/// entry that names the targets, in the order they came.
fn said_once(problems: Vec<TargetProblem<'_>>) -> Vec<ConfigIssue> {
    let mut groups: Vec<(String, Vec<&str>, String)> = Vec::new();
    for p in problems {
        match groups
            .iter_mut()
            .find(|(_, _, problem)| *problem == p.problem)
        {
            Some((_, names, _)) => names.push(p.target),
            None => groups.push((p.location, vec![p.target], p.problem)),
        }
    }
    groups
        .into_iter()
        .map(|(location, names, problem)| {
            let shown: Vec<String> = names
                .iter()
                .take(SHARED_NAMES)
                .map(|n| format!("{n:?}"))
                .collect();
            let who = match names.len() {
                1 => format!("target {}", shown[0]),
                n if n <= SHARED_NAMES => format!("targets {}", shown.join(", ")),
                n => format!(
                    "targets {} and {} more ({n} in all)",
                    shown.join(", "),
                    n - SHARED_NAMES
                ),
            };
            ConfigIssue {
                location,
                message: format!("{who}: {problem}"),
            }
        })
        .collect()
}

/// Where a target points, read from its kubeconfig without touching the network (through
/// [`resolve`]): the context's cluster server and namespace. For validation (two targets on
/// one cluster and namespace), after [`check_targets`] has passed.
pub fn locate_offline(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &KubeconfigCache,
) -> Result<(String, Option<String>), TargetError> {
    let resolved = resolve(target, cli_kubeconfig, base_dir, env, cache)?;
    // resolve() checked that the context, its cluster and the cluster's server exist.
    let ctx = resolved
        .kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == resolved.context)
        .and_then(|c| c.context.as_ref());
    let server = ctx.and_then(|ctx| {
        resolved
            .kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == ctx.cluster)
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
    });
    match (ctx, server) {
        (Some(ctx), Some(server)) => Ok((server, ctx.namespace.clone())),
        _ => Err(TargetError::new(
            "Kubeconfig",
            format!(
                "context {:?} of kubeconfig {} has no cluster server",
                resolved.context,
                describe_source(&resolved.source)
            ),
        )),
    }
}

/// The user's credentials source is present: files exist, the exec command is found.
fn check_credentials(
    auth: &kube::config::AuthInfo,
    user: &str,
    where_: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(), TargetError> {
    let what = |field: &str| format!("user {user:?}: {field}");
    if let Some(file) = &auth.token_file {
        check_file(file, &what("tokenFile"), where_)?;
    }
    if let Some(file) = &auth.client_certificate {
        check_file(file, &what("client-certificate"), where_)?;
    }
    if let Some(file) = &auth.client_key {
        check_file(file, &what("client-key"), where_)?;
    }
    let has_cert = auth.client_certificate.is_some() || auth.client_certificate_data.is_some();
    let has_key = auth.client_key.is_some() || auth.client_key_data.is_some();
    if has_cert != has_key {
        return Err(TargetError::new(
            "Credentials",
            format!(
                "{} in kubeconfig {where_} has a client {} without its {}: set both",
                what("client certificate"),
                if has_cert { "certificate" } else { "key" },
                if has_cert { "key" } else { "certificate" }
            ),
        ));
    }
    if let Some(exec) = &auth.exec {
        let Some(command) = exec.command.as_deref().filter(|c| !c.trim().is_empty()) else {
            return Err(TargetError::new(
                "Credentials",
                format!("{} in kubeconfig {where_} has no command", what("exec")),
            ));
        };
        if crate::util::process_group::find_command(command, env).is_none() {
            return Err(TargetError::new(
                "Credentials",
                format!(
                    "{} in kubeconfig {where_}: command {command:?} is not found{}: install it or fix the path",
                    what("exec"),
                    if command.contains('/') {
                        ""
                    } else {
                        " on PATH"
                    }
                ),
            ));
        }
    }
    Ok(())
}

fn check_file(file: &str, what: &str, where_: &str) -> Result<(), TargetError> {
    match std::fs::metadata(file) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(TargetError::new(
            "Credentials",
            format!("{what} {file} of kubeconfig {where_} is not a file"),
        )),
        Err(e) => Err(TargetError::new(
            "Credentials",
            format!("{what} {file} of kubeconfig {where_} cannot be read: {e}"),
        )),
    }
}

/// Builds a client for a target. No request is sent yet: the first request (discovery) shows
/// whether the cluster answers, and its error goes through [`describe_error`].
/// An exec credential plugin runs here, under [`exec_auth`](crate::cluster::exec_auth)'s
/// deadline and stopped by `cancel`.
pub async fn connect(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cache: &KubeconfigCache,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<ClusterAccess, TargetError> {
    let ResolvedTarget {
        kubeconfig,
        source,
        context,
        user,
    } = resolve(target, cli_kubeconfig, base_dir, env, cache)?;
    let script_kubeconfig = single_context(&kubeconfig, Some(&context), None).map_err(|why| {
        TargetError::new(
            "Kubeconfig",
            format!("kubeconfig {}: {why}", describe_source(&source)),
        )
    })?;
    let options = KubeConfigOptions {
        context: Some(context),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| {
            TargetError::new(
                "Kubeconfig",
                format!(
                    "kubeconfig {}: {}",
                    describe_source(&source),
                    error_chain_text(&e)
                ),
            )
        })?;
    let refresher =
        refreshable_credential(&mut config.auth_info, user.as_deref(), env, cancel).await?;
    // Our own retry (cluster/retry.rs) is bounded by the target's deadline; kube's is not.
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let server = config.cluster_url.to_string();
    let context_namespace = config.default_namespace.clone();
    // A server that accepted the request and never answers fails it after this, in every
    // command (lock, records and unlock included), whatever deadline the caller has.
    // Watches stay open for minutes: no read timeout on them.
    let read_timeout = request_timeout(env).map_err(|why| {
        TargetError::new("Kubeconfig", format!("$ROLLGUARD_REQUEST_TIMEOUT: {why}"))
    })?;
    let (client, watch_client) = build_clients(&config, read_timeout, refresher).map_err(|e| {
        let reason = if is_tls_problem(&e) {
            "TLS"
        } else {
            "Kubeconfig"
        };
        TargetError::new(
            reason,
            format!(
                "cannot build a client for {server}: {}",
                error_chain_text(&e)
            ),
        )
    })?;
    Ok(ClusterAccess {
        client,
        watch_client,
        context_namespace,
        server,
        script_kubeconfig,
    })
}

/// How long a request may wait for the server's next bytes (default 30 s;
/// `ROLLGUARD_REQUEST_TIMEOUT` changes it). Checked offline with the targets.
pub fn request_timeout(
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Duration, crate::util::duration::DurationError> {
    match env("ROLLGUARD_REQUEST_TIMEOUT") {
        None => Ok(REQUEST_TIMEOUT),
        Some(text) => crate::util::duration::parse_duration(&text),
    }
}

/// The request and watch clients of a target, over one connection pool (HTTP/2 where the
/// server offers it: `transport.rs`), without any retry layer: every call goes through
/// rollguard's one retry policy (`retry.rs`), which knows the target's deadline. A layer here
/// would retry under it, so one 503 would cost attempts times retries, and its waits would
/// ignore the deadline. A refreshable credential is put on every request by its own layer
/// (`credentials.rs`). A proxy (`proxy-url`) goes through kube's own builder, which says
/// that this build does not support it.
fn build_clients(
    config: &kube::Config,
    read_timeout: Duration,
    refresher: Option<Arc<Refresher>>,
) -> Result<(kube::Client, kube::Client), TransportError> {
    if config.proxy_url.is_some() {
        kube::client::ClientBuilder::try_from(config.clone())?;
    }
    let (requests, watches) = transport::build_clients(config, read_timeout)?;
    Ok(match refresher {
        Some(refresher) => {
            let auth = AuthLayer::new(refresher);
            (
                requests.with_layer(&auth).build(),
                watches.with_layer(&auth).build(),
            )
        }
        None => (requests.build(), watches.build()),
    })
}

/// A user whose token can change during the run (an exec plugin's, a token file's) gets a
/// [`Refresher`] in place of kube's auth: the plugin runs here once (under its deadline,
/// stopped by `cancel`) and again when its token expires or is refused. A plugin that gives
/// a client certificate makes `auth` that certificate's user, for the whole run.
async fn refreshable_credential(
    auth: &mut kube::config::AuthInfo,
    user: Option<&str>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Option<Arc<Refresher>>, TargetError> {
    if auth.exec.is_some() {
        let timeout = crate::cluster::exec_auth::plugin_timeout(env).map_err(|why| {
            TargetError::new("Credentials", format!("$ROLLGUARD_EXEC_TIMEOUT: {why}"))
        })?;
        let user = user.unwrap_or_default();
        return match Refresher::exec(auth, user, env, timeout, cancel).await? {
            Ok(refresher) => {
                // kube's own auth would set its header over this layer's.
                auth.exec = None;
                auth.token = None;
                auth.token_file = None;
                Ok(Some(refresher))
            }
            Err(certificate_user) => {
                *auth = *certificate_user;
                Ok(None)
            }
        };
    }
    // As kube does, an inline token wins over the file.
    if auth.token.is_none()
        && let Some(file) = auth.token_file.take()
    {
        return Refresher::file(PathBuf::from(file)).map(Some);
    }
    Ok(None)
}

/// Turns an API or transport error into the report's reason and a message saying what to do.
pub fn describe_error(err: &kube::Error, server: &str) -> TargetError {
    if let Some(wait) = crate::cluster::retry::rate_limited(err) {
        return TargetError::new(
            "RateLimited",
            format!(
                "{server}: {}",
                crate::cluster::retry::rate_limited_message(wait)
            ),
        );
    }
    if let kube::Error::Api(status) = err {
        return match status.code {
            401 => TargetError::new(
                "Unauthorized",
                format!(
                    "{server} refused the credentials (401 Unauthorized): check the token or client certificate of this target"
                ),
            ),
            403 => TargetError::new(
                "Forbidden",
                format!(
                    "{server} denied the request (403 Forbidden): {}; grant the needed RBAC permissions",
                    status.message
                ),
            ),
            code => TargetError::new(
                if status.reason.is_empty() {
                    "ApiError"
                } else {
                    status.reason.as_str()
                },
                format!("{server} answered {code}: {}", status.message),
            ),
        };
    }
    let chain = error_chain_text(err);
    let lower = chain.to_ascii_lowercase();
    if is_tls_problem(err) {
        return TargetError::new(
            "TLS",
            format!("TLS with {server} failed: {chain}; check the CA data and server address"),
        );
    }
    if lower.contains("dns error")
        || lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
    {
        return TargetError::new(
            "DNS",
            format!("cannot resolve the host of {server}: {chain}"),
        );
    }
    match io_error_kind(err) {
        Some(std::io::ErrorKind::ConnectionRefused) => TargetError::new(
            "ConnectionRefused",
            format!("connection to {server} refused: is the cluster up and the address right?"),
        ),
        Some(std::io::ErrorKind::TimedOut) => TargetError::new(
            "Timeout",
            format!("{server} did not answer in time: {chain}"),
        ),
        _ if lower.contains("timed out") || lower.contains("deadline has elapsed") => {
            TargetError::new(
                "Timeout",
                format!("{server} did not answer in time: {chain}"),
            )
        }
        _ if lower.contains("connection refused") => TargetError::new(
            "ConnectionRefused",
            format!("connection to {server} refused: is the cluster up and the address right?"),
        ),
        _ => TargetError::new("Unreachable", format!("cannot talk to {server}: {chain}")),
    }
}

/// A target error as a report failure on `object`.
pub fn target_failure(object: &str, e: &TargetError) -> Failure {
    Failure {
        object: object.to_string(),
        reason: e.reason.clone(),
        message: e.message.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_shared_by_targets_is_said_once() {
        let p = |line: u32, target: &'static str, problem: &str| TargetProblem {
            location: format!("rollguard.yaml:{line}"),
            target,
            problem: problem.into(),
        };
        let said = |problems| -> Vec<String> {
            said_once(problems)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let cases: [(Vec<TargetProblem>, Vec<&str>); 4] = [
            (
                vec![p(5, "eu", "Kubeconfig: gone")],
                vec![r#"rollguard.yaml:5: target "eu": Kubeconfig: gone"#],
            ),
            (
                vec![p(5, "eu", "Context: a"), p(7, "us", "Context: b")],
                vec![
                    r#"rollguard.yaml:5: target "eu": Context: a"#,
                    r#"rollguard.yaml:7: target "us": Context: b"#,
                ],
            ),
            (
                vec![
                    p(5, "eu", "Kubeconfig: gone"),
                    p(7, "us", "Context: b"),
                    p(9, "ap", "Kubeconfig: gone"),
                ],
                vec![
                    r#"rollguard.yaml:5: targets "eu", "ap": Kubeconfig: gone"#,
                    r#"rollguard.yaml:7: target "us": Context: b"#,
                ],
            ),
            (
                ["a", "b", "c", "d", "e"]
                    .iter()
                    .zip(1..)
                    .map(|(t, line)| p(line, t, "Kubeconfig: gone"))
                    .collect(),
                vec![
                    r#"rollguard.yaml:1: targets "a", "b", "c" and 2 more (5 in all): Kubeconfig: gone"#,
                ],
            ),
        ];
        for (problems, want) in cases {
            assert_eq!(said(problems), want);
        }
    }

    /// 25 targets, each with a kubeconfig of its own that does not exist: 25 problems, not
    /// one shared, so the first 20 are said in full and the rest counted, with what to do.
    #[test]
    fn past_twenty_problems_of_access_the_rest_are_counted() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let targets: String = (1..=25)
            .map(|i| format!("  - {{name: t{i}, kubeconfig: missing-{i}.yaml}}\n"))
            .collect();
        let source = dir.path().join("rollguard.yaml");
        let config = crate::config::parse(
            &format!("app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n{targets}"),
            &source,
            &crate::config::Overrides::default(),
            &|_| None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let err = check_targets(
            &config,
            &config.targets,
            &|_| None,
            &KubeconfigCache::default(),
        )
        .expect_err("no kubeconfig exists");
        let ConfigError::Invalid(issues) = err else {
            panic!("bad input: {err}");
        };
        assert_eq!(issues.len(), 21, "{issues:#?}");
        let first = issues[0].to_string();
        assert!(
            first.starts_with(&format!("{}:5: target \"t1\": ", source.display()))
                && first.contains("missing-1.yaml does not exist"),
            "{first}"
        );
        assert_eq!(
            issues[20].to_string(),
            format!(
                "{}: ... and 5 more problems of other targets: fix these and run again to see them",
                source.display()
            )
        );
    }

    #[test]
    fn kubeconfig_env_raw_or_base64() {
        let yaml = "apiVersion: v1\nkind: Config\n";
        assert_eq!(decode_kubeconfig_env(yaml).as_deref(), Ok(yaml));
        let b64 = base64::engine::general_purpose::STANDARD.encode(yaml);
        assert_eq!(
            decode_kubeconfig_env(&format!("{b64}\n")).as_deref(),
            Ok(yaml)
        );
        assert!(decode_kubeconfig_env("   ").is_err());
        assert!(decode_kubeconfig_env("not base64 !!!").is_err());
    }

    #[test]
    fn default_files_order() {
        let none = |_: &str| None;
        let p = PathBuf::from("/x/kc");
        assert_eq!(
            default_kubeconfig_files(Some(&p), &none),
            (vec![p.clone()], FileOrigin::Flag)
        );
        let env = |k: &str| match k {
            "KUBECONFIG" => Some("/a:/b".to_string()),
            _ => None,
        };
        assert_eq!(
            default_kubeconfig_files(None, &env),
            (
                vec![PathBuf::from("/a"), PathBuf::from("/b")],
                FileOrigin::EnvVar
            )
        );
        let home = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        assert_eq!(
            default_kubeconfig_files(None, &home),
            (
                vec![PathBuf::from("/home/u/.kube/config")],
                FileOrigin::Home
            )
        );
    }

    #[test]
    fn a_missing_kubeconfig_says_where_its_path_came_from_and_every_way_to_give_one() {
        for (origin, from) in [
            (FileOrigin::Target, "the target's `kubeconfig`"),
            (FileOrigin::Flag, "--kubeconfig or $ROLLGUARD_KUBECONFIG"),
            (FileOrigin::EnvVar, "($KUBECONFIG)"),
            (
                FileOrigin::Home,
                "neither --kubeconfig nor $KUBECONFIG is set",
            ),
        ] {
            let text = missing_kubeconfig(Path::new("/home/u/.kube/config"), origin);
            assert!(
                text.starts_with("kubeconfig /home/u/.kube/config does not exist (")
                    && text.contains(from),
                "{origin:?}: {text}"
            );
            for way in [
                "--kubeconfig PATH",
                "$KUBECONFIG",
                "`kubeconfig_env`",
                "`kubeconfig`",
            ] {
                assert!(text.contains(way), "{origin:?} lacks {way}: {text}");
            }
        }
    }

    #[test]
    fn error_reasons() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: "m".into(),
                ..Default::default()
            }))
        };
        assert_eq!(
            describe_error(&status(401), "https://x").reason,
            "Unauthorized"
        );
        assert_eq!(
            describe_error(&status(403), "https://x").reason,
            "Forbidden"
        );
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error",
        )));
        assert_eq!(
            describe_error(&refused, "https://x").reason,
            "ConnectionRefused"
        );
        let tls = kube::Error::Service(Box::new(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        )));
        assert_eq!(describe_error(&tls, "https://x").reason, "TLS");
    }
}
