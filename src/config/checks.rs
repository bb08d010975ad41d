//! `checks:` (top level, and inside a `waves:` entry): the model of a check and its pure rules
//! (`fail_if`, template names); the walk over the YAML tree is `check_parse.rs`. The checks
//! run in `crate::checks`; the model lives here because the config layer may not import a
//! higher one, and every problem must be a file:line issue before any write.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::names::{named_choices, nearest};

pub(super) const CHECK_KEYS: &[&str] = &[
    "name",
    "prometheus",
    "http",
    "fail_if",
    "interval",
    "failures_allowed",
    "no_data",
    "on_error",
];
pub(super) const PROMETHEUS_KEYS: &[&str] = &[
    "url",
    "url_env",
    "token_env",
    "user_env",
    "password_env",
    "query",
];
pub(super) const HTTP_KEYS: &[&str] = &["url", "expect_status", "expect_body", "timeout"];

/// The templates a query or URL may hold (`{{vars.KEY}}` besides).
pub const TEMPLATE_NAMES: &[&str] = &["target", "app", "namespace", "revision", "commit"];
/// The default time between two results of a check.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// The default deadline of an HTTP probe.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// One `checks:` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckConfig {
    /// Unique among the checks a target runs.
    pub name: String,
    pub source: CheckSource,
    /// The condition that fails a Prometheus result (None for HTTP probes).
    pub fail_if: Option<FailIf>,
    pub interval: Duration,
    /// Failing results in a row tolerated before the check fails its target.
    pub failures_allowed: u32,
    /// What a query without data counts as.
    pub no_data: Unclear,
    /// What an unreadable source (down, a timeout, an error answer) counts as.
    pub on_error: Unclear,
    /// Line of the entry, for messages.
    pub line: usize,
}

/// Where a check reads its value.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckSource {
    Prometheus(PrometheusSource),
    Http(HttpProbe),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSource {
    /// The server's base URL (from `url`, or the value of `url_env`), templates unrendered.
    pub url: String,
    pub auth: Auth,
    /// PromQL, templates unrendered.
    pub query: String,
}

/// Credentials of a Prometheus, read from the environment when the config is read.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(Credential),
    Basic {
        user: Credential,
        password: Credential,
    },
}

impl Auth {
    /// The secret values, for the scrubber.
    pub fn secrets(&self) -> Vec<&str> {
        match self {
            Auth::None => Vec::new(),
            Auth::Bearer(token) => vec![token.reveal()],
            Auth::Basic { user, password } => vec![user.reveal(), password.reveal()],
        }
    }
}

/// A credential value: never printed by `{:?}`.
#[derive(Clone, PartialEq)]
pub struct Credential(String);

impl Credential {
    pub fn new(value: impl Into<String>) -> Self {
        Credential(value.into())
    }
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(***)")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpProbe {
    /// Templates unrendered.
    pub url: String,
    /// Statuses that pass (default [200]).
    pub expect_status: Vec<u16>,
    /// A regular expression the body must match (checked to compile when read).
    pub expect_body: Option<String>,
    pub timeout: Duration,
}

/// What an unclear result (no data, an error) counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unclear {
    Fail,
    Pass,
    #[default]
    Inconclusive,
}

named_choices!(Unclear {
    Fail => "fail",
    Pass => "pass",
    Inconclusive => "inconclusive",
});

/// A comparison of `fail_if`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
    Equal,
    NotEqual,
}

impl Comparison {
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Equal => "==",
            Comparison::NotEqual => "!=",
        }
    }

    /// Whether `value <op> threshold` holds.
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::Greater => value > threshold,
            Comparison::GreaterOrEqual => value >= threshold,
            Comparison::Less => value < threshold,
            Comparison::LessOrEqual => value <= threshold,
            Comparison::Equal => value == threshold,
            Comparison::NotEqual => value != threshold,
        }
    }
}

/// `fail_if: "> 0.01"`: a result fails when `value <op> threshold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailIf {
    pub op: Comparison,
    pub threshold: f64,
}

impl FailIf {
    /// Whether `value` fails the check.
    pub fn fails(&self, value: f64) -> bool {
        self.op.holds(value, self.threshold)
    }
}

impl fmt::Display for FailIf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.op.symbol(), self.threshold)
    }
}

/// How to write `fail_if`, said with each of its errors.
const FAIL_IF_USAGE: &str = "write an operator (> >= < <= == !=) and a number, e.g. \"> 0.01\"";

/// Why a `fail_if` text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailIfError {
    /// The whole text, which starts with no operator.
    #[error("{0:?} does not start with a comparison; {FAIL_IF_USAGE}")]
    NoComparison(String),
    /// What follows the operator.
    #[error("{0:?} is not a number; {FAIL_IF_USAGE}")]
    NotANumber(String),
}

impl std::str::FromStr for FailIf {
    type Err = FailIfError;
    /// "> 0.01", ">=5", "!= 1e3": an operator, then a finite number.
    fn from_str(s: &str) -> Result<Self, FailIfError> {
        let text = s.trim();
        // Two-character operators first, so ">=" is not read as ">" and "=5".
        let ops = [
            (">=", Comparison::GreaterOrEqual),
            ("<=", Comparison::LessOrEqual),
            ("==", Comparison::Equal),
            ("!=", Comparison::NotEqual),
            (">", Comparison::Greater),
            ("<", Comparison::Less),
        ];
        let Some((op, rest)) = ops
            .iter()
            .find_map(|(sym, op)| text.strip_prefix(sym).map(|rest| (*op, rest)))
        else {
            return Err(FailIfError::NoComparison(s.to_string()));
        };
        match rest.trim().parse::<f64>() {
            Ok(threshold) if threshold.is_finite() => Ok(FailIf { op, threshold }),
            _ => Err(FailIfError::NotANumber(rest.trim().to_string())),
        }
    }
}

/// A `{{` without its `}}` in a templated text (the whole text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an unclosed template `{{{{` in {0:?}; close it with `}}}}`")]
pub struct UnclosedTemplate(pub String);

/// The template names in `text` (`{{ target }}` -> "target"), in order, or what is wrong.
pub fn template_names(text: &str) -> Result<Vec<String>, UnclosedTemplate> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(UnclosedTemplate(text.to_string()));
        };
        names.push(after[..end].trim().to_string());
        rest = &after[end + 2..];
    }
    Ok(names)
}

/// What is wrong with template `name` (None: known): an unknown name, or a `vars.KEY` that
/// a target the check runs on (`targets`: each one's name and `vars:`) does not set.
pub fn template_problem(
    name: &str,
    targets: &[(&str, &BTreeMap<String, String>)],
) -> Option<String> {
    if TEMPLATE_NAMES.contains(&name) {
        return None;
    }
    if let Some(key) = name.strip_prefix("vars.") {
        let missing: Vec<&str> = targets
            .iter()
            .filter(|(_, vars)| !vars.contains_key(key))
            .map(|(name, _)| *name)
            .collect();
        if missing.is_empty() {
            return None;
        }
        return Some(format!(
            "template {{{{{name}}}}}: target {} has no `vars: {{{key}: ...}}`; set it on every target the check runs on",
            missing.join(", ")
        ));
    }
    let mut msg = format!(
        "unknown template {{{{{name}}}}} (known: {}, vars.KEY)",
        TEMPLATE_NAMES.join(", ")
    );
    if let Some(near) = nearest(name, TEMPLATE_NAMES) {
        msg.push_str(&format!("; did you mean {{{{{near}}}}}?"));
    }
    Some(msg)
}
