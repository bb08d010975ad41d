//! A record as Secret data: gzip'd JSON under two keys (the record, and the manifests encoded
//! once per run), the size limit that leaves the manifests out, and the release digest.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;

use k8s_openapi::ByteString;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::record::*;
use crate::config::SecretsPolicy;

/// The manifests of a revision, encoded once and shared by the records of every target
/// (of every target whose history namespace keeps the same Secrets as digests).
#[derive(Debug, Clone)]
pub struct EncodedManifests {
    /// gzip'd JSON array of the bodies.
    pub(super) gz: Arc<[u8]>,
    pub digest: String,
    pub objects: Vec<ObjectRef>,
    /// Secrets of namespaces other than the history namespace, and how they are kept.
    pub other_namespace_secrets: Option<OtherNamespaceSecrets>,
}

/// Secrets of other namespaces than the history namespace in a record (`history.secrets`):
/// `kept` is `digest` (the body is a stub with its digest; rollback re-reads it from git at
/// the record's commit) or `store`. `rollguard show` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OtherNamespaceSecrets {
    pub kept: String,
    /// `namespace/name` of each.
    pub names: Vec<String>,
}

/// The annotation of a Secret stub: the digest of the Secret as applied.
pub const SECRET_DIGEST_ANNOTATION: &str = "rollguard.dev/secret-digest";

/// Indices of the Secrets among `bodies` whose namespace (their own, else
/// `default_namespace`) is not `history_namespace`.
pub fn other_namespace_secrets<B: std::borrow::Borrow<serde_json::Value>>(
    bodies: &[B],
    history_namespace: &str,
    default_namespace: &str,
) -> Vec<usize> {
    bodies
        .iter()
        .enumerate()
        .filter(|(_, b)| {
            let b = b.borrow();
            crate::report::redact::is_secret(b)
                && secret_namespace(b, default_namespace) != history_namespace
        })
        .map(|(i, _)| i)
        .collect()
}

fn secret_namespace<'a>(body: &'a serde_json::Value, default_namespace: &'a str) -> &'a str {
    body.pointer("/metadata/namespace")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(default_namespace)
}

/// What a record keeps of a Secret under `history.secrets: digest`: its identity and the
/// digest of its body, no data.
pub fn secret_stub(body: &serde_json::Value) -> serde_json::Value {
    let mut metadata = serde_json::Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = body.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.to_string(), v.clone());
        }
    }
    metadata.insert(
        "annotations".to_string(),
        serde_json::json!({ SECRET_DIGEST_ANNOTATION: crate::manifests::digest_bodies(&[body]) }),
    );
    serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata})
}

/// The digest a Secret stub holds, None for any other body.
pub fn stub_digest(body: &serde_json::Value) -> Option<&str> {
    if !crate::report::redact::is_secret(body)
        || body.get("data").is_some()
        || body.get("stringData").is_some()
    {
        return None;
    }
    body.pointer("/metadata/annotations")?
        .get(SECRET_DIGEST_ANNOTATION)?
        .as_str()
}

/// A Secret a release keeps only as a digest that git cannot give back as it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StubError {
    #[error(
        "Secret {namespace}/{name} at commit {commit} is not the one the release applied (its digest differs; history.secrets: digest keeps only the digest): restore it by hand or roll back to another revision"
    )]
    Differs {
        namespace: String,
        name: String,
        commit: String,
    },
    #[error(
        "Secret {namespace}/{name} is not in the manifests at commit {commit} (history.secrets: digest keeps only its digest): restore it by hand or roll back to another revision"
    )]
    Missing {
        namespace: String,
        name: String,
        commit: String,
    },
}

/// Replaces each stub among `bodies` by the Secret of the same namespace and name among
/// `from_git` (namespaces defaulting to `default_namespace`) whose digest is the stub's.
pub fn fill_secret_stubs(
    bodies: &mut [serde_json::Value],
    from_git: &[serde_json::Value],
    default_namespace: &str,
    commit: &str,
) -> std::result::Result<(), StubError> {
    for body in bodies.iter_mut() {
        let Some(digest) = stub_digest(body).map(str::to_string) else {
            continue;
        };
        let namespace = secret_namespace(body, default_namespace).to_string();
        let name = body
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string();
        let found = from_git.iter().find(|g| {
            crate::report::redact::is_secret(g)
                && g.pointer("/metadata/name")
                    .and_then(serde_json::Value::as_str)
                    == Some(&name)
                && secret_namespace(g, default_namespace) == namespace
        });
        match found {
            Some(g) if crate::manifests::digest_bodies(&[g]) == digest => *body = g.clone(),
            Some(_) => {
                return Err(StubError::Differs {
                    namespace,
                    name,
                    commit: commit.to_string(),
                });
            }
            None => {
                return Err(StubError::Missing {
                    namespace,
                    name,
                    commit: commit.to_string(),
                });
            }
        }
    }
    Ok(())
}

impl EncodedManifests {
    /// From object bodies as they will be applied; the object list and digest are derived
    /// (the list is replaced by what was really applied when the record finishes).
    pub fn encode<B>(bodies: &[B]) -> Result<EncodedManifests, EncodeError>
    where
        B: std::borrow::Borrow<serde_json::Value> + Serialize,
    {
        Self::encode_for_history(bodies, &[], SecretsPolicy::Store, "")
    }

    /// [`EncodedManifests::encode`] for a record in `history_namespace`: the Secrets of other
    /// namespaces (`others`, from [`other_namespace_secrets`]) kept as `policy` says. The
    /// digest and the object list are those of the real bodies.
    pub fn encode_for_history<B>(
        bodies: &[B],
        others: &[usize],
        policy: SecretsPolicy,
        default_namespace: &str,
    ) -> Result<EncodedManifests, EncodeError>
    where
        B: std::borrow::Borrow<serde_json::Value> + Serialize,
    {
        let gz = if policy == SecretsPolicy::Digest && !others.is_empty() {
            let kept: Vec<serde_json::Value> = bodies
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if others.contains(&i) {
                        secret_stub(b.borrow())
                    } else {
                        b.borrow().clone()
                    }
                })
                .collect();
            gzip_json(&kept)?
        } else {
            gzip_json(bodies)?
        };
        let other_namespace_secrets = (!others.is_empty()).then(|| OtherNamespaceSecrets {
            kept: policy.as_str().to_string(),
            names: others
                .iter()
                .filter_map(|i| bodies.get(*i))
                .map(|b| {
                    let b = b.borrow();
                    format!(
                        "{}/{}",
                        secret_namespace(b, default_namespace),
                        b.pointer("/metadata/name")
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or("")
                    )
                })
                .collect(),
        });
        Ok(EncodedManifests {
            gz: gz.into(),
            digest: crate::manifests::digest_bodies(bodies),
            objects: bodies
                .iter()
                .filter_map(|b| ObjectRef::from_body(b.borrow()))
                .collect(),
            other_namespace_secrets,
        })
    }
}

/// The data of a record's Secret: the record under [`DATA_KEY`] and, when given, the
/// encoded manifests under [`MANIFESTS_KEY`]. When both together are over
/// [`MAX_RECORD_BYTES`] the manifests are left out and the record says so (its commit
/// stays, so they can be rebuilt from git). The record's own `manifests` field is never
/// written. Returns the data and whether the manifests were left out.
pub fn secret_data(
    record: &ReleaseRecord,
    manifests: Option<Vec<u8>>,
) -> Result<(BTreeMap<String, ByteString>, bool)> {
    let head = |omitted: bool| {
        gzip_json(&ReleaseRecord {
            manifests: None,
            manifests_omitted: record.manifests_omitted || omitted,
            ..record.clone()
        })
    };
    let mut data = BTreeMap::new();
    let mut omitted = false;
    let mut record_bytes = head(false)?;
    if let Some(manifests) = manifests {
        if record_bytes.len() + manifests.len() <= MAX_RECORD_BYTES {
            data.insert(MANIFESTS_KEY.to_string(), ByteString(manifests));
        } else {
            omitted = true;
            record_bytes = head(true)?;
        }
    }
    data.insert(DATA_KEY.to_string(), ByteString(record_bytes));
    Ok((data, omitted))
}

/// Read a record from its Secret's data, with its manifests when `with_manifests`.
pub fn record_from_data(
    data: &BTreeMap<String, ByteString>,
    with_manifests: bool,
) -> std::result::Result<ReleaseRecord, DecodeError> {
    let bytes = data
        .get(DATA_KEY)
        .ok_or(DecodeError::MissingKey { key: DATA_KEY })?;
    let mut record: ReleaseRecord = gunzip_json(&bytes.0)?;
    match data.get(MANIFESTS_KEY) {
        Some(bytes) if with_manifests => {
            record.manifests =
                Some(gunzip_json(&bytes.0).map_err(|source| DecodeError::InKey {
                    key: MANIFESTS_KEY,
                    source: Box::new(source),
                })?);
        }
        // Records of rollguard before 0.1's split hold their manifests inside the record.
        None if with_manifests => {}
        _ => record.manifests = None,
    }
    Ok(record)
}

/// The digest a record keeps: its manifests' digest, and the default namespace they were
/// applied with (the same manifests in another namespace are another release).
pub fn release_digest(manifests_digest: &str, default_namespace: Option<&str>) -> String {
    match default_namespace {
        None => manifests_digest.to_string(),
        Some(namespace) => {
            use sha2::Digest;
            let mut hasher = sha2::Sha256::new();
            hasher.update(manifests_digest.as_bytes());
            hasher.update(b"\nnamespace=");
            hasher.update(namespace.as_bytes());
            format!("sha256:{}", hex::encode(hasher.finalize()))
        }
    }
}

pub(super) fn gzip_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, EncodeError> {
    // Encoded whole first: serde_json writes a token at a time, and every small write into
    // the compressor is a deflate call (most of a release record's encoding time).
    let json = serde_json::to_vec(value).map_err(|e| EncodeError::Json(Arc::new(e)))?;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(&json)
        .map_err(|e| EncodeError::Gzip(Arc::new(e)))?;
    encoder.finish().map_err(|e| EncodeError::Gzip(Arc::new(e)))
}

pub(super) fn gunzip_json<T: DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<T, DecodeError> {
    let mut json = Vec::new();
    // A bound on the inflated size guards against a hostile or corrupt record.
    flate2::read::GzDecoder::new(bytes)
        .take(256 * 1024 * 1024)
        .read_to_end(&mut json)
        .map_err(DecodeError::NotGzip)?;
    serde_json::from_slice(&json).map_err(DecodeError::NotJson)
}
