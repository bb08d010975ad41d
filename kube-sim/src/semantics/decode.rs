//! What the real server does while decoding a body into its Go type, before defaults and
//! validation: Secret `data` must be base64 (Go's `encoding/json` decoding of `[]byte`), and
//! `stringData` is write-only, merged into `data` (it wins for a shared key).

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::model::resource::ResourceType;

fn is_secret(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.resource == "secrets"
}

/// Why an object of `api_version` and `kind` cannot be decoded, in Go's words
/// (`illegal base64 data at input byte 7`), or None.
pub fn decode_error(api_version: &str, kind: &str, obj: &Value) -> Option<String> {
    if (api_version, kind) != ("v1", "Secret") {
        return None;
    }
    let field_type = |field: &str, go_type: &str, ok: fn(&Value) -> bool| {
        let values = obj.get(field)?.as_object()?;
        values.values().find(|v| !ok(v)).map(|v| {
            format!(
                "json: cannot unmarshal {} into Go struct field Secret.{field} of type {go_type}",
                json_type(v)
            )
        })
    };
    let is_string = |v: &Value| v.is_string() || v.is_null();
    if let Some(error) = field_type("stringData", "string", is_string) {
        return Some(error);
    }
    if let Some(error) = field_type("data", "[]uint8", is_string) {
        return Some(error);
    }
    let data = obj.get("data")?.as_object()?;
    data.values()
        .filter_map(Value::as_str)
        .find_map(base64_error_offset)
        .map(|at| format!("illegal base64 data at input byte {at}"))
}

/// A JSON value's type as Go's decoder names it in errors.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where Go's `base64.StdEncoding` reports the first error in `text`, or None if it decodes.
pub fn base64_error_offset(text: &str) -> Option<usize> {
    let src = text.as_bytes();
    let valid = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
    let mut si = 0;
    loop {
        // One quantum of four characters (newlines skipped), as Go's decodeQuantum.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                return match j {
                    0 => None,
                    _ => Some(si - j),
                };
            }
            let c = src[si];
            si += 1;
            if valid(c) {
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Some(si - 1);
            }
            // Padding: only after two or three characters.
            match j {
                0 | 1 => return Some(si - 1),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Some(src.len());
                    }
                    if src[si] != b'=' {
                        return Some(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            return (si < src.len()).then_some(si);
        }
    }
}

/// Moves a Secret's `stringData` into `data` (base64-encoded; stringData wins), as the
/// conversion to the internal type does. Other kinds are left alone.
pub fn merge_string_data(rt: &ResourceType, obj: &mut Value) {
    if !is_secret(rt) {
        return;
    }
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(string_data) = map.remove("stringData") else {
        return;
    };
    let Some(string_data) = string_data.as_object() else {
        return;
    };
    if string_data.is_empty() {
        return;
    }
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in string_data {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            data.insert(key.clone(), json!(encoded));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_errors_where_go_reports_them() {
        let cases = [
            ("czNjcjN0", None),
            ("YWRtaW4=", None),
            ("YQ==", None),
            ("", None),
            ("REPLACE_ME_NOT_BASE64!", Some(7)),
            ("abc", Some(0)),
            ("a", Some(0)),
            ("YQ=", Some(3)),
            ("=abc", Some(0)),
            ("YWJj\nZGVm", None),
            ("YQ==YQ==", Some(4)),
        ];
        for (text, want) in cases {
            assert_eq!(base64_error_offset(text), want, "{text:?}");
        }
    }

    #[test]
    fn secrets_that_do_not_decode_table() {
        let cases = [
            (json!({"data": {"a": "YQ=="}}), None),
            (
                json!({"data": {"a": "REPLACE_ME_NOT_BASE64!"}}),
                Some("illegal base64 data at input byte 7"),
            ),
            (
                json!({"stringData": {"a": ["x"]}}),
                Some(
                    "json: cannot unmarshal array into Go struct field Secret.stringData of type string",
                ),
            ),
            (
                json!({"data": {"a": 1}}),
                Some(
                    "json: cannot unmarshal number into Go struct field Secret.data of type []uint8",
                ),
            ),
        ];
        for (secret, want) in cases {
            assert_eq!(
                decode_error("v1", "Secret", &secret).as_deref(),
                want,
                "{secret}"
            );
        }
    }

    #[test]
    fn string_data_wins_and_is_not_kept() {
        let secrets = ResourceType::new("", "v1", "secrets");
        let mut secret = json!({"data": {"password": "ZnJvbS1kYXRh", "only-in-data": "ZGF0YQ=="},
            "stringData": {"password": "from-stringData"}});
        merge_string_data(&secrets, &mut secret);
        assert_eq!(
            secret,
            json!({"data": {"password": "ZnJvbS1zdHJpbmdEYXRh", "only-in-data": "ZGF0YQ=="}})
        );
    }
}
