//! A record as Secret data: gzip'd JSON under two keys (the record, and the manifests encoded
//! once per run), the size limit that leaves the manifests out, and the release digest.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::sync::Arc;

use k8s_openapi::ByteString;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::record::*;

/// The manifests of a revision, encoded once and shared by the records of every target.
#[derive(Debug, Clone)]
pub struct EncodedManifests {
    /// gzip'd JSON array of the bodies.
    pub(super) gz: Arc<[u8]>,
    pub digest: String,
    pub objects: Vec<ObjectRef>,
}

impl EncodedManifests {
    /// From object bodies as they will be applied; the object list and digest are derived
    /// (the list is replaced by what was really applied when the record finishes).
    pub fn encode<B>(bodies: &[B]) -> Result<EncodedManifests>
    where
        B: std::borrow::Borrow<serde_json::Value> + Serialize,
    {
        Ok(EncodedManifests {
            gz: gzip_json(bodies)?.into(),
            digest: crate::manifests::digest_bodies(bodies),
            objects: bodies
                .iter()
                .filter_map(|b| ObjectRef::from_body(b.borrow()))
                .collect(),
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
) -> std::result::Result<ReleaseRecord, String> {
    let bytes = data
        .get(DATA_KEY)
        .ok_or_else(|| format!("no `{DATA_KEY}` key"))?;
    let mut record: ReleaseRecord = gunzip_json(&bytes.0)?;
    match data.get(MANIFESTS_KEY) {
        Some(bytes) if with_manifests => {
            record.manifests =
                Some(gunzip_json(&bytes.0).map_err(|e| format!("`{MANIFESTS_KEY}` key: {e}"))?);
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

pub(super) fn gzip_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let encode = |e: &dyn fmt::Display| ReleaseError::Encode(e.to_string());
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    serde_json::to_writer(&mut encoder, value).map_err(|e| encode(&e))?;
    encoder.finish().map_err(|e| encode(&e))
}

pub(super) fn gunzip_json<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, String> {
    let mut json = Vec::new();
    // A bound on the inflated size guards against a hostile or corrupt record.
    flate2::read::GzDecoder::new(bytes)
        .take(256 * 1024 * 1024)
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    serde_json::from_slice(&json).map_err(|e| format!("not a release record: {e}"))
}
