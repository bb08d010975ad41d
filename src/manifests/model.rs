//! The manifests as rollguard carries them: objects with their origin (file and line), the
//! validated set in apply order and its phases, duplicate detection, the digest, the issues.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::util::yaml::Node;

use super::order::{PHASE_NAMES, apply_rank, is_cluster_scoped_kind};

/// Where an object came from: file (or `<render>`) and line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}", self.file.display(), self.line)
        } else {
            write!(f, "{}", self.file.display())
        }
    }
}

/// One Kubernetes object to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// `metadata.namespace` as written (None: the target's or app's default, or cluster-scoped).
    pub namespace: Option<String>,
    pub origin: Origin,
    /// The object as it will be applied (`metadata.managedFields` removed).
    pub body: Value,
    /// The YAML document it was read from, with the line of every node, to name the line of
    /// one field (a refused, misspelt one). None for JSON files and stored releases.
    pub source: Option<Arc<Node>>,
}

impl ManifestObject {
    /// API group: "" for core, "apps" for "apps/v1".
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, version)| version)
    }

    /// Where the field at `path` (as the API server writes it, `.spec.x[name="a"].y`) is
    /// written; the object's own origin when the source does not say.
    pub fn field_origin(&self, path: &str) -> Origin {
        let line = self.source.as_ref().and_then(|n| n.line_of_path(path));
        Origin {
            file: self.origin.file.clone(),
            line: line.unwrap_or(self.origin.line),
        }
    }

    /// "Deployment shop/web", or "Namespace shop" without a namespace.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// Like `display_name`, with `default_ns` for namespaced objects written without one.
    pub fn display_name_in(&self, default_ns: Option<&str>) -> String {
        match (&self.namespace, default_ns) {
            (Some(ns), _) => format!("{} {ns}/{}", self.kind, self.name),
            (None, Some(ns)) if !is_cluster_scoped_kind(self.group(), &self.kind) => {
                format!("{} {ns}/{}", self.kind, self.name)
            }
            _ => format!("{} {}", self.kind, self.name),
        }
    }

    /// A copy placed in `namespace` when it names none (call it for namespaced kinds only;
    /// discovery says which those are). An explicit namespace is kept.
    pub fn in_namespace(&self, namespace: &str) -> ManifestObject {
        let mut obj = self.clone();
        if obj.namespace.is_none() {
            obj.namespace = Some(namespace.to_string());
            if let Some(meta) = obj.body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".into(), Value::String(namespace.to_string()));
            }
        }
        obj
    }

    /// Where this object goes in the apply order (see `ApplyPhase`).
    pub fn apply_rank(&self) -> usize {
        apply_rank(self.group(), &self.kind)
    }
}

/// A group of objects applied together; each phase completes before the next starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyPhase<'a> {
    /// "namespaces-and-crds", "config-storage-rbac", "bindings", "services", "workloads", "other".
    pub name: &'static str,
    /// Borrowed from the set: every target applies the same objects, and a copy per target
    /// was most of a large fleet's memory.
    pub objects: &'a [ManifestObject],
    /// The phase holds CRDs: wait until they are Established and rediscover before the next.
    pub wait_for_crds: bool,
}

/// A validated set of objects, in apply order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ManifestSet {
    pub objects: Vec<ManifestObject>,
}

impl ManifestSet {
    /// Validates a whole set (duplicates across files) and sorts it into apply order
    /// (stable: source order within a group).
    pub fn new(
        objects: Vec<ManifestObject>,
        default_namespace: Option<&str>,
    ) -> Result<ManifestSet, ManifestError> {
        let issues = duplicates(&objects, default_namespace);
        if !issues.is_empty() {
            return Err(ManifestError::Invalid(issues));
        }
        let mut objects = objects;
        objects.sort_by_key(ManifestObject::apply_rank);
        Ok(ManifestSet { objects })
    }

    /// Consecutive groups that must be applied (and, for CRDs, established) before the next.
    pub fn phases(&self) -> Vec<ApplyPhase<'_>> {
        let phase_of = |o: &ManifestObject| PHASE_NAMES[o.apply_rank()];
        self.objects
            .chunk_by(|a, b| phase_of(a) == phase_of(b))
            .map(|objects| ApplyPhase {
                name: phase_of(&objects[0]),
                objects,
                wait_for_crds: objects.iter().any(|o| {
                    o.kind == "CustomResourceDefinition" && o.group() == "apiextensions.k8s.io"
                }),
            })
            .collect()
    }

    /// The set as multi-document YAML, exactly as applied (for release records).
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for obj in &self.objects {
            out.push_str("---\n");
            out.push_str(&to_yaml_document(&obj.body));
        }
        out
    }

    /// The digest of the set's bodies, as release records keep it ([`digest_bodies`]).
    pub fn digest(&self) -> String {
        let bodies: Vec<&Value> = self.objects.iter().map(|o| &o.body).collect();
        digest_bodies(&bodies)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// YAML for one object. JSON is the fallback: it is valid YAML and always round-trips.
fn to_yaml_document(body: &Value) -> String {
    match serde_saphyr::to_string(body) {
        Ok(mut text) => {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text
        }
        Err(_) => format!("{body}\n"),
    }
}

/// One problem with the manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestIssue {
    pub origin: Origin,
    pub message: String,
}

impl fmt::Display for ManifestIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Every problem found, each with file and line.
    #[error("{}", issues_text(.0))]
    Invalid(Vec<ManifestIssue>),
    #[error(
        "render command `{command}` failed ({status}){}",
        if stderr.trim().is_empty() { String::new() } else { format!(":\n{}", stderr.trim_end()) }
    )]
    Render {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("no Kubernetes objects found in {0}")]
    Empty(String),
}

impl ManifestError {
    pub fn issues(&self) -> &[ManifestIssue] {
        match self {
            ManifestError::Invalid(issues) => issues,
            _ => &[],
        }
    }
}

fn issues_text(issues: &[ManifestIssue]) -> String {
    issues
        .iter()
        .map(ManifestIssue::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Objects that name the same thing twice (group, kind, namespace, name), both places named.
pub(super) fn duplicates(
    objects: &[ManifestObject],
    default_namespace: Option<&str>,
) -> Vec<ManifestIssue> {
    let mut first: HashMap<(String, String, String, String), &Origin> = HashMap::new();
    let mut issues = Vec::new();
    for obj in objects {
        let namespace = if is_cluster_scoped_kind(obj.group(), &obj.kind) {
            String::new()
        } else {
            obj.namespace
                .clone()
                .or_else(|| default_namespace.map(str::to_string))
                .unwrap_or_default()
        };
        let key = (
            obj.group().to_string(),
            obj.kind.clone(),
            namespace,
            obj.name.clone(),
        );
        match first.get(&key) {
            Some(other) => issues.push(ManifestIssue {
                origin: obj.origin.clone(),
                message: format!(
                    "duplicate object {}: also defined at {other}",
                    obj.display_name_in(default_namespace)
                ),
            }),
            None => {
                first.insert(key, &obj.origin);
            }
        }
    }
    issues
}

/// `sha256:<hex>` of one body as canonical JSON (keys sorted): a saved plan's digest of
/// what it would apply.
pub fn body_digest(body: &serde_json::Value) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(body.to_string().as_bytes()))
    )
}

/// `sha256:<hex>` of the bodies in order: equal manifests give equal digests, so a rollback
/// record and the revision it re-applied share one.
pub fn digest_bodies<B: std::borrow::Borrow<serde_json::Value>>(bodies: &[B]) -> String {
    let mut hasher = Sha256::new();
    for body in bodies {
        hasher.update(body.borrow().to_string().as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}
