//! Secret values never leave the process: before a manifest is shown (`rollguard show`,
//! diffs, reports), the values of a Secret's `data` and `stringData` become
//! `"<redacted N bytes>"`, keeping the keys so that the shape stays reviewable.

use base64::Engine;
use serde_json::Value;

/// Annotation in which `kubectl apply` keeps a full copy of the object (values included).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The placeholder for a value of `len` bytes.
pub fn placeholder(len: usize) -> String {
    format!("<redacted {len} bytes>")
}

/// Whether an object body is a core Secret.
pub fn is_secret(body: &Value) -> bool {
    body.get("kind").and_then(Value::as_str) == Some("Secret")
        && body.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// A copy of the object with Secret values redacted; other objects are returned unchanged.
/// Nested `kind: List` items are handled too.
pub fn redact_object(body: &Value) -> Value {
    let mut out = body.clone();
    redact_in_place(&mut out);
    out
}

/// Redact every object of a list.
pub fn redact_objects(bodies: &[Value]) -> Vec<Value> {
    bodies.iter().map(redact_object).collect()
}

/// Redact in place (see [`redact_object`]).
pub fn redact_in_place(body: &mut Value) {
    if body.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
            items.iter_mut().for_each(redact_in_place);
        }
        return;
    }
    if !is_secret(body) {
        return;
    }
    if let Some(data) = body.get_mut("data").and_then(Value::as_object_mut) {
        for value in data.values_mut() {
            // data values are base64: count the decoded bytes, as `kubectl describe` does.
            let len = match value.as_str() {
                Some(text) => base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map(|bytes| bytes.len())
                    .unwrap_or(text.len()),
                None => value.to_string().len(),
            };
            *value = Value::String(placeholder(len));
        }
    }
    if let Some(data) = body.get_mut("stringData").and_then(Value::as_object_mut) {
        for value in data.values_mut() {
            let len = match value.as_str() {
                Some(text) => text.len(),
                None => value.to_string().len(),
            };
            *value = Value::String(placeholder(len));
        }
    }
    if let Some(annotations) = body
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        && let Some(value) = annotations.get_mut(LAST_APPLIED)
    {
        let len = value.as_str().map(str::len).unwrap_or(0);
        *value = Value::String(placeholder(len));
    }
}

/// Shortest secret value the scrubber looks for: shorter ones ("1", "no") would blank out
/// ordinary words everywhere and say little about the secret.
const MIN_SCRUBBED_LEN: usize = 3;

/// What replaces a known secret value in free text.
pub const SCRUBBED: &str = "<redacted>";

/// Replaces the known secret values (those of the manifests' Secrets) in free text, such as
/// a script's output, which no structural redaction can reach.
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    /// Longest first, so that a value containing another is replaced whole.
    values: Vec<String>,
}

impl Scrubber {
    /// The values of every Secret among `bodies`: `stringData`, and `data` both as stored
    /// (base64) and decoded; a multi-line value also line by line, since output is.
    pub fn from_objects<'a>(bodies: impl IntoIterator<Item = &'a Value>) -> Scrubber {
        let mut values = Vec::new();
        let mut add = |text: &str| {
            for candidate in std::iter::once(text).chain(text.lines()) {
                let candidate = candidate.trim();
                if candidate.len() >= MIN_SCRUBBED_LEN {
                    values.push(candidate.to_string());
                }
            }
        };
        for body in bodies {
            if !is_secret(body) {
                continue;
            }
            for (key, base64) in [("data", true), ("stringData", false)] {
                let Some(map) = body.get(key).and_then(Value::as_object) else {
                    continue;
                };
                for value in map.values().filter_map(Value::as_str) {
                    add(value);
                    if base64
                        && let Ok(bytes) =
                            base64::engine::general_purpose::STANDARD.decode(value.trim())
                    {
                        add(&String::from_utf8_lossy(&bytes));
                    }
                }
            }
        }
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Scrubber { values }
    }

    /// `text` with every known secret value replaced by [`SCRUBBED`].
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), SCRUBBED);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redact_table() {
        let cases = vec![
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                       "data": {"password": "aHVudGVyMg=="}, "stringData": {"user": "admin"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                       "data": {"password": "<redacted 7 bytes>"},
                       "stringData": {"user": "<redacted 5 bytes>"}}),
            ),
            // Not base64: count the text.
            (
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "!!"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "<redacted 2 bytes>"}}),
            ),
            // ConfigMaps are shown as they are.
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
            ),
            // A CRD called Secret in another group is not a core Secret.
            (
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}}),
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}}),
            ),
            // Lists are walked.
            (
                json!({"apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": "v1", "kind": "Secret", "stringData": {"t": "abc"}}]}),
                json!({"apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": "v1", "kind": "Secret", "stringData": {"t": "<redacted 3 bytes>"}}]}),
            ),
            // kubectl's last-applied copy holds the values too.
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":1}", "a": "b"}}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "<redacted 10 bytes>", "a": "b"}}}),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact_object(&input), want, "{input}");
        }
    }

    #[test]
    fn no_value_survives() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"a": "c2VjcmV0LXZhbHVl"}, "stringData": {"b": "another-secret"}});
        let text = serde_json::to_string(&redact_objects(&[secret])).unwrap();
        assert!(!text.contains("c2VjcmV0LXZhbHVl") && !text.contains("another-secret"));
    }

    #[test]
    fn scrubber_table() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "tok-123456", "cert": "line-one\nline-two", "tiny": "ab"}});
        let config =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "public-value"}});
        let s = Scrubber::from_objects([&secret, &config]);
        let cases = [
            ("connecting with hunter2", "connecting with <redacted>"),
            ("raw aHVudGVyMg== seen", "raw <redacted> seen"),
            ("Authorization: tok-123456!", "Authorization: <redacted>!"),
            ("line-two of the cert", "<redacted> of the cert"),
            // Too short to scrub, and ConfigMap values are not secret.
            ("ab public-value", "ab public-value"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(s.scrub(input), want, "{input}");
        }
        assert_eq!(Scrubber::default().scrub("hunter2"), "hunter2");
    }
}
