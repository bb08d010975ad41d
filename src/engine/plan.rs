//! The plan: everything a deploy needs (config, manifests in apply order, commit, flags, a
//! snapshot of the environment), validated before any cluster is touched.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::manifests::ManifestSet;
use crate::release::{EncodedManifests, ReleaseError, other_namespace_secrets};
use crate::util::git::CommitInfo;

/// Options of a deploy that come from flags, not from the config file.
#[derive(Debug, Clone, Default)]
pub struct DeployOptions {
    pub force_conflicts: bool,
    pub dry_run: bool,
    /// `--force`: deploy (record, run every stage) even where nothing would change.
    pub force: bool,
    /// `--kubeconfig`, for targets that name no kubeconfig of their own.
    pub cli_kubeconfig: Option<PathBuf>,
    /// `--wave N`: run wave N only. The config's targets are already those of wave N (the
    /// config refuses a wave no target is in, and a `--target` selection with none in it).
    pub wave: Option<u32>,
}

/// Encoded record manifests by the indices of the Secrets they keep as digests.
type RecordedManifests = HashMap<Vec<usize>, Result<EncodedManifests, crate::release::EncodeError>>;

/// Everything a deploy needs, validated before any cluster is touched.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: Config,
    pub manifests: ManifestSet,
    pub commit: Option<CommitInfo>,
    pub options: DeployOptions,
    /// A snapshot of the environment (kubeconfig_env variables, KUBECONFIG, HOME).
    pub env: HashMap<String, String>,
    /// The manifests as release records store them: encoded once per set of Secrets kept as
    /// digests (`history.secrets`), shared by every target with that set.
    recorded: Arc<Mutex<RecordedManifests>>,
    /// What every script stage run shares: the secret scrubber, the environment.
    pub scripts: crate::stages::Shared,
}

impl Plan {
    pub fn new(
        config: Config,
        manifests: ManifestSet,
        commit: Option<CommitInfo>,
        options: DeployOptions,
        env: HashMap<String, String>,
    ) -> Plan {
        let scripts = crate::stages::Shared {
            scrubber: crate::report::redact::Scrubber::from_objects(
                manifests.objects.iter().map(|o| &o.body),
            ),
            inherited: env.clone(),
            // Other targets' credentials must not reach a target's scripts.
            hidden: config
                .targets
                .iter()
                .filter_map(|t| t.kubeconfig_env.clone())
                .collect(),
        };
        Plan {
            config,
            manifests,
            commit,
            options,
            env,
            recorded: Arc::default(),
            scripts,
        }
    }

    /// The manifests encoded for the release records of a target whose records live in
    /// `history_namespace` and whose objects without a namespace go to `default_namespace`.
    pub fn recorded_manifests(
        &self,
        history_namespace: &str,
        default_namespace: &str,
    ) -> Result<EncodedManifests, ReleaseError> {
        let bodies: Vec<&serde_json::Value> =
            self.manifests.objects.iter().map(|o| &o.body).collect();
        let others = other_namespace_secrets(&bodies, history_namespace, default_namespace);
        let mut cache = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .entry(others.clone())
            .or_insert_with(|| {
                EncodedManifests::encode_for_history(
                    &bodies,
                    &others,
                    self.config.history.secrets,
                    default_namespace,
                )
            })
            .clone()
            .map_err(ReleaseError::Encode)
    }

    pub fn env(&self, key: &str) -> Option<String> {
        self.env.get(key).cloned()
    }
}
