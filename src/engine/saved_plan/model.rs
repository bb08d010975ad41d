//! The plan file (`diff --out`, `deploy --dry-run --out`; read by `deploy --plan`): what a
//! dry run saw and would apply, per target, as one JSON document with a version. Secrets are
//! kept by the digest of their body only, so the file is safe to keep as a CI artifact. Its
//! own digest is the sha256 of its canonical JSON (keys sorted, no spaces).

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::manifests::{ManifestSet, body_digest};
use crate::report::plan::{ChangePlan, TargetPlan};
use crate::report::{LiveIdentity, SeenObject};
use crate::util::git::CommitInfo;

/// The version of the plan file this rollguard writes and reads.
pub const VERSION: u32 = 1;

/// A saved plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    /// The file's format; 1.
    pub version: u32,
    pub app: String,
    pub commit: Option<CommitInfo>,
    /// `sha256:<hex>` of the config file's bytes.
    pub config_digest: String,
    pub made_at: Timestamp,
    /// The pull request the plan was made on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr: Option<u64>,
    /// Every manifest object as rendered, by digest (the deploy renders them again and
    /// compares).
    pub manifests: Vec<PlannedManifest>,
    /// The revision a deploy of this plan would record (one number for the fleet, above
    /// every target's history head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Whether prune was on (`prune: true`, `--prune`) when the plan was made: a deploy of
    /// the plan must run with the same, so that what the plan says is pruned (or left in
    /// place) is what happens.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prune: bool,
    pub targets: Vec<PlannedTarget>,
}

/// One manifest object as rendered, before any target placed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedManifest {
    /// "Deployment web", "ConfigMap shop/web-config", as written.
    pub object: String,
    /// "k8s/app.yaml:8".
    pub origin: String,
    /// `sha256:<hex>` of the body as rendered.
    pub sha256: String,
}

/// One target's part of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedTarget {
    pub name: String,
    /// The newest revision of the target's release history when the plan was made (absent:
    /// none yet); a deploy of the plan records the fleet's next revision above every head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_head: Option<u64>,
    /// Every object of the manifests as it would be applied there.
    pub objects: Vec<PlannedObject>,
    /// Objects of the last release the manifests drop that stay on the target (prune off,
    /// or not this app's any more), as "Kind namespace/name".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// With prune on (`prune: true`, `--prune`): objects of the last release the manifests
    /// drop that the deploy would delete after a healthy deploy (still this app's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prune: Vec<String>,
}

/// What the dry run would do to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlannedAction {
    Create,
    Update,
    Unchanged,
}

/// One object of a target's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedObject {
    /// "Deployment shop/web", as applied.
    pub object: String,
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub origin: String,
    pub action: PlannedAction,
    /// `sha256:<hex>` of the body as applied (canonical JSON).
    pub sha256: String,
    /// The body as applied; absent for a Secret (its digest only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The live object as the dry run saw it; absent: it would be created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveIdentity>,
}

/// Why a plan file cannot be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum SavedPlanError {
    #[error("cannot read the plan file {}: {source}; pass the file `rollguard diff --out` wrote", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the plan file {} is not a rollguard plan: {source}; pass the file `rollguard diff --out` wrote", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the plan file {} has version {found}; this rollguard reads version {VERSION} only: make the plan again with this rollguard (`rollguard diff --out`)", path.display())]
    UnknownVersion { path: PathBuf, found: String },
    #[error("cannot write the plan file {}: {source}; pass a path in a folder that exists and is writable", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the config file {} for the plan's config digest: {source}", path.display())]
    Config {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plan not saved to {}: target {target} could not be planned (see above); a plan must cover every target: fix it and run again", path.display())]
    Incomplete { path: PathBuf, target: String },
}

/// Where a plan was made.
#[derive(Debug, Clone)]
pub struct Provenance {
    pub config_digest: String,
    pub made_at: Timestamp,
    pub pr: Option<u64>,
    /// Whether prune is on for the run that makes the plan.
    pub prune: bool,
}

impl SavedPlan {
    /// The plan of a finished dry run, to be saved at `path` (pure). Refused when a target
    /// could not be planned: a plan covers every target it names.
    pub fn from_dry_run(
        change_plan: &ChangePlan,
        manifests: &ManifestSet,
        provenance: Provenance,
        path: &Path,
    ) -> Result<SavedPlan, SavedPlanError> {
        if let Some(t) = change_plan.targets.iter().find(|t| !t.errors.is_empty()) {
            return Err(SavedPlanError::Incomplete {
                path: path.to_path_buf(),
                target: t.name.clone(),
            });
        }
        Ok(SavedPlan {
            version: VERSION,
            app: change_plan.app.clone(),
            commit: change_plan.commit.clone(),
            config_digest: provenance.config_digest,
            made_at: provenance.made_at,
            pr: provenance.pr,
            manifests: planned_manifests(manifests),
            revision: Some(crate::release::fleet_revision(&[change_plan
                .targets
                .iter()
                .filter_map(|t| t.history_head)
                .collect()])),
            prune: provenance.prune,
            targets: change_plan.targets.iter().map(planned_target).collect(),
        })
    }

    /// `sha256:<hex>` of the plan's canonical JSON.
    pub fn digest(&self) -> String {
        let canonical = serde_json::to_value(self)
            .map(|v| v.to_string())
            .unwrap_or_default();
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        )
    }

    /// The file's text (pretty JSON).
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads a plan file: an unknown version is refused before anything else is read.
    pub fn read(path: &Path) -> Result<SavedPlan, SavedPlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| SavedPlanError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        SavedPlan::parse(&text, path)
    }

    /// [`SavedPlan::read`] of text already read (pure).
    pub fn parse(text: &str, path: &Path) -> Result<SavedPlan, SavedPlanError> {
        let parse_error = |source| SavedPlanError::Parse {
            path: path.to_path_buf(),
            source,
        };
        let value: Value = serde_json::from_str(text).map_err(parse_error)?;
        match value.get("version") {
            Some(v) if v.as_u64() == Some(u64::from(VERSION)) => {}
            found => {
                return Err(SavedPlanError::UnknownVersion {
                    path: path.to_path_buf(),
                    found: found.map_or_else(|| "none".to_string(), Value::to_string),
                });
            }
        }
        serde_json::from_value(value).map_err(parse_error)
    }

    /// Writes the file.
    pub fn write(&self, path: &Path) -> Result<(), SavedPlanError> {
        std::fs::write(path, self.to_text()).map_err(|source| SavedPlanError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn target(&self, name: &str) -> Option<&PlannedTarget> {
        self.targets.iter().find(|t| t.name == name)
    }
}

/// `sha256:<hex>` of a config file's bytes.
pub fn config_digest(path: &Path) -> Result<String, SavedPlanError> {
    let bytes = std::fs::read(path).map_err(|source| SavedPlanError::Config {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
}

/// The manifests as rendered, by digest, in apply order.
pub fn planned_manifests(manifests: &ManifestSet) -> Vec<PlannedManifest> {
    manifests
        .objects
        .iter()
        .map(|o| PlannedManifest {
            object: o.display_name(),
            origin: o.origin.to_string(),
            sha256: body_digest(&o.body),
        })
        .collect()
}

fn planned_target(t: &TargetPlan) -> PlannedTarget {
    let action = |object: &str| {
        if t.create.iter().any(|c| c.object == object) {
            PlannedAction::Create
        } else if t.update.iter().any(|c| c.object == object) {
            PlannedAction::Update
        } else {
            PlannedAction::Unchanged
        }
    };
    PlannedTarget {
        name: t.name.clone(),
        history_head: t.history_head,
        objects: t
            .seen
            .iter()
            .map(|s| planned_object(s, action(&s.object)))
            .collect(),
        dropped: t.dropped.clone(),
        prune: t.prune.clone(),
    }
}

fn planned_object(seen: &SeenObject, action: PlannedAction) -> PlannedObject {
    PlannedObject {
        object: seen.object.clone(),
        api_version: seen.api_version.clone(),
        kind: seen.kind.clone(),
        namespace: seen.namespace.clone(),
        name: seen.name.clone(),
        origin: seen.origin.clone(),
        action,
        sha256: seen.sha256.clone(),
        body: seen.body.clone(),
        live: seen.live.clone(),
    }
}
