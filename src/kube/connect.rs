//! One target (a cluster, named for reports) -> a kube `Client`.
//!
//! The kubeconfig comes from, in order: the target's `kubeconfig_env` (the whole file in an
//! environment variable, raw YAML or base64, as CI secrets hold it), the target's
//! `kubeconfig` path, `--kubeconfig`, `$KUBECONFIG` (a list of files, merged), then
//! `~/.kube/config`. Errors name the target and what to do; errors of the first requests
//! are turned into a short reason (`ConnectionRefused`, `TLS`, `Unauthorized`, ...) by
//! [`describe_error`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::config::TargetConfig;
use crate::kube::retry::{error_chain_text, io_error_kind, is_tls_problem, root_cause_text};
use crate::report::Failure;

/// A connected target.
#[derive(Clone)]
pub struct ClusterAccess {
    pub client: kube::Client,
    /// The namespace of the kubeconfig context (or "default").
    pub context_namespace: String,
    /// The API server URL, for messages.
    pub server: String,
    /// Only this target's cluster, user and context: what its script stages get.
    pub script_kubeconfig: Kubeconfig,
}

/// Why a target could not be reached, as it goes into the report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct TargetError {
    /// A short machine-friendly reason: Kubeconfig, ContextNotFound, ConnectionRefused, DNS,
    /// TLS, Unauthorized, Forbidden, Timeout, Unreachable, ApiError.
    pub reason: String,
    pub message: String,
}

impl TargetError {
    fn new(reason: &str, message: impl Into<String>) -> Self {
        TargetError {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// How long a TCP + TLS connect may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Decodes the content of a `kubeconfig_env` variable: raw YAML/JSON, or base64 of it.
pub fn decode_kubeconfig_env(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("is empty".into());
    }
    // Raw YAML always has a ':' (keys); base64 never does.
    if trimmed.contains(':') {
        return Ok(text.to_string());
    }
    let compact: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| format!("is neither YAML nor base64 ({e})"))?;
    String::from_utf8(bytes).map_err(|_| "holds base64 that does not decode to text".to_string())
}

/// The kubeconfig files to read when neither the target nor env names one.
fn default_kubeconfig_files(
    cli_kubeconfig: Option<&Path>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Vec<PathBuf> {
    if let Some(path) = cli_kubeconfig {
        return vec![path.to_path_buf()];
    }
    if let Some(list) = env("KUBECONFIG").filter(|v| !v.trim().is_empty()) {
        return std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    let home = env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    vec![home.join(".kube").join("config")]
}

fn read_kubeconfig(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(Kubeconfig, KubeconfigSource), TargetError> {
    if let Some(var) = &target.kubeconfig_env {
        let raw = env(var).ok_or_else(|| {
            TargetError::new(
                "Kubeconfig",
                format!("environment variable {var} (kubeconfig_env) is not set: export the kubeconfig into it"),
            )
        })?;
        let text = decode_kubeconfig_env(&raw).map_err(|why| {
            TargetError::new("Kubeconfig", format!("environment variable {var} {why}"))
        })?;
        let config = Kubeconfig::from_yaml(&text).map_err(|e| {
            TargetError::new(
                "Kubeconfig",
                format!("environment variable {var} does not hold a valid kubeconfig: {e}"),
            )
        })?;
        return Ok((config, KubeconfigSource::Env(var.clone())));
    }
    let files = match &target.kubeconfig {
        Some(path) if path.is_relative() => vec![base_dir.join(path)],
        Some(path) => vec![path.clone()],
        None => default_kubeconfig_files(cli_kubeconfig, env),
    };
    let mut merged: Option<Kubeconfig> = None;
    for file in &files {
        let one = Kubeconfig::read_from(file).map_err(|e| {
            TargetError::new(
                "Kubeconfig",
                format!(
                    "cannot read kubeconfig {}: {}",
                    file.display(),
                    root_cause_text(&e)
                ),
            )
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
    let config =
        merged.ok_or_else(|| TargetError::new("Kubeconfig", "no kubeconfig file given"))?;
    Ok((config, KubeconfigSource::Files(files)))
}

/// Where a target points, read from its kubeconfig without touching the network: the
/// context's cluster server and namespace. For validation (two targets on one cluster and
/// namespace); a kubeconfig that cannot be read here is reported when the target connects.
pub fn locate_offline(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(String, Option<String>), TargetError> {
    let (kubeconfig, source) = read_kubeconfig(target, cli_kubeconfig, base_dir, env)?;
    let context_name = target
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or_else(|| {
            TargetError::new(
                "ContextNotFound",
                format!(
                    "kubeconfig {} names no current context",
                    describe_source(&source)
                ),
            )
        })?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| {
            TargetError::new(
                "ContextNotFound",
                format!(
                    "context {context_name:?} is not in kubeconfig {}",
                    describe_source(&source)
                ),
            )
        })?;
    let server = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .ok_or_else(|| {
            TargetError::new(
                "Kubeconfig",
                format!(
                    "cluster {:?} of context {context_name:?} has no server in kubeconfig {}",
                    context.cluster,
                    describe_source(&source)
                ),
            )
        })?;
    Ok((server, context.namespace.clone()))
}

/// Builds a client for a target. No request is sent yet: the first request (discovery) shows
/// whether the cluster answers, and its error goes through [`describe_error`].
pub async fn connect(
    target: &TargetConfig,
    cli_kubeconfig: Option<&Path>,
    base_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<ClusterAccess, TargetError> {
    let (kubeconfig, source) = read_kubeconfig(target, cli_kubeconfig, base_dir, env)?;
    if let Some(context) = &target.context
        && !kubeconfig.contexts.iter().any(|c| &c.name == context)
    {
        let available: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return Err(TargetError::new(
            "ContextNotFound",
            format!(
                "context {context:?} is not in kubeconfig {} (it has: {})",
                describe_source(&source),
                if available.is_empty() {
                    "no contexts".to_string()
                } else {
                    available.join(", ")
                }
            ),
        ));
    }
    let script_kubeconfig =
        crate::stages::kubeconfig::single_context(&kubeconfig, target.context.as_deref(), None)
            .map_err(|why| {
                TargetError::new(
                    "Kubeconfig",
                    format!("kubeconfig {}: {why}", describe_source(&source)),
                )
            })?;
    let options = KubeConfigOptions {
        context: target.context.clone(),
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
    // Our own retry (retry.rs) is bounded by the target's deadline; kube's is not.
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    // Watches stay open for minutes: no read timeout; each request is bounded in retry.rs.
    config.read_timeout = None;
    let server = config.cluster_url.to_string();
    let context_namespace = config.default_namespace.clone();
    let client = build_client(config).map_err(|e| {
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
        context_namespace,
        server,
        script_kubeconfig,
    })
}

/// A client without any retry layer: every call goes through rollguard's one retry policy
/// (`retry.rs`), which knows the target's deadline. A layer here would retry under it, so
/// one 503 would cost attempts times retries, and its waits would ignore the deadline.
fn build_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(config)
}

/// Turns an API or transport error into the report's reason and a message saying what to do.
pub fn describe_error(err: &kube::Error, server: &str) -> TargetError {
    if let Some(wait) = crate::kube::retry::rate_limited(err) {
        return TargetError::new(
            "RateLimited",
            format!(
                "{server}: {}",
                crate::kube::retry::rate_limited_message(wait)
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
        assert_eq!(default_kubeconfig_files(Some(&p), &none), vec![p.clone()]);
        let env = |k: &str| match k {
            "KUBECONFIG" => Some("/a:/b".to_string()),
            _ => None,
        };
        assert_eq!(
            default_kubeconfig_files(None, &env),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        let home = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        assert_eq!(
            default_kubeconfig_files(None, &home),
            vec![PathBuf::from("/home/u/.kube/config")]
        );
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
