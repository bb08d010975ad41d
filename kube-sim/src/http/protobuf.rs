//! Just enough of the Kubernetes protobuf encoding to accept what kubectl's typed clients
//! send for `kubectl create namespace | configmap | secret | serviceaccount`. Other kinds
//! in protobuf are refused with 415 (clients then have to use JSON, as kubectl apply does).

use base64::Engine;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\x00";

/// One decoded field: its number and payload.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.data.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint too long".into())
    }

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                let start = self.pos;
                self.skip(len)?;
                Field::Bytes(&self.data[start..start + len])
            }
            5 => {
                self.skip(4)?;
                Field::Fixed
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((number, field)))
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        if end > self.data.len() {
            return Err("truncated field".into());
        }
        self.pos = end;
        Ok(())
    }
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

/// A `map<string, string>` (or bytes, base64-encoded) entry.
fn map_entry(bytes: &[u8], base64_values: bool) -> Result<(String, Value), String> {
    let mut r = Reader::new(bytes);
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    while let Some((n, f)) = r.next()? {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) if base64_values => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(b));
            }
            (2, Field::Bytes(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_entry(
    map: &mut Map<String, Value>,
    field: &str,
    bytes: &[u8],
    base64_values: bool,
) -> Result<(), String> {
    let (k, v) = map_entry(bytes, base64_values)?;
    let entry = map.entry(field).or_insert_with(|| json!({}));
    if let Some(m) = entry.as_object_mut() {
        m.insert(k, v);
    }
    Ok(())
}

fn object_meta(bytes: &[u8]) -> Result<Value, String> {
    let mut meta = Map::new();
    let mut r = Reader::new(bytes);
    while let Some((n, f)) = r.next()? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                meta.insert("name".into(), json!(text(b)?));
            }
            (2, Field::Bytes(b)) => {
                meta.insert("generateName".into(), json!(text(b)?));
            }
            (3, Field::Bytes(b)) => {
                meta.insert("namespace".into(), json!(text(b)?));
            }
            (11, Field::Bytes(b)) => insert_entry(&mut meta, "labels", b, false)?,
            (12, Field::Bytes(b)) => insert_entry(&mut meta, "annotations", b, false)?,
            (14, Field::Bytes(b)) => {
                let list = meta.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(text(b)?));
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(meta))
}

/// Decodes a protobuf request body of the given kind into its JSON form.
pub fn decode(body: &[u8], kind: &str) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the Kubernetes protobuf magic number")?;
    let mut r = Reader::new(envelope);
    let (mut api_version, mut body_kind, mut raw) = (String::new(), String::new(), None);
    while let Some((n, f)) = r.next()? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                let mut t = Reader::new(type_meta);
                while let Some((tn, tf)) = t.next()? {
                    match (tn, tf) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => body_kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = Some(b),
            _ => {}
        }
    }
    let raw = raw.ok_or("the protobuf envelope carries no object")?;
    if !body_kind.is_empty() && body_kind != kind {
        return Err(format!("kind {body_kind} does not match {kind}"));
    }
    let mut obj = Map::new();
    obj.insert(
        "apiVersion".into(),
        json!(if api_version.is_empty() {
            "v1".to_string()
        } else {
            api_version
        }),
    );
    obj.insert("kind".into(), json!(kind));
    let mut r = Reader::new(raw);
    while let Some((n, f)) = r.next()? {
        let Field::Bytes(b) = f else {
            if let (4, Field::Varint(v)) = (n, &f)
                && matches!(kind, "ConfigMap")
            {
                obj.insert("immutable".into(), json!(*v != 0));
            }
            if let (5, Field::Varint(v)) = (n, &f)
                && matches!(kind, "Secret")
            {
                obj.insert("immutable".into(), json!(*v != 0));
            }
            if let (4, Field::Varint(v)) = (n, &f)
                && matches!(kind, "ServiceAccount")
            {
                obj.insert("automountServiceAccountToken".into(), json!(*v != 0));
            }
            continue;
        };
        match (kind, n) {
            (_, 1) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            ("Namespace", 2) => {
                let mut finalizers = Vec::new();
                let mut s = Reader::new(b);
                while let Some((sn, sf)) = s.next()? {
                    if let (1, Field::Bytes(x)) = (sn, sf) {
                        finalizers.push(json!(text(x)?));
                    }
                }
                obj.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            ("ConfigMap", 2) => insert_entry(&mut obj, "data", b, false)?,
            ("ConfigMap", 3) => insert_entry(&mut obj, "binaryData", b, true)?,
            ("Secret", 2) => insert_entry(&mut obj, "data", b, true)?,
            ("Secret", 3) => {
                obj.insert("type".into(), json!(text(b)?));
            }
            ("Secret", 4) => insert_entry(&mut obj, "stringData", b, false)?,
            ("Namespace" | "ConfigMap" | "Secret" | "ServiceAccount", _) => {}
            _ => {
                return Err(format!(
                    "protobuf bodies are accepted for Namespace, ConfigMap, Secret and ServiceAccount only, not {kind}; send JSON"
                ));
            }
        }
    }
    if !matches!(
        kind,
        "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount"
    ) {
        return Err(format!(
            "protobuf bodies are accepted for Namespace, ConfigMap, Secret and ServiceAccount only, not {kind}; send JSON"
        ));
    }
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, b"v1"), field(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), field(1, &type_meta), field(2, raw)].concat()
    }

    #[test]
    fn decodes_a_namespace_like_kubectl_create_sends_it() {
        let meta = field(1, b"demo");
        let body = envelope(
            "Namespace",
            &[field(1, &meta), field(2, b""), field(3, b"")].concat(),
        );
        let v = decode(&body, "Namespace").unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}, "spec": {"finalizers": []}})
        );
    }

    #[test]
    fn decodes_configmap_data_and_labels() {
        let label = [field(1, b"app"), field(2, b"web")].concat();
        let meta = [field(1, b"cfg"), field(11, &label)].concat();
        let entry = [field(1, b"k"), field(2, b"v")].concat();
        let body = envelope("ConfigMap", &[field(1, &meta), field(2, &entry)].concat());
        let v = decode(&body, "ConfigMap").unwrap();
        assert_eq!(v["metadata"]["labels"]["app"], "web");
        assert_eq!(v["data"]["k"], "v");
    }

    #[test]
    fn secret_bytes_become_base64() {
        let entry = [field(1, b"password"), field(2, b"hunter2")].concat();
        let body = envelope(
            "Secret",
            &[
                field(1, &field(1, b"s")),
                field(2, &entry),
                field(3, b"Opaque"),
            ]
            .concat(),
        );
        let v = decode(&body, "Secret").unwrap();
        assert_eq!(v["data"]["password"], "aHVudGVyMg==");
        assert_eq!(v["type"], "Opaque");
    }

    #[test]
    fn refuses_garbage_and_other_kinds() {
        assert!(decode(b"{}", "Namespace").is_err());
        assert!(decode(b"k8s\x00\x0a\xff\xff\xff", "Namespace").is_err());
        let body = envelope("Deployment", &field(1, &field(1, b"d")));
        assert!(decode(&body, "Deployment").is_err());
    }
}
