//! Exec credential plugins (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`, ...)
//! run by rollguard rather than by kube: kube runs them on a blocking thread with no time
//! limit and copies their whole output, credentials included, into its errors. Here a plugin
//! runs through the one child-process runner (`util::runner`): a deadline
//! ([`PLUGIN_TIMEOUT`]), its own process group killed on timeout, on cancel and when its run
//! is dropped; its stdout (the credential) is read in bounded memory and never shown; a failure says the exit code and the last lines of
//! stderr, with anything shaped like a credential masked.

use std::time::Duration;

use base64::Engine as _;
use kube::config::{AuthInfo, ExecConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cluster::error::TargetError;
use crate::util::process_group::find_command;
use crate::util::runner::{self, End};

/// How long a plugin may run; `aws eks get-token` and friends answer in about a second.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The plugin deadline: `ROLLGUARD_EXEC_TIMEOUT` (a duration, e.g. `10s`), else
/// [`PLUGIN_TIMEOUT`]. Checked offline with the targets, so a bad value is bad input.
pub fn plugin_timeout(
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Duration, crate::util::duration::DurationError> {
    match env("ROLLGUARD_EXEC_TIMEOUT") {
        None => Ok(PLUGIN_TIMEOUT),
        Some(text) => crate::util::duration::parse_duration(&text),
    }
}

/// The most a plugin may print on stdout (an ExecCredential is a few KiB).
pub const MAX_PLUGIN_OUTPUT: usize = 1024 * 1024;
/// Lines of stderr kept for the message, and the length of each.
const STDERR_LINES: usize = 5;
const STDERR_LINE_CHARS: usize = 300;

/// What an exec plugin gave.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// A bearer token, fetched again when it expires or is refused
    /// ([`Refresher`](crate::cluster::credentials::Refresher)).
    Token {
        token: String,
        expires_at: Option<jiff::Timestamp>,
    },
    /// A client certificate: the kubeconfig user to connect with (used for the whole run).
    Certificate(Box<AuthInfo>),
}

/// Runs the exec plugin of `user` once and returns its credential, known to the scrubber
/// before it is returned.
pub async fn fetch(
    auth: &AuthInfo,
    user: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Fetched, TargetError> {
    let Some(exec) = &auth.exec else {
        return Err(TargetError::new(
            "Credentials",
            format!("user {user:?} has no exec credential plugin"),
        ));
    };
    let stdout = run_plugin(exec, user, env, timeout, cancel).await?;
    let credential =
        parse_credential(&stdout).map_err(|why| plugin_error(exec, user, &why.to_string()))?;
    let mut resolved: AuthInfo = serde_json::from_value(credential).map_err(|_| {
        plugin_error(
            exec,
            user,
            "printed a credential that is not usable (its output is not shown: it holds credentials)",
        )
    })?;
    crate::cluster::known::learn_credentials(&resolved);
    if let Some(token) = &resolved.token {
        use secrecy::ExposeSecret as _;
        return Ok(Fetched::Token {
            token: token.expose_secret().trim().to_string(),
            expires_at: parse_expiration(&stdout),
        });
    }
    resolved.impersonate = auth.impersonate.clone();
    resolved.impersonate_uid = auth.impersonate_uid.clone();
    resolved.impersonate_groups = auth.impersonate_groups.clone();
    Ok(Fetched::Certificate(Box::new(resolved)))
}

/// The `status.expirationTimestamp` of the ExecCredential a plugin printed (RFC 3339), if
/// it gave one that parses. Pure.
pub fn parse_expiration(stdout: &[u8]) -> Option<jiff::Timestamp> {
    let parsed: Value = serde_json::from_slice(stdout)
        .ok()
        .or_else(|| serde_saphyr::from_slice(stdout).ok())?;
    parsed
        .pointer("/status/expirationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok())
}

fn command_name(exec: &ExecConfig) -> &str {
    exec.command.as_deref().unwrap_or_default()
}

fn plugin_error(exec: &ExecConfig, user: &str, why: &str) -> TargetError {
    TargetError {
        reason: "Credentials".into(),
        message: format!(
            "exec credential plugin {:?} of user {user:?} {why}",
            command_name(exec)
        ),
    }
}

/// What is wrong with a plugin's output (said after the plugin's name). Never quotes the
/// output: it holds credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "printed no ExecCredential JSON ({bytes} bytes; its output is not shown: it holds credentials): run it by hand to see what it says"
    )]
    NotExecCredential { bytes: usize },
    #[error(
        "returned no credentials (no status.token, nor status.clientCertificateData with clientKeyData): check that it is logged in and configured for this cluster"
    )]
    NoCredentials,
}

/// The kubeconfig user fields for the `status` of an ExecCredential the plugin printed.
/// Pure, so that every shape is tested by table; the texts never quote the output.
pub fn parse_credential(stdout: &[u8]) -> Result<Value, CredentialError> {
    let parsed: Value = serde_json::from_slice(stdout)
        .ok()
        .or_else(|| serde_saphyr::from_slice(stdout).ok())
        .ok_or(CredentialError::NotExecCredential {
            bytes: stdout.len(),
        })?;
    let status = parsed.get("status").cloned().unwrap_or(Value::Null);
    let text = |key: &str| {
        status
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let Some(token) = text("token") {
        return Ok(json!({ "token": token }));
    }
    if let (Some(cert), Some(key)) = (text("clientCertificateData"), text("clientKeyData")) {
        // The kubeconfig fields hold base64 of the PEM the plugin gives.
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        return Ok(json!({
            "client-certificate-data": b64(cert),
            "client-key-data": b64(key),
        }));
    }
    Err(CredentialError::NoCredentials)
}

/// Masks words shaped like credentials (long runs of token characters) in a line of a
/// plugin's stderr, and bounds its length.
pub fn mask_credentials(line: &str) -> String {
    let is_token_char = |c: char| c.is_ascii_alphanumeric() || "-_.+/=".contains(c);
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.len() >= 20 && word.chars().any(|c| c.is_ascii_digit()) {
            out.push_str("[masked]");
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in line.chars() {
        if is_token_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    if out.chars().count() > STDERR_LINE_CHARS {
        out = out.chars().take(STDERR_LINE_CHARS).collect::<String>() + "...";
    }
    out
}

async fn run_plugin(
    exec: &ExecConfig,
    user: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, TargetError> {
    let command = command_name(exec);
    let program = find_command(command, env).ok_or_else(|| {
        plugin_error(
            exec,
            user,
            "is not found on PATH: install it or fix the command",
        )
    })?;
    let mut vars: Vec<(String, String)> = Vec::new();
    for pair in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (pair.get("name"), pair.get("value")) {
            vars.push((name.clone(), value.clone()));
        }
    }
    let mut spec = json!({ "interactive": false });
    if exec.provide_cluster_info
        && let Some(cluster) = &exec.cluster
    {
        spec["cluster"] = serde_json::to_value(cluster).unwrap_or(Value::Null);
    }
    let info = json!({
        "apiVersion": exec.api_version.as_deref().unwrap_or("client.authentication.k8s.io/v1"),
        "kind": "ExecCredential",
        "spec": spec,
    });
    vars.push(("KUBERNETES_EXEC_INFO".into(), info.to_string()));
    let mut run_spec = runner::Spec::new(program, timeout).args(exec.args.iter().flatten());
    run_spec.env = runner::Env::Inherit(vars);
    // The credential is read whole, in bounded memory, and never shown.
    run_spec.stdout = runner::Capture::Bytes(MAX_PLUGIN_OUTPUT);
    run_spec.tail_lines = STDERR_LINES;
    let out = runner::run(&run_spec, cancel, &mask_credentials, &|_, _| {}).await;
    let lines: Vec<&String> = out.tail.iter().filter(|l| !l.trim().is_empty()).collect();
    let tail = if lines.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = lines.iter().map(|l| l.as_str()).collect();
        format!("; its stderr ends: {}", lines.join(" | "))
    };
    if out.overflowed {
        return Err(plugin_error(
            exec,
            user,
            &format!(
                "printed more than {} KiB (an ExecCredential is a few KiB)",
                MAX_PLUGIN_OUTPUT / 1024
            ),
        ));
    }
    match out.end {
        End::Exited(0) => Ok(out.stdout),
        End::TimedOut => Err(plugin_error(
            exec,
            user,
            &format!(
                "did not finish within {}; it was stopped",
                crate::util::duration::format_duration(timeout)
            ),
        )),
        End::Stopped => Err(plugin_error(
            exec,
            user,
            "was stopped: the run was cancelled",
        )),
        End::NotStarted(why) => Err(plugin_error(
            exec,
            user,
            &format!("could not be started: {why}"),
        )),
        End::Exited(code) => Err(plugin_error(
            exec,
            user,
            &format!("exited with code {code}{tail}"),
        )),
        End::Signalled(_) => Err(plugin_error(
            exec,
            user,
            &format!("was killed by a signal{tail}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_from_the_plugin_output() {
        let token = parse_credential(br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"abc"}}"#);
        assert_eq!(token, Ok(json!({"token": "abc"})));
        let yaml = parse_credential(b"kind: ExecCredential\nstatus:\n  token: t1\n");
        assert_eq!(yaml, Ok(json!({"token": "t1"})));
        let cert =
            parse_credential(br#"{"status":{"clientCertificateData":"C","clientKeyData":"K"}}"#)
                .expect("cert");
        assert_eq!(cert["client-certificate-data"], "Qw==");
        for (output, want) in [
            (&br#"{"status":{}}"#[..], "returned no credentials"),
            (br#"{"status":{"token":""}}"#, "returned no credentials"),
            (br#"{"kind":"ExecCredential"}"#, "returned no credentials"),
            (
                br#"{"status":{"clientCertificateData":"C"}}"#,
                "returned no credentials",
            ),
            (
                br#"{"status":{"token":"secret-tok"#,
                "printed no ExecCredential JSON",
            ),
        ] {
            let err = parse_credential(output).expect_err("refused").to_string();
            assert!(err.contains(want), "{err}");
            assert!(
                !err.contains("secret-tok"),
                "the output is never quoted: {err}"
            );
        }
    }

    #[test]
    fn expiration_from_the_plugin_output() {
        let cases: [(&[u8], Option<&str>); 4] = [
            (
                br#"{"status":{"token":"t","expirationTimestamp":"2026-01-02T03:04:05Z"}}"#,
                Some("2026-01-02T03:04:05Z"),
            ),
            (
                b"status:\n  token: t\n  expirationTimestamp: 2026-01-02T03:04:05Z\n",
                Some("2026-01-02T03:04:05Z"),
            ),
            (br#"{"status":{"token":"t"}}"#, None),
            (
                br#"{"status":{"token":"t","expirationTimestamp":"soon"}}"#,
                None,
            ),
        ];
        for (output, want) in cases {
            let want = want.map(|w| w.parse::<jiff::Timestamp>().unwrap());
            assert_eq!(
                parse_expiration(output),
                want,
                "{}",
                String::from_utf8_lossy(output)
            );
        }
    }

    #[test]
    fn stderr_lines_are_masked_and_bounded() {
        let cases = [
            ("error: access denied", "error: access denied"),
            (
                "bad token eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.payload",
                "bad token [masked]",
            ),
            (
                "see https://example.com/docs",
                "see https://example.com/docs",
            ),
            (
                "k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8_QWN0aW9u",
                "[masked]",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(mask_credentials(line), want, "{line}");
        }
        assert!(mask_credentials(&"a ".repeat(1000)).chars().count() <= STDERR_LINE_CHARS + 3);
    }
}
