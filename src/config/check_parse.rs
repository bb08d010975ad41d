//! The walk of `checks:` (top level and per wave) and of a target's `vars:` over the YAML
//! tree, every problem a file:line issue; the model is `checks.rs`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::checks::*;
use super::model::TargetConfig;
use super::parse::Ctx;
use crate::util::yaml::{Node, Tree};

// The `checks:` walk.
impl Ctx {
    /// A `checks:` list (`section`: "checks" or "wave 0 checks"); `taken` holds names of
    /// checks that also apply to these targets (the top-level ones, for a wave's).
    pub(super) fn checks(
        &mut self,
        node: Option<&Node>,
        section: &str,
        taken: &[CheckConfig],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<CheckConfig> {
        let items = self.optional_list(
            node,
            &format!(
                "{section} must be a list of checks (`- name: error-rate` with `prometheus:` or `http:`)"
            ),
        );
        let mut checks: Vec<CheckConfig> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("{section}[{index}]");
            if self.mapping(item, &what, CHECK_KEYS).is_none() {
                if matches!(item.value, Tree::Null) {
                    self.at(item.line, format!("{what} is empty"));
                }
                continue;
            }
            let Some(check) = self.check(item, &what, env) else {
                continue;
            };
            if let Some(first) = taken.iter().chain(&checks).find(|c| c.name == check.name) {
                self.at(
                    item.get("name").map_or(item.line, |n| n.line),
                    format!(
                        "duplicate check name {:?} (first at line {}); a target's checks need distinct names",
                        check.name, first.line
                    ),
                );
                continue;
            }
            checks.push(check);
        }
        checks
    }

    fn check(
        &mut self,
        item: &Node,
        what: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<CheckConfig> {
        let name = match self.text(item.get("name"), "check name") {
            Some((name, line)) => {
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                {
                    self.at(
                        line,
                        format!(
                            "check name {name:?} must be letters, digits, '-', '_' and '.' (it names the check in reports)"
                        ),
                    );
                    return None;
                }
                name
            }
            None => {
                self.at(
                    item.line,
                    format!("{what} needs a `name` (used in reports)"),
                );
                return None;
            }
        };
        let label = format!("check {name:?}");
        let source = match (item.get("prometheus"), item.get("http")) {
            (Some(p), None) => self.prometheus(p, &label, env).map(CheckSource::Prometheus),
            (None, Some(h)) => self.http_probe(h, &label).map(CheckSource::Http),
            (Some(_), Some(h)) => {
                self.at(
                    h.line,
                    format!("{label}: set `prometheus` or `http`, not both (one source per check)"),
                );
                None
            }
            (None, None) => {
                self.at(
                    item.line,
                    format!("{label} needs `prometheus: {{url, query}}` or `http: {{url}}`"),
                );
                None
            }
        };
        let fail_if: Option<FailIf> = self.parsed(item.get("fail_if"), &format!("{label} fail_if"));
        match (&source, item.get("fail_if")) {
            (Some(CheckSource::Prometheus(_)), None) => self.at(
                item.line,
                format!("{label} needs `fail_if` (e.g. `fail_if: \"> 0.01\"`): the condition on the query's value that fails it"),
            ),
            (Some(CheckSource::Http(_)), Some(n)) => self.at(
                n.line,
                format!("{label}: `fail_if` is for Prometheus checks; an HTTP check fails on `expect_status` / `expect_body`"),
            ),
            _ => {}
        }
        let interval = self
            .positive_duration(item.get("interval"), &format!("{label} interval"))
            .unwrap_or(DEFAULT_CHECK_INTERVAL);
        let failures_allowed = self
            .integer(
                item.get("failures_allowed"),
                &format!("{label} failures_allowed"),
                0,
            )
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        let no_data = self
            .parsed(item.get("no_data"), &format!("{label} no_data"))
            .unwrap_or_default();
        let on_error = self
            .parsed(item.get("on_error"), &format!("{label} on_error"))
            .unwrap_or_default();
        Some(CheckConfig {
            name,
            source: source?,
            fail_if,
            interval,
            failures_allowed,
            no_data,
            on_error,
            line: item.line,
        })
    }

    /// The value of the environment variable named at `key` of `node`, which must be set.
    fn env_value(
        &mut self,
        node: &Node,
        key: &str,
        label: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<String> {
        let (var, line) = self.text(node.get(key), &format!("{label} {key}"))?;
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.at(
                line,
                format!("{label}: {key} must name an environment variable, not {var:?}"),
            );
            return None;
        }
        match env(&var) {
            Some(value) if !value.trim().is_empty() => Some(value.trim().to_string()),
            _ => {
                self.env_at(
                    line,
                    format!("{label}: {key}: ${var} is not set (or empty); set it in the job's environment"),
                );
                None
            }
        }
    }

    fn prometheus(
        &mut self,
        node: &Node,
        label: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<PrometheusSource> {
        let section = format!("{label} prometheus");
        self.mapping(node, &section, PROMETHEUS_KEYS)?;
        let url = match (node.get("url"), node.get("url_env")) {
            (Some(_), Some(n)) => {
                self.at(
                    n.line,
                    format!("{section}: set `url` or `url_env`, not both"),
                );
                None
            }
            (Some(_), None) => self.url(node, &section),
            (None, Some(_)) => self.env_value(node, "url_env", &section, env),
            (None, None) => {
                self.at(
                    node.line,
                    format!("{section} needs `url` (the server, e.g. https://prometheus.example.com) or `url_env`"),
                );
                None
            }
        };
        if let Some(url) = &url {
            self.templates(url, node.line, &section);
        }
        let token = node
            .get("token_env")
            .map(|_| self.env_value(node, "token_env", &section, env));
        let user = node
            .get("user_env")
            .map(|_| self.env_value(node, "user_env", &section, env));
        let password = node
            .get("password_env")
            .map(|_| self.env_value(node, "password_env", &section, env));
        let auth = match (token, user, password) {
            (None, None, None) => Auth::None,
            (Some(t), None, None) => Auth::Bearer(Credential::new(t?)),
            (None, Some(u), Some(p)) => Auth::Basic {
                user: Credential::new(u?),
                password: Credential::new(p?),
            },
            _ => {
                self.at(
                    node.line,
                    format!("{section}: set `token_env` (a bearer token), or both `user_env` and `password_env` (basic auth), not a mix"),
                );
                return None;
            }
        };
        let query = match self.text(node.get("query"), &format!("{section} query")) {
            Some((q, line)) if !q.trim().is_empty() => {
                self.templates(&q, line, &section);
                q
            }
            Some((_, line)) => {
                self.at(line, format!("{section} query must not be empty"));
                return None;
            }
            None => {
                self.at(
                    node.line,
                    format!("{section} needs `query` (PromQL whose result is one number)"),
                );
                return None;
            }
        };
        Some(PrometheusSource {
            url: url?,
            auth,
            query,
        })
    }

    /// `url`: http(s), as written.
    fn url(&mut self, node: &Node, section: &str) -> Option<String> {
        let (url, line) = self.text(node.get("url"), &format!("{section} url"))?;
        let lower = url.trim().to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            self.at(
                line,
                format!("{section} url {url:?} must start with http:// or https://"),
            );
            return None;
        }
        Some(url.trim().to_string())
    }

    /// Records template syntax problems of `text` (names are checked against the targets
    /// once they are known: [`check_templates`]).
    fn templates(&mut self, text: &str, line: usize, section: &str) {
        if let Err(e) = template_names(text) {
            self.at(line, format!("{section}: {e}"));
        }
    }

    fn http_probe(&mut self, node: &Node, label: &str) -> Option<HttpProbe> {
        let section = format!("{label} http");
        self.mapping(node, &section, HTTP_KEYS)?;
        let Some(url) = self.url(node, &section) else {
            if node.get("url").is_none() {
                self.at(node.line, format!("{section} needs `url`"));
            }
            return None;
        };
        self.templates(&url, node.line, &section);
        let expect_status = match node.get("expect_status") {
            None => vec![200],
            Some(n) => self.statuses(n, &section)?,
        };
        let expect_body =
            match self.text(node.get("expect_body"), &format!("{section} expect_body")) {
                Some((re, line)) => match regex::Regex::new(&re) {
                    Ok(_) => Some(re),
                    Err(e) => {
                        self.at(
                            line,
                            format!("{section} expect_body is not a regular expression: {e}"),
                        );
                        return None;
                    }
                },
                None => None,
            };
        let timeout = self
            .positive_duration(node.get("timeout"), &format!("{section} timeout"))
            .unwrap_or(DEFAULT_HTTP_TIMEOUT);
        Some(HttpProbe {
            url,
            expect_status,
            expect_body,
            timeout,
        })
    }

    /// `expect_status`: one status or a list, each 100 to 599.
    fn statuses(&mut self, node: &Node, section: &str) -> Option<Vec<u16>> {
        let items: Vec<&Node> = match &node.value {
            Tree::Seq(items) if !items.is_empty() => items.iter().collect(),
            Tree::Seq(_) => {
                self.at(
                    node.line,
                    format!("{section} expect_status must list a status"),
                );
                return None;
            }
            _ => vec![node],
        };
        let mut statuses = Vec::new();
        for item in items {
            let status = match &item.value {
                Tree::Int(i) => u16::try_from(*i).ok(),
                Tree::UInt(u) => u16::try_from(*u).ok(),
                Tree::Str(s) => s.trim().parse::<u16>().ok(),
                _ => None,
            };
            match status {
                Some(s) if (100..=599).contains(&s) => statuses.push(s),
                _ => {
                    self.at(
                        item.line,
                        format!("{section} expect_status must be HTTP statuses (100 to 599), e.g. 200 or [200, 204]"),
                    );
                    return None;
                }
            }
        }
        Some(statuses)
    }

    /// Every template of every check names something each target it runs on has.
    pub(super) fn check_templates(&mut self, checks: &[CheckConfig], targets: &[&TargetConfig]) {
        let named: Vec<(&str, &BTreeMap<String, String>)> =
            targets.iter().map(|t| (t.name.as_str(), &t.vars)).collect();
        for check in checks {
            let texts: Vec<&str> = match &check.source {
                CheckSource::Prometheus(p) => vec![p.url.as_str(), p.query.as_str()],
                CheckSource::Http(h) => vec![h.url.as_str()],
            };
            let mut said = Vec::new();
            for name in texts
                .into_iter()
                .filter_map(|t| template_names(t).ok())
                .flatten()
            {
                if let Some(problem) = template_problem(&name, &named)
                    && !said.contains(&name)
                {
                    self.at(check.line, format!("check {:?}: {problem}", check.name));
                    said.push(name);
                }
            }
        }
    }

    /// A target's `vars:`: a mapping of names to text values.
    pub(super) fn vars(&mut self, node: Option<&Node>, label: &str) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        let Some(node) = node else { return vars };
        match &node.value {
            Tree::Map(entries) => {
                for (k, v) in entries {
                    let key = k.key_text();
                    if key.is_empty()
                        || !key
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                    {
                        self.at(
                            k.line,
                            format!(
                                "{label}: vars name {key:?} must be letters, digits, '_' and '-'"
                            ),
                        );
                        continue;
                    }
                    let value = match &v.value {
                        Tree::Bool(b) => Some(b.to_string()),
                        Tree::Float(f) => Some(f.to_string()),
                        _ => self
                            .text(Some(v), &format!("{label} vars.{key}"))
                            .map(|(t, _)| t),
                    };
                    if let Some(value) = value {
                        vars.insert(key, value);
                    }
                }
            }
            Tree::Null => {}
            other => self.at(
                node.line,
                format!(
                    "{label}: vars must be a mapping (`vars: {{region: eu}}`), not {}",
                    other.kind_name()
                ),
            ),
        }
        vars
    }
}

/// The JSON Schema of a `checks:` list.
pub(super) fn checks_schema(duration: &Value) -> Value {
    let unclear = json!({"enum": ["fail", "pass", "inconclusive"], "default": "inconclusive"});
    let env_name = json!({"type": "string", "pattern": "^[A-Za-z0-9_]+$"});
    json!({
        "type": "array",
        "description": "checks run per target from healthy to the end of its bake (once without a bake); one that fails more than failures_allowed times in a row fails the target",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["name"],
            "oneOf": [{"required": ["prometheus"]}, {"required": ["http"]}],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$"},
                "prometheus": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["query"],
                    "properties": {
                        "url": {"type": "string", "description": "the Prometheus server"},
                        "url_env": env_name.clone(),
                        "token_env": env_name.clone(),
                        "user_env": env_name.clone(),
                        "password_env": env_name,
                        "query": {"type": "string", "description": "PromQL with one number as its result; templates {{target}} {{app}} {{namespace}} {{revision}} {{commit}} {{vars.KEY}}"}
                    }
                },
                "http": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string"},
                        "expect_status": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}], "default": 200},
                        "expect_body": {"type": "string", "description": "a regular expression the body must match"},
                        "timeout": {"description": "deadline of one probe (default 5s)", "allOf": [duration]}
                    }
                },
                "fail_if": {"type": "string", "pattern": "^\\s*(>=|<=|==|!=|>|<)\\s*\\S+\\s*$", "description": "e.g. \"> 0.01\""},
                "interval": {"description": "time between results (default 10s)", "allOf": [duration]},
                "failures_allowed": {"type": "integer", "minimum": 0, "default": 0},
                "no_data": unclear.clone(),
                "on_error": unclear
            }
        }
    })
}
