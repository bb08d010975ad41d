//! Label selectors (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`) and
//! field selectors (`metadata.name=x`, `metadata.namespace!=y`, a few pod fields).

use serde_json::{Map, Value};

/// Why a selector was refused, in the API server's words (a 400's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: found '{0}', expected: '('")]
    NoSet(String),
    #[error("unable to parse requirement: invalid label value in {0:?}")]
    SetValue(String),
    #[error("unable to parse requirement: empty requirement in {0:?}")]
    Empty(String),
    #[error(
        "unable to parse requirement: invalid label key {0:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"
    )]
    Key(String),
    #[error("unable to parse requirement: invalid label value: {0:?}")]
    Value(String),
    #[error("invalid selector: '{selector}'; can't understand '{part}'")]
    Field { selector: String, part: String },
    #[error("field label not supported: {0}")]
    FieldLabel(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits at commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str, requirement: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::NoSet(rest.to_string()))?;
    let values: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.iter().any(|v| !valid_value(v)) {
        return Err(SelectorError::SetValue(requirement.to_string()));
    }
    Ok(values)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err(SelectorError::Empty(s.to_string()));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelRequirement::NotEquals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelRequirement::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelRequirement::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelRequirement::NotIn(k.trim().to_string(), parse_set(rest, part)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelRequirement::In(k.trim().to_string(), parse_set(rest, part)?)
            } else {
                LabelRequirement::Exists(part.to_string())
            };
            let (key, value) = match &req {
                LabelRequirement::Equals(k, v) | LabelRequirement::NotEquals(k, v) => (k, Some(v)),
                LabelRequirement::In(k, _)
                | LabelRequirement::NotIn(k, _)
                | LabelRequirement::Exists(k)
                | LabelRequirement::NotExists(k) => (k, None),
            };
            if !valid_key(key) {
                return Err(SelectorError::Key(key.clone()));
            }
            if let Some(v) = value
                && !valid_value(v)
            {
                return Err(SelectorError::Value(v.clone()));
            }
            requirements.push(req);
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// (JSON pointer, value, equal?)
    requirements: Vec<(String, String, bool)>,
}

/// The JSON pointer of a field a selector may use on a resource (of `group`), in the object
/// as that group serves it. Events differ by API: core v1 selects on `involvedObject.*`,
/// events.k8s.io/v1 on `regarding.*` (and refuses `involvedObject.*`), as recorded.
fn field_pointer(group: &str, resource: &str, field: &str) -> Option<&'static str> {
    match field {
        "metadata.name" => Some("/metadata/name"),
        "metadata.namespace" => Some("/metadata/namespace"),
        _ => match (group, resource, field) {
            ("", "pods", "status.phase") => Some("/status/phase"),
            ("", "pods", "spec.nodeName") => Some("/spec/nodeName"),
            ("", "pods", "spec.restartPolicy") => Some("/spec/restartPolicy"),
            ("", "pods", "spec.schedulerName") => Some("/spec/schedulerName"),
            ("", "pods", "spec.serviceAccountName") => Some("/spec/serviceAccountName"),
            ("", "pods", "status.podIP") => Some("/status/podIP"),
            ("", "events", "involvedObject.name") => Some("/involvedObject/name"),
            ("", "events", "involvedObject.kind") => Some("/involvedObject/kind"),
            ("", "events", "involvedObject.uid") => Some("/involvedObject/uid"),
            ("", "events", "involvedObject.namespace") => Some("/involvedObject/namespace"),
            ("", "events", "involvedObject.apiVersion") => Some("/involvedObject/apiVersion"),
            ("", "events", "involvedObject.resourceVersion") => {
                Some("/involvedObject/resourceVersion")
            }
            ("", "events", "involvedObject.fieldPath") => Some("/involvedObject/fieldPath"),
            ("", "events", "reason") => Some("/reason"),
            ("", "events", "reportingComponent") => Some("/reportingComponent"),
            ("", "events", "source") => Some("/source/component"),
            ("", "events", "type") => Some("/type"),
            ("events.k8s.io", "events", "regarding.name") => Some("/regarding/name"),
            ("events.k8s.io", "events", "regarding.kind") => Some("/regarding/kind"),
            ("events.k8s.io", "events", "regarding.uid") => Some("/regarding/uid"),
            ("events.k8s.io", "events", "regarding.namespace") => Some("/regarding/namespace"),
            ("events.k8s.io", "events", "regarding.apiVersion") => Some("/regarding/apiVersion"),
            ("events.k8s.io", "events", "regarding.resourceVersion") => {
                Some("/regarding/resourceVersion")
            }
            ("events.k8s.io", "events", "regarding.fieldPath") => Some("/regarding/fieldPath"),
            ("events.k8s.io", "events", "reason") => Some("/reason"),
            ("events.k8s.io", "events", "reportingController") => Some("/reportingController"),
            ("events.k8s.io", "events", "type") => Some("/type"),
            ("", "secrets", "type") => Some("/type"),
            _ => None,
        },
    }
}

impl FieldSelector {
    pub fn parse(group: &str, resource: &str, s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        for part in s.split(',') {
            let part = part.trim();
            let (field, value, equal) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(SelectorError::Field {
                    selector: s.to_string(),
                    part: part.to_string(),
                });
            };
            let field = field.trim();
            let pointer = field_pointer(group, resource, field)
                .ok_or_else(|| SelectorError::FieldLabel(field.to_string()))?;
            requirements.push((pointer.to_string(), value.trim().to_string(), equal));
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|(pointer, value, equal)| {
            let actual = obj.pointer(pointer).and_then(Value::as_str).unwrap_or("");
            (actual == value) == *equal
        })
    }
}

/// Does a label selector (`matchLabels` and `matchExpressions`) select these labels?
/// An empty or missing selector selects nothing, as for workload selectors.
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let match_labels = selector["matchLabels"].as_object();
    let expressions = selector["matchExpressions"].as_array();
    if match_labels.is_none_or(Map::is_empty) && expressions.is_none_or(Vec::is_empty) {
        return false;
    }
    let label = |key: &str| labels[key].as_str();
    let labels_ok = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions_ok = expressions.into_iter().flatten().all(|expr| {
        let key = expr["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expr["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match expr["operator"].as_str().unwrap_or_default() {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "web", "namespace": "prod",
            "labels": {"app": "web", "tier": "frontend"}}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_table() {
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("app notin (web, db)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing notin (x)", true),
            ("app=web,tier in (frontend,backend)", true),
            ("app=web,tier=backend", false),
        ];
        for (selector, expected) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&obj()), expected, "{selector}");
        }
    }

    #[test]
    fn bad_selectors_are_told_in_the_servers_words() {
        let labels = [
            (
                "app=web,",
                "unable to parse requirement: empty requirement in \"app=web,\"",
            ),
            (
                "a b c=d",
                "unable to parse requirement: invalid label key \"a b c\": name part must consist of alphanumeric characters, '-', '_' or '.'",
            ),
            (
                "app in web",
                "unable to parse requirement: found 'web', expected: '('",
            ),
            (
                "=x",
                "unable to parse requirement: invalid label key \"\": name part must consist of alphanumeric characters, '-', '_' or '.'",
            ),
            (
                "app in (bad value)",
                "unable to parse requirement: invalid label value in \"app in (bad value)\"",
            ),
            (
                "app=a b",
                "unable to parse requirement: invalid label value: \"a b\"",
            ),
        ];
        for (bad, want) in labels {
            let refused = LabelSelector::parse(bad).expect_err(bad);
            assert_eq!(refused.to_string(), want, "{bad}");
        }
        let refused = FieldSelector::parse("", "pods", "metadata.name").expect_err("no operator");
        assert_eq!(
            refused.to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
    }

    #[test]
    fn field_selector_table() {
        let cases = [
            ("metadata.name=web", true),
            ("metadata.name==web", true),
            ("metadata.name!=web", false),
            ("metadata.namespace=prod,metadata.name=web", true),
            ("metadata.namespace=dev", false),
            ("status.phase=Running", true),
        ];
        for (selector, expected) in cases {
            let parsed = FieldSelector::parse("", "pods", selector).unwrap();
            assert_eq!(parsed.matches(&obj()), expected, "{selector}");
        }
        assert!(FieldSelector::parse("apps", "deployments", "spec.replicas=1").is_err());
        assert!(FieldSelector::parse("", "pods", "nonsense").is_err());
    }

    #[test]
    fn label_selector_objects_table() {
        let labels = json!({"app": "web", "tier": "fe"});
        let cases = [
            (json!({"matchLabels": {"app": "web"}}), true),
            (json!({"matchLabels": {"app": "db"}}), false),
            (json!({}), false),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["fe"]}]}),
                false,
            ),
            (
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
                true,
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(selector_matches(&selector, &labels), want, "{selector}");
        }
    }

    #[test]
    fn event_field_labels_differ_by_api() {
        let core = json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "source": {"component": "deployment-controller"}});
        let view = json!({"regarding": {"kind": "Deployment", "name": "web"}, "reportingController": "deployment-controller"});
        let sel = FieldSelector::parse(
            "",
            "events",
            "involvedObject.name=web,involvedObject.kind=Deployment,source=deployment-controller",
        )
        .unwrap();
        assert!(sel.matches(&core));
        let sel = FieldSelector::parse(
            "events.k8s.io",
            "events",
            "regarding.name=web,reportingController=deployment-controller",
        )
        .unwrap();
        assert!(sel.matches(&view));
        assert_eq!(
            FieldSelector::parse("events.k8s.io", "events", "involvedObject.name=web")
                .unwrap_err()
                .to_string(),
            "field label not supported: involvedObject.name"
        );
        assert!(FieldSelector::parse("", "events", "regarding.name=web").is_err());
    }
}
