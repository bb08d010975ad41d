//! Writing the JSON form of a decoded protobuf message as Go's `encoding/json` writes the
//! Kubernetes type: which zero values it leaves out (`omitempty`), which it always writes,
//! and which pointers make a zero value count. Also the refusal of fields kube-sim does not
//! convert, so that none is dropped without a word.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Why a protobuf body was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The bytes are not a valid encoding of the type (answered 400).
    Malformed(String),
    /// The body is valid but uses something kube-sim does not convert (answered 415).
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, Refusal>;

/// `path.field`, or `field` at the top.
pub fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// A field that kube-sim does not convert from protobuf: accepted only when it carries
/// nothing (absent, or the zero value Go's encoder writes for an unset field), otherwise the
/// request is refused with the field's path, never dropped.
pub fn unconverted(path: &str, field: &str, empty: bool) -> Result<()> {
    if empty {
        Ok(())
    } else {
        Err(Refusal::Unsupported(format!(
            "field {} is not converted from protobuf by kube-sim; send this object as JSON",
            join(path, field)
        )))
    }
}

/// Whether a decoded field carries nothing: absent, or the zero value of a non-pointer Go
/// field (which Go's protobuf encoder writes even when unset).
pub trait Zero {
    fn is_zero(&self) -> bool;
}

impl Zero for Option<String> {
    fn is_zero(&self) -> bool {
        self.as_deref().is_none_or(str::is_empty)
    }
}

impl Zero for Option<i32> {
    fn is_zero(&self) -> bool {
        self.is_none_or(|v| v == 0)
    }
}

impl Zero for Option<i64> {
    fn is_zero(&self) -> bool {
        self.is_none_or(|v| v == 0)
    }
}

impl Zero for Option<bool> {
    fn is_zero(&self) -> bool {
        self.is_none_or(|v| !v)
    }
}

impl<T> Zero for Vec<T> {
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

impl<K, V> Zero for BTreeMap<K, V> {
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A JSON object being filled field by field. The method names follow the Go field:
/// plain (`omitempty`: the zero value is left out), `_always` (no `omitempty`: written even
/// when zero) and `_ptr` (a pointer: written whenever the sender set it, zero included).
#[derive(Default)]
pub struct Obj(Map<String, Value>);

impl Obj {
    pub fn new() -> Self {
        Obj::default()
    }

    pub fn done(self) -> Value {
        Value::Object(self.0)
    }

    pub fn put(&mut self, key: &str, value: Value) {
        self.0.insert(key.to_string(), value);
    }

    pub fn str(&mut self, key: &str, value: Option<String>) {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.put(key, json!(v));
        }
    }

    pub fn str_always(&mut self, key: &str, value: Option<String>) {
        self.put(key, json!(value.unwrap_or_default()));
    }

    pub fn str_ptr(&mut self, key: &str, value: Option<String>) {
        if let Some(v) = value {
            self.put(key, json!(v));
        }
    }

    pub fn int<T: Into<i64>>(&mut self, key: &str, value: Option<T>) {
        if let Some(v) = value.map(Into::into).filter(|v| *v != 0) {
            self.put(key, json!(v));
        }
    }

    pub fn int_always<T: Into<i64>>(&mut self, key: &str, value: Option<T>) {
        self.put(key, json!(value.map(Into::into).unwrap_or(0)));
    }

    pub fn int_ptr<T: Into<i64>>(&mut self, key: &str, value: Option<T>) {
        if let Some(v) = value {
            self.put(key, json!(v.into()));
        }
    }

    pub fn bool(&mut self, key: &str, value: Option<bool>) {
        if value == Some(true) {
            self.put(key, json!(true));
        }
    }

    pub fn bool_ptr(&mut self, key: &str, value: Option<bool>) {
        if let Some(v) = value {
            self.put(key, json!(v));
        }
    }

    pub fn strs(&mut self, key: &str, value: Vec<String>) {
        if !value.is_empty() {
            self.put(key, json!(value));
        }
    }

    /// A slice without `omitempty`: Go writes `null` for an empty one.
    pub fn strs_always(&mut self, key: &str, value: Vec<String>) {
        if value.is_empty() {
            self.put(key, Value::Null);
        } else {
            self.put(key, json!(value));
        }
    }

    pub fn str_map(&mut self, key: &str, value: BTreeMap<String, String>) {
        if !value.is_empty() {
            self.put(key, json!(value));
        }
    }

    /// A nested message: written when present (Go sends a non-pointer struct always, so it
    /// is present then, and a pointer only when set).
    pub fn msg<T>(
        &mut self,
        path: &str,
        key: &str,
        value: Option<T>,
        convert: impl FnOnce(T, &str) -> Result<Value>,
    ) -> Result<()> {
        if let Some(v) = value {
            let v = convert(v, &join(path, key))?;
            self.put(key, v);
        }
        Ok(())
    }

    /// A repeated message with `omitempty`.
    pub fn list<T>(
        &mut self,
        path: &str,
        key: &str,
        value: Vec<T>,
        convert: impl Fn(T, &str) -> Result<Value>,
    ) -> Result<()> {
        if value.is_empty() {
            return Ok(());
        }
        let items = list(path, key, value, convert)?;
        self.put(key, Value::Array(items));
        Ok(())
    }

    /// A repeated message without `omitempty`: `null` when empty, as Go writes a nil slice.
    pub fn list_always<T>(
        &mut self,
        path: &str,
        key: &str,
        value: Vec<T>,
        convert: impl Fn(T, &str) -> Result<Value>,
    ) -> Result<()> {
        if value.is_empty() {
            self.put(key, Value::Null);
            return Ok(());
        }
        let items = list(path, key, value, convert)?;
        self.put(key, Value::Array(items));
        Ok(())
    }
}

fn list<T>(
    path: &str,
    key: &str,
    value: Vec<T>,
    convert: impl Fn(T, &str) -> Result<Value>,
) -> Result<Vec<Value>> {
    let base = join(path, key);
    value
        .into_iter()
        .enumerate()
        .map(|(i, item)| convert(item, &format!("{base}[{i}]")))
        .collect()
}
