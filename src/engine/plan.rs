//! The plan: everything a deploy needs (config, manifests in apply order, commit, flags, a
//! snapshot of the environment), validated before any cluster is touched.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::apply::{FLEET_IN_FLIGHT, Resolution, field_manager, in_flight_per_target};
use crate::cluster::connect::ClusterAccess;
use crate::cluster::diff::{DiffOptions, plan_resolved};
use crate::config::Config;
use crate::manifests::ManifestSet;
use crate::release::{EncodedManifests, ReleaseError, ReleaseOrigin, other_namespace_secrets};
use crate::report::plan::TargetPlan;
use crate::util::git::CommitInfo;
use crate::util::in_order::Window;

/// Options of a deploy that come from flags, not from the config file.
#[derive(Debug, Clone, Default)]
pub struct DeployOptions {
    pub force_conflicts: bool,
    pub dry_run: bool,
    /// `--force`: deploy (record, run every stage) even where nothing would change.
    pub force: bool,
    /// `prune: true` or `--prune`: a healthy target's dropped objects are deleted.
    pub prune: bool,
    /// `--kubeconfig`, for targets that name no kubeconfig of their own.
    pub cli_kubeconfig: Option<PathBuf>,
    /// `--wave N`: run wave N only. The config's targets are already those of wave N (the
    /// config refuses a wave no target is in, and a `--target` selection with none in it).
    pub wave: Option<u32>,
    /// `deploy --plan`: the saved plan to apply; its check replaces the preflight dry run.
    pub saved_plan: Option<Arc<crate::engine::saved_plan::PlanToApply>>,
}

/// Encoded record manifests by the target whose own manifests they are (none: the plan's
/// shared set) and the indices of the Secrets they keep as digests.
type RecordedManifests =
    HashMap<(Option<String>, Vec<usize>), Result<EncodedManifests, crate::release::EncodeError>>;

/// A target's own manifests and commit, in place of the plan's shared ones (a manual
/// rollback's: each target goes back to its own chosen release), and what its record says
/// it is.
#[derive(Debug, Clone)]
pub struct TargetManifests {
    pub manifests: ManifestSet,
    pub commit: Option<CommitInfo>,
    pub origin: ReleaseOrigin,
}

/// Everything a deploy needs, validated before any cluster is touched.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: Config,
    pub manifests: ManifestSet,
    pub commit: Option<CommitInfo>,
    pub options: DeployOptions,
    /// A snapshot of the environment (kubeconfig_env variables, KUBECONFIG, HOME).
    pub env: HashMap<String, String>,
    /// Targets with manifests of their own, by name; every other target applies `manifests`.
    per_target: HashMap<String, TargetManifests>,
    /// The manifests as release records store them: encoded once per set of Secrets kept as
    /// digests (`history.secrets`), shared by every target with that set.
    recorded: Arc<Mutex<RecordedManifests>>,
    /// What every script stage run shares: the secret scrubber, the environment.
    pub scripts: crate::stages::Shared,
    /// `config.concurrency` and why (set, or what the memory budget holds), for the report.
    pub concurrency: crate::report::ConcurrencyInfo,
    /// The kubeconfig files this run has read (the checks read them first): every target's
    /// connection reads through it.
    pub kubeconfigs: crate::cluster::connect::KubeconfigCache,
    /// The fleet's requests in flight ([`FLEET_IN_FLIGHT`] permits), shared by every
    /// target's applies, dry runs and reads of its objects.
    requests: Arc<Semaphore>,
}

impl Plan {
    /// Requests in flight per target: the share of the fleet's bound of the targets that
    /// run at once (`concurrency`, at most the number of targets), within that bound (a
    /// thousand targets at their least share would be four thousand).
    pub fn in_flight(&self) -> Window {
        Window {
            limit: in_flight_per_target(self.config.concurrency.min(self.config.targets.len())),
            shared: Some(self.requests.clone()),
        }
    }

    pub fn new(
        mut config: Config,
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
        // Unless someone set it, the concurrency is what the memory budget holds for this app.
        let concurrency =
            super::budget::choose(&super::budget::Source::of(&config), manifests.objects.len());
        config.concurrency = concurrency.value;
        Plan {
            config,
            manifests,
            commit,
            options,
            env,
            per_target: HashMap::new(),
            recorded: Arc::default(),
            scripts,
            concurrency,
            kubeconfigs: Default::default(),
            requests: Arc::new(Semaphore::new(FLEET_IN_FLIGHT)),
        }
    }

    /// The plan with the kubeconfigs its checks read (`check_targets`), so that connecting
    /// reads none of them again.
    pub fn with_kubeconfigs(
        mut self,
        kubeconfigs: crate::cluster::connect::KubeconfigCache,
    ) -> Plan {
        self.kubeconfigs = kubeconfigs;
        self
    }

    /// Gives `target` manifests of its own (their commit, and what its record says it is:
    /// `origin`): what it applies and records in place of the plan's. Their Secret values
    /// are scrubbed from every script's output.
    pub fn with_target_manifests(mut self, target: &str, own: TargetManifests) -> Plan {
        for object in &own.manifests.objects {
            self.scripts.scrubber.add_object(&object.body);
        }
        self.per_target.insert(target.to_string(), own);
        self
    }

    /// The plan as a manual rollback runs it through the coordinator: each target's own
    /// manifests re-applied as a new revision and nothing else. No failure policy (a failed
    /// rollback is never rolled back), forced (going back to what the cluster runs is still
    /// recorded), the apply stage only (the rollback commands run after it, by the command),
    /// and the rollout given the rollback's time (`rollback_timeout`), not a deploy's. One
    /// wave, no bake, no checks, and as many targets at once as any rollback
    /// ([`Plan::rollback_bound`]; every one at once, whatever the budget, was 290 MiB
    /// measured for 1,000 small targets, about 1 GB by the budget's own figures for 1,000
    /// of 100 objects). A signal leaves what it stopped (a
    /// rollback is not rolled back). No preflight dry run: the command showed the clusters'
    /// diff already, and a rollback goes on where it can.
    pub fn manual_rollback(mut self, rollback_timeout: std::time::Duration) -> Plan {
        let config = &mut self.config;
        config.on_failure = crate::config::FailurePolicy::None;
        config.on_cancel = crate::config::CancelPolicy::Leave;
        config.pipeline = vec![crate::config::PipelineStage::Apply];
        config.wait.timeout = rollback_timeout;
        config.wait.bake = std::time::Duration::ZERO;
        for target in &mut config.targets {
            target.wave = 0;
        }
        config.waves.clear();
        config.first_wave = 0;
        config.earlier_waves.clear();
        config.checks.clear();
        config.preflight = false;
        self.concurrency = self.rollback_bound();
        self.config.concurrency = self.concurrency.value;
        self.options.force = true;
        self.options.wave = None;
        self
    }

    /// How many rollbacks run at once, and why: what the memory budget holds for the largest
    /// manifests a target goes back to (every target of most fleets), never `concurrency`,
    /// which paces a rollout. A rollback re-applies as much as the deploy applied.
    pub fn rollback_bound(&self) -> crate::report::ConcurrencyInfo {
        let largest = self
            .per_target
            .values()
            .map(|own| own.manifests.objects.len())
            .chain([self.manifests.objects.len()])
            .max()
            .unwrap_or(0);
        let budget = super::budget::Source::Budget(self.config.memory_budget);
        super::budget::choose(&budget, largest)
    }

    /// What `target`'s record says it is: its own manifests' origin, else a deploy.
    pub fn origin_for(&self, target: &str) -> ReleaseOrigin {
        self.per_target
            .get(target)
            .map_or(ReleaseOrigin::Deploy, |own| own.origin)
    }

    /// The server's dry run of `target`'s set (the `dryRun=All` applies `diff` sends), as this
    /// deploy would apply it; true when cancelled. One builder for the dry run, the preflight
    /// and the no-op check, so the three ask the same question.
    pub async fn server_dry_run(
        &self,
        target: &str,
        access: &ClusterAccess,
        resolution: &Resolution,
        default_namespace: String,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> (TargetPlan, bool) {
        let options = self.dry_run_options(default_namespace, deadline, true);
        self.ask_dry_run(target, access, resolution, &options, cancel)
            .await
    }

    /// [`Plan::server_dry_run`] without reading the live objects or comparing (`compare`
    /// off): the same `dryRun=All` applies, one request per object, and the plan holds the
    /// server's refusals only (no changes, nothing seen). The preflight when nothing reads
    /// its answers beyond the refusals.
    pub async fn server_check(
        &self,
        target: &str,
        access: &ClusterAccess,
        resolution: &Resolution,
        default_namespace: String,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> (TargetPlan, bool) {
        let options = self.dry_run_options(default_namespace, deadline, false);
        self.ask_dry_run(target, access, resolution, &options, cancel)
            .await
    }

    fn dry_run_options(
        &self,
        default_namespace: String,
        deadline: Instant,
        compare: bool,
    ) -> DiffOptions {
        DiffOptions {
            default_namespace,
            force: self.options.force_conflicts,
            field_manager: field_manager(&self.config.app),
            in_flight: self.in_flight(),
            deadline,
            before_label: "live".into(),
            after_label: "dry run".into(),
            compare,
        }
    }

    async fn ask_dry_run(
        &self,
        target: &str,
        access: &ClusterAccess,
        resolution: &Resolution,
        options: &DiffOptions,
        cancel: &CancellationToken,
    ) -> (TargetPlan, bool) {
        plan_resolved(
            target,
            &access.client,
            &access.server,
            self.manifests_for(target),
            resolution,
            options,
            cancel,
        )
        .await
    }

    /// The manifests `target` applies: its own, else the plan's.
    pub fn manifests_for(&self, target: &str) -> &ManifestSet {
        self.per_target
            .get(target)
            .map_or(&self.manifests, |own| &own.manifests)
    }

    /// The commit `target`'s manifests come from: its own manifests', else the plan's.
    pub fn commit_for(&self, target: &str) -> Option<&CommitInfo> {
        match self.per_target.get(target) {
            Some(own) => own.commit.as_ref(),
            None => self.commit.as_ref(),
        }
    }

    /// The manifests encoded for the release records of `target`, whose records live in
    /// `history_namespace` and whose objects without a namespace go to `default_namespace`.
    pub fn recorded_manifests(
        &self,
        target: &str,
        history_namespace: &str,
        default_namespace: &str,
    ) -> Result<EncodedManifests, ReleaseError> {
        let bodies: Vec<&serde_json::Value> = self
            .manifests_for(target)
            .objects
            .iter()
            .map(|o| &o.body)
            .collect();
        let others = other_namespace_secrets(&bodies, history_namespace, default_namespace);
        // Targets applying the shared set share its encodings; one with its own set has its own.
        let owner = self
            .per_target
            .contains_key(target)
            .then(|| target.to_string());
        let mut cache = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .entry((owner, others.clone()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::parse(
            "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - {name: eu, context: a}\n  - {name: us, context: b}\npipeline:\n  - script: {name: migrate, run: ./migrate.sh}\n  - apply\n",
            std::path::Path::new("rollguard.yaml"),
            &crate::config::Overrides::default(),
            &|_| None,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn set(name: &str) -> ManifestSet {
        crate::engine::reapply::manifest_set_from_bodies(
            &[serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"k": "v"}
            })],
            "test",
        )
    }

    fn commit(sha: &str) -> CommitInfo {
        CommitInfo {
            sha: sha.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_targets_that_run_at_once_share_the_requests_in_flight() {
        // (targets in the config, concurrency, requests in flight per target)
        for (targets, concurrency, want) in [
            (2, 1, 32),
            (2, 2, 32),
            (50, 50, 5),
            (50, 8, 32),
            (1000, 910, 4),
        ] {
            let mut config = config();
            let first = config.targets[0].clone();
            config.targets = (0..targets)
                .map(|i| crate::config::TargetConfig {
                    name: format!("t{i}"),
                    ..first.clone()
                })
                .collect();
            config.concurrency = concurrency;
            // Set, as by --concurrency: else the memory budget decides it.
            config.concurrency_set_by = Some("--concurrency".into());
            let plan = Plan::new(
                config,
                set("x"),
                None,
                DeployOptions::default(),
                HashMap::new(),
            );
            assert_eq!(
                plan.in_flight().limit,
                want,
                "{targets} targets, concurrency {concurrency}"
            );
            // Every target's window holds permits of one pool: the fleet's bound.
            let (a, b) = (plan.in_flight().shared, plan.in_flight().shared);
            let (Some(a), Some(b)) = (a, b) else {
                panic!("a plan's window has the fleet's pool");
            };
            assert!(Arc::ptr_eq(&a, &b));
            assert_eq!(
                a.available_permits(),
                crate::cluster::apply::FLEET_IN_FLIGHT
            );
        }
    }

    #[test]
    fn a_manual_rollback_applies_only_forced_within_its_own_time_and_never_rolls_back() {
        let deploy = Plan::new(
            config(),
            set("shared"),
            None,
            DeployOptions::default(),
            HashMap::new(),
        );
        assert_ne!(deploy.config.on_failure, crate::config::FailurePolicy::None);
        assert!(!deploy.options.force);
        assert_eq!(deploy.config.pipeline.len(), 2);
        let timeout = std::time::Duration::from_secs(7);
        assert_ne!(deploy.config.wait.timeout, timeout);
        let rollback = deploy.manual_rollback(timeout);
        assert_eq!(
            rollback.config.on_failure,
            crate::config::FailurePolicy::None
        );
        assert!(rollback.options.force);
        assert_eq!(rollback.config.wait.timeout, timeout);
        assert!(matches!(
            rollback.config.pipeline.as_slice(),
            [crate::config::PipelineStage::Apply]
        ));
        // One wave, as many at once as the memory budget holds (below).
        assert!(rollback.config.targets.iter().all(|t| t.wave == 0));
        assert_eq!(rollback.config.concurrency, rollback.concurrency.value);
        assert_eq!(
            rollback.config.on_cancel,
            crate::config::CancelPolicy::Leave
        );
    }

    /// A manual rollback keeps to what the memory budget holds for the largest target's
    /// manifests (each target goes back to its own), whatever `concurrency` says.
    #[test]
    fn a_manual_rollback_keeps_to_the_memory_budget() {
        use crate::engine::budget::{Source, choose};
        let own = |objects: usize| TargetManifests {
            manifests: crate::engine::reapply::manifest_set_from_bodies(
                &(0..objects)
                    .map(|i| {
                        serde_json::json!({
                            "apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("c{i}")}, "data": {"k": "v"}
                        })
                    })
                    .collect::<Vec<_>>(),
                "test",
            ),
            commit: None,
            origin: ReleaseOrigin::Deploy,
        };
        let manual = |config: Config| {
            let empty = ManifestSet {
                objects: Vec::new(),
            };
            Plan::new(
                config,
                empty,
                None,
                DeployOptions::default(),
                HashMap::new(),
            )
            .with_target_manifests("eu", own(1))
            .with_target_manifests("us", own(300))
            .manual_rollback(std::time::Duration::from_secs(7))
        };
        let budget = manual(config());
        let want = choose(&Source::Budget(config().memory_budget), 300);
        // The largest target's, not the first's nor the shared set's (empty).
        assert!(want.value < choose(&Source::Budget(config().memory_budget), 1).value);
        assert_eq!(budget.concurrency, want);
        assert_eq!(budget.config.concurrency, want.value);
        assert!(
            budget
                .concurrency
                .reason
                .ends_with("per target of 300 objects)"),
            "{}",
            budget.concurrency.reason
        );
        let mut paced = config();
        paced.concurrency = 1;
        paced.concurrency_set_by = Some("rollguard.yaml:9".into());
        assert_eq!(manual(paced).concurrency, want);
        let mut small = config();
        small.memory_budget = 1024 * 1024;
        assert_eq!(manual(small).config.concurrency, 1);
    }

    #[test]
    fn a_target_with_manifests_of_its_own_applies_and_records_those() {
        let plan = Plan::new(
            config(),
            set("shared"),
            Some(commit("aaaa")),
            DeployOptions::default(),
            HashMap::new(),
        )
        .with_target_manifests(
            "eu",
            TargetManifests {
                manifests: set("own"),
                commit: Some(commit("bbbb")),
                origin: ReleaseOrigin::ManualRollback { to: 3 },
            },
        );
        let name = |target: &str| plan.manifests_for(target).objects[0].name.clone();
        assert_eq!(name("eu"), "own");
        assert_eq!(name("us"), "shared");
        assert_eq!(plan.commit_for("eu").map(|c| c.sha.as_str()), Some("bbbb"));
        assert_eq!(plan.commit_for("us").map(|c| c.sha.as_str()), Some("aaaa"));
        assert_eq!(
            plan.origin_for("eu"),
            ReleaseOrigin::ManualRollback { to: 3 }
        );
        assert_eq!(plan.origin_for("us"), ReleaseOrigin::Deploy);
        // The encodings are cached per owner: eu's are not us's, though asked the same way.
        let digest = |target: &str| {
            plan.recorded_manifests(target, "shop", "shop")
                .map(|m| m.digest)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let (eu, us) = (digest("eu"), digest("us"));
        assert_ne!(eu, us);
        assert_eq!(digest("eu"), eu);
        assert_eq!(digest("us"), us);
    }
}
