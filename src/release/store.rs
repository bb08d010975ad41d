//! The I/O of release records: [`ReleaseStore`] lists, reads, begins and finishes the records
//! of one app in one history namespace, and prunes them; the history namespace is created when
//! missing.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use crate::kube::retry::{RetryBudget, RetryError};
use crate::util::git::CommitInfo;

use super::codec::*;
use super::record::*;

/// What a new revision holds, given to [`ReleaseStore::begin`].
#[derive(Debug, Clone)]
pub struct ReleaseDraft {
    pub manifests: EncodedManifests,
    pub commit: Option<CommitInfo>,
    pub target: Option<String>,
    pub default_namespace: Option<String>,
    pub run: RunInfo,
}

impl ReleaseDraft {
    pub fn new(manifests: EncodedManifests) -> ReleaseDraft {
        ReleaseDraft {
            manifests,
            commit: None,
            target: None,
            default_namespace: None,
            run: RunInfo::default(),
        }
    }
}

/// Records of one app in one cluster's history namespace.
#[derive(Clone)]
pub struct ReleaseStore {
    client: Client,
    /// The API server's URL, for messages.
    server: String,
    app: String,
    namespace: String,
    keep: usize,
}

impl ReleaseStore {
    /// `keep`: history.keep (at most this many records stay; the last good one always stays).
    /// Errors name the server as "the API server"; [`ReleaseStore::for_access`] names it.
    pub fn new(client: Client, app: &str, namespace: &str, keep: usize) -> ReleaseStore {
        ReleaseStore {
            client,
            server: "the API server".to_string(),
            app: app.to_string(),
            namespace: namespace.to_string(),
            keep,
        }
    }

    /// The records on a connected target; errors name its server's URL.
    pub fn for_access(
        access: &crate::kube::connect::ClusterAccess,
        app: &str,
        namespace: &str,
        keep: usize,
    ) -> ReleaseStore {
        ReleaseStore {
            server: access.server.clone(),
            ..ReleaseStore::new(access.client.clone(), app, namespace, keep)
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn app(&self) -> &str {
        &self.app
    }

    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn kube_err(&self, action: impl Into<String>, source: kube::Error) -> ReleaseError {
        ReleaseError::Kube {
            action: action.into(),
            namespace: self.namespace.clone(),
            server: self.server.clone(),
            source: Box::new(source),
        }
    }

    fn selector(&self) -> String {
        format!("{LABEL_MANAGED_BY}=rollguard,{LABEL_APP}={}", self.app)
    }

    /// Every readable record, oldest first, without its manifests (read one with
    /// [`ReleaseStore::get`]). Unreadable ones are skipped with a warning (a corrupt record
    /// must not block deploys).
    pub async fn list(&self) -> Result<Vec<ReleaseRecord>> {
        let lp = ListParams::default().labels(&self.selector());
        let list = match self.api().list(&lp).await {
            Ok(list) => list,
            // No namespace yet means no history yet.
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(self.kube_err("listing release records", e)),
        };
        let mut out = Vec::new();
        for secret in list.items {
            match self.decode_secret(&secret, false) {
                Ok(record) => out.push(record),
                Err(e) => tracing::warn!("{e}; skipping it"),
            }
        }
        out.sort_by_key(|r| r.revision);
        Ok(out)
    }

    fn decode_secret(&self, secret: &Secret, with_manifests: bool) -> Result<ReleaseRecord> {
        let empty = BTreeMap::new();
        record_from_data(secret.data.as_ref().unwrap_or(&empty), with_manifests).map_err(|reason| {
            ReleaseError::Corrupt {
                name: secret.metadata.name.clone().unwrap_or_default(),
                namespace: self.namespace.clone(),
                reason,
            }
        })
    }

    /// The record of one revision, with its manifests.
    pub async fn get(&self, revision: u64) -> Result<ReleaseRecord> {
        let secret = self.get_secret(revision).await?;
        self.decode_secret(&secret, true)
    }

    async fn get_secret(&self, revision: u64) -> Result<Secret> {
        let name = secret_name(&self.app, revision);
        let not_found = || ReleaseError::NotFound {
            app: self.app.clone(),
            namespace: self.namespace.clone(),
            revision,
        };
        match self.api().get_opt(&name).await {
            Ok(Some(secret)) => Ok(secret),
            Ok(None) => Err(not_found()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Err(not_found()),
            Err(e) => Err(self.kube_err(format!("reading release record {name}"), e)),
        }
    }

    /// The newest `deployed` record, with its manifests.
    pub async fn last_good(&self) -> Result<Option<ReleaseRecord>> {
        let records = self.list().await?;
        match last_good(&records) {
            Some(good) => self.get(good.revision).await.map(Some),
            None => Ok(None),
        }
    }

    /// Write a new `pending` record at the next revision (creating the history namespace
    /// if missing). Call with the lock held.
    pub async fn begin(&self, draft: ReleaseDraft, origin: ReleaseOrigin) -> Result<ReleaseRecord> {
        ensure_namespace(&self.client, &self.server, &self.namespace).await?;
        let existing = self.list().await?;
        self.begin_after(draft, origin, &existing).await
    }

    /// [`ReleaseStore::begin`] for a caller that just listed the records (and holds the lock,
    /// so the namespace exists): saves two requests. The record returned has no manifests.
    pub async fn begin_after(
        &self,
        draft: ReleaseDraft,
        origin: ReleaseOrigin,
        existing: &[ReleaseRecord],
    ) -> Result<ReleaseRecord> {
        let revisions: Vec<u64> = existing.iter().map(|r| r.revision).collect();
        let mut revision = next_revision(&revisions);
        let ReleaseDraft {
            manifests,
            commit,
            target,
            default_namespace,
            run,
        } = draft;
        let mut record = ReleaseRecord {
            app: self.app.clone(),
            target,
            revision,
            status: ReleaseStatus::Pending,
            reason: None,
            kind: origin.kind(),
            rollback_of: origin.rollback_of(),
            commit,
            started_at: Timestamp::now(),
            finished_at: None,
            run,
            digest: Some(release_digest(
                &manifests.digest,
                default_namespace.as_deref(),
            )),
            default_namespace,
            objects: manifests.objects,
            manifests: None,
            manifests_omitted: false,
            stages: Vec::new(),
        };
        // A name taken despite the lock (e.g. an unreadable record) moves to the next number.
        for _ in 0..5 {
            record.revision = revision;
            let secret = self.to_secret(&mut record, None, Some(manifests.gz.to_vec()))?;
            match self.api().create(&PostParams::default(), &secret).await {
                Ok(_) => return Ok(record),
                Err(kube::Error::Api(status)) if status.is_already_exists() => revision += 1,
                Err(e) => {
                    return Err(self.kube_err(
                        format!("creating release record {}", record.secret_name()),
                        e,
                    ));
                }
            }
        }
        Err(ReleaseError::Encode(format!(
            "no free revision number after v{revision} for app {}",
            self.app
        )))
    }

    /// Build the Secret for a record, on top of `base` (whose manifests it keeps unless new
    /// ones are given); sets `manifests_omitted` when they had to be left out.
    fn to_secret(
        &self,
        record: &mut ReleaseRecord,
        base: Option<&Secret>,
        manifests: Option<Vec<u8>>,
    ) -> Result<Secret> {
        let manifests = manifests.or_else(|| {
            base.and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(MANIFESTS_KEY))
                .map(|b| b.0.clone())
        });
        let (data, omitted) = secret_data(record, manifests)?;
        if omitted {
            tracing::warn!(
                "release record v{} of {} is over the Secret size limit: keeping the commit only",
                record.revision,
                self.app
            );
            record.manifests_omitted = true;
        }
        let labels = BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), "rollguard".to_string()),
            (LABEL_APP.to_string(), self.app.clone()),
            (LABEL_REVISION.to_string(), record.revision.to_string()),
            (LABEL_STATUS.to_string(), record.status.as_str().to_string()),
        ]);
        let mut metadata = base.map(|s| s.metadata.clone()).unwrap_or_default();
        metadata.name = Some(record.secret_name());
        metadata.namespace = Some(self.namespace.clone());
        metadata.managed_fields = None;
        let mut all_labels = metadata.labels.take().unwrap_or_default();
        all_labels.extend(labels);
        metadata.labels = Some(all_labels);
        Ok(Secret {
            metadata,
            type_: Some(RECORD_TYPE.to_string()),
            data: Some(data),
            ..Secret::default()
        })
    }

    /// Change a record's status (and reason, finish time...) with a conditional PUT, retrying
    /// on a conflict with a fresh read. Statuses only move forward ([`transition_allowed`]):
    /// e.g. a record another run marked abandoned is not turned into `deployed`. The
    /// manifests are carried over as stored, never decoded.
    async fn update(
        &self,
        revision: u64,
        status: ReleaseStatus,
        change: impl Fn(&mut ReleaseRecord),
    ) -> Result<ReleaseRecord> {
        for _ in 0..5 {
            let secret = self.get_secret(revision).await?;
            // A record written before the manifests had their own key moves them there.
            let legacy = secret
                .data
                .as_ref()
                .is_none_or(|d| !d.contains_key(MANIFESTS_KEY));
            let mut record = self.decode_secret(&secret, legacy)?;
            let moved = match record.manifests.take() {
                Some(bodies) => Some(gzip_json(&bodies)?),
                None => None,
            };
            if !transition_allowed(record.status, status) {
                return Err(ReleaseError::Transition {
                    name: record.secret_name(),
                    namespace: self.namespace.clone(),
                    from: record.status,
                    to: status,
                });
            }
            record.status = status;
            change(&mut record);
            let updated = self.to_secret(&mut record, Some(&secret), moved)?;
            drop(secret);
            let name = record.secret_name();
            match self
                .api()
                .replace(&name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => return Ok(record),
                // Someone changed it between our read and write: read again.
                Err(kube::Error::Api(status)) if status.is_conflict() => {}
                Err(e) => {
                    return Err(self.kube_err(format!("updating release record {name}"), e));
                }
            }
        }
        Err(ReleaseError::Conflict {
            name: secret_name(&self.app, revision),
            namespace: self.namespace.clone(),
        })
    }

    /// Finish a revision: set its status (and reason) and end time. On `deployed`, older
    /// `deployed` records become `superseded`. Then the history is pruned to `keep`.
    pub async fn finish(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
    ) -> Result<ReleaseRecord> {
        self.finish_with_objects(revision, status, reason, None)
            .await
    }

    /// [`ReleaseStore::finish`], replacing the object list with what was really applied.
    pub async fn finish_with_objects(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
        objects: Option<Vec<ObjectRef>>,
    ) -> Result<ReleaseRecord> {
        self.finish_with_stages(revision, status, reason, objects, Vec::new())
            .await
    }

    /// [`ReleaseStore::finish_with_objects`], also recording the script stages that ran
    /// (their output is dropped: it belongs in the report, not in the cluster).
    pub async fn finish_with_stages(
        &self,
        revision: u64,
        status: ReleaseStatus,
        reason: Option<String>,
        objects: Option<Vec<ObjectRef>>,
        stages: Vec<crate::report::StageResult>,
    ) -> Result<ReleaseRecord> {
        let stages: Vec<_> = stages
            .into_iter()
            .map(|mut s| {
                s.output.clear();
                s
            })
            .collect();
        let record = self
            .update(revision, status, |r| {
                r.reason = reason.clone();
                r.finished_at = Some(Timestamp::now());
                if let Some(objects) = &objects {
                    r.objects = objects.clone();
                }
                if !stages.is_empty() {
                    r.stages = stages.clone();
                }
            })
            .await?;
        let mut statuses = self.statuses().await?;
        if status == ReleaseStatus::Deployed {
            for older in supersede_choice(&statuses, revision) {
                self.update(older, ReleaseStatus::Superseded, |_| {})
                    .await?;
                for entry in statuses.iter_mut().filter(|(r, _)| *r == older) {
                    entry.1 = ReleaseStatus::Superseded;
                }
            }
        }
        self.delete_revisions(&prune_choice(&statuses, self.keep))
            .await?;
        Ok(record)
    }

    async fn statuses(&self) -> Result<Vec<(u64, ReleaseStatus)>> {
        Ok(self
            .list()
            .await?
            .iter()
            .map(|r| (r.revision, r.status))
            .collect())
    }

    /// Delete the records beyond `keep` (see [`prune_choice`]). Returns what was deleted.
    pub async fn prune(&self) -> Result<Vec<u64>> {
        let doomed = prune_choice(&self.statuses().await?, self.keep);
        self.delete_revisions(&doomed).await?;
        Ok(doomed)
    }

    async fn delete_revisions(&self, doomed: &[u64]) -> Result<()> {
        for revision in doomed {
            let name = secret_name(&self.app, *revision);
            match self.api().delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(e) => return Err(self.kube_err(format!("pruning release record {name}"), e)),
            }
        }
        Ok(())
    }

    /// Mark records left `pending` by a run that died as `failed` (reason `abandoned`).
    /// Call with the lock held. Returns the revisions marked.
    pub async fn mark_abandoned(&self) -> Result<Vec<u64>> {
        let pending = abandoned_choice(&self.statuses().await?);
        for revision in &pending {
            self.update(*revision, ReleaseStatus::Failed, |r| {
                r.reason = Some(ABANDONED.to_string());
                if r.finished_at.is_none() {
                    r.finished_at = Some(Timestamp::now());
                }
            })
            .await?;
        }
        Ok(pending)
    }
}

/// How long creating the history namespace may take, retries included.
const NAMESPACE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Creates the history namespace when missing (kube's one namespace creation, with the
/// errors said as release errors).
pub async fn ensure_namespace(client: &Client, server: &str, namespace: &str) -> Result<()> {
    let budget = RetryBudget::until(tokio::time::Instant::now() + NAMESPACE_DEADLINE);
    // Nothing cancels a record's namespace: the run's cancel is handled around it.
    let never = tokio_util::sync::CancellationToken::new();
    crate::kube::apply::ensure_namespace(client, namespace, &budget, &never)
        .await
        .map_err(|(step, e)| {
            let action = format!("{step} the history namespace");
            let namespace = namespace.to_string();
            match e {
                RetryError::Api(source) => ReleaseError::Kube {
                    action,
                    namespace,
                    server: server.to_string(),
                    source: Box::new(source),
                },
                RetryError::Cancelled => ReleaseError::Cancelled { action, namespace },
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::test_cluster::TestCluster;
    use ReleaseStatus::*;
    use serde_json::json;

    const SECRETS: &str = "/api/v1/namespaces/shop/secrets";

    fn draft(image: &str) -> ReleaseDraft {
        let bodies = [json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        })];
        let mut d = ReleaseDraft::new(EncodedManifests::encode(&bodies).unwrap());
        d.commit = Some(CommitInfo {
            sha: format!("sha-{image}"),
            r#ref: None,
            message: Some(format!("deploy {image}")),
        });
        d
    }

    async fn statuses(store: &ReleaseStore) -> Vec<(u64, ReleaseStatus)> {
        store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|r| (r.revision, r.status))
            .collect()
    }

    #[tokio::test]
    async fn lifecycle_supersede_prune_and_labels() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 3);
        assert!(
            store.list().await.unwrap().is_empty(),
            "no namespace: no history"
        );

        let r1 = store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r1.revision, 1);
        assert!(fake.has_namespace("shop"), "history namespace created");
        store.finish(1, Deployed, None).await.unwrap();

        let r2 = store
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r2.revision, 2);
        assert_eq!(store.last_good().await.unwrap().unwrap().revision, 1);
        // Lists carry no manifests; a status change kept v1's, which get() reads.
        assert!(
            store
                .list()
                .await
                .unwrap()
                .iter()
                .all(|r| r.manifests.is_none())
        );
        let v1 = store.get(1).await.unwrap().manifests.unwrap();
        assert_eq!(
            v1[0].pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("v1"))
        );
        store.finish(2, Deployed, None).await.unwrap();
        assert_eq!(statuses(&store).await, vec![(1, Superseded), (2, Deployed)]);

        // A failure, then its rollback to v2 as v4.
        store
            .begin(draft("bad"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        store
            .finish(3, Failed, Some("ImagePullBackOff".into()))
            .await
            .unwrap();
        let rb = store
            .begin(draft("v2"), ReleaseOrigin::Rollback { to: 2 })
            .await
            .unwrap();
        assert_eq!(
            (rb.revision, rb.rollback_of, rb.kind),
            (4, Some(2), ReleaseKind::Rollback)
        );
        store.finish(4, Deployed, None).await.unwrap();
        // keep 3: v1 pruned.
        assert_eq!(
            statuses(&store).await,
            vec![(2, Superseded), (3, Failed), (4, Deployed)]
        );
        assert_eq!(fake.names(SECRETS).len(), 3);

        let secret = fake.get(SECRETS, "rollguard.shop.v3").unwrap();
        assert_eq!(secret["type"], RECORD_TYPE);
        let labels = &secret["metadata"]["labels"];
        assert_eq!(labels[LABEL_STATUS], "failed");
        assert_eq!(labels[LABEL_REVISION], "3");
        assert_eq!(labels[LABEL_APP], "shop");
        assert_eq!(labels[LABEL_MANAGED_BY], "rollguard");

        let v3 = store.get(3).await.unwrap();
        assert_eq!(v3.reason.as_deref(), Some("ImagePullBackOff"));
        assert!(v3.finished_at.is_some());
        assert_eq!(v3.objects[0].to_string(), "Deployment shop/web");
        assert!(matches!(
            store.get(1).await,
            Err(ReleaseError::NotFound { revision: 1, .. })
        ));
    }

    #[tokio::test]
    async fn abandoned_records_are_marked_failed() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        store.finish(1, Deployed, None).await.unwrap();
        store
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        // The run died here. The next one:
        assert_eq!(store.mark_abandoned().await.unwrap(), vec![2]);
        let v2 = store.get(2).await.unwrap();
        assert_eq!((v2.status, v2.reason.as_deref()), (Failed, Some(ABANDONED)));
        assert_eq!(store.mark_abandoned().await.unwrap(), Vec::<u64>::new());
        assert_eq!(store.last_good().await.unwrap().unwrap().revision, 1);
    }

    #[tokio::test]
    async fn statuses_only_move_forward() {
        let fake = TestCluster::start().await;
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        // Another run marked it abandoned (our lease lapsed); we must not call it deployed.
        store.mark_abandoned().await.unwrap();
        let err = store.finish(1, Deployed, None).await.unwrap_err();
        assert!(matches!(err, ReleaseError::Transition { .. }), "{err}");
        assert_eq!(store.get(1).await.unwrap().status, Failed);
    }

    #[tokio::test]
    async fn other_apps_and_corrupt_records_are_ignored() {
        let fake = TestCluster::start().await;
        let shop = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        let blog = ReleaseStore::new(fake.client(), "blog", "shop", 10);
        shop.begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        blog.begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v7",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "rollguard.shop.v7", "namespace": "shop",
                                "labels": {LABEL_MANAGED_BY: "rollguard", LABEL_APP: "shop"}},
                   "data": {"release": "bm90IGd6aXA="}}),
        );
        let records = shop.list().await.unwrap();
        assert_eq!(
            records.len(),
            1,
            "blog's record and the corrupt one are not listed"
        );
        // The unreadable v7 is not counted (a collision with it would move on by one).
        let next = shop
            .begin(draft("v2"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(next.revision, 2);
    }

    #[tokio::test]
    async fn a_record_with_its_manifests_inside_keeps_them_and_moves_them_on_update() {
        use base64::Engine;
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        // As rollguard wrote records before the manifests had a key of their own.
        let inline = ReleaseRecord {
            manifests: Some(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "old"}})]),
            ..ReleaseRecord::for_test(1, Pending)
        };
        let bytes = gzip_json(&inline).unwrap();
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v1",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "rollguard.shop.v1", "namespace": "shop",
                                "labels": {LABEL_MANAGED_BY: "rollguard", LABEL_APP: "shop"}},
                   "data": {DATA_KEY: base64::engine::general_purpose::STANDARD.encode(&bytes)}}),
        );
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        assert_eq!(store.get(1).await.unwrap().manifests, inline.manifests);
        store.finish(1, Deployed, None).await.unwrap();
        let after = store.get(1).await.unwrap();
        assert_eq!(after.status, Deployed);
        assert_eq!(
            after.manifests, inline.manifests,
            "a status change lost them"
        );
    }

    #[tokio::test]
    async fn taken_name_moves_to_the_next_revision() {
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        fake.put_raw(
            SECRETS,
            "rollguard.shop.v1",
            json!({"metadata": {"name": "rollguard.shop.v1"}}),
        );
        let store = ReleaseStore::new(fake.client(), "shop", "shop", 10);
        let r = store
            .begin(draft("v1"), ReleaseOrigin::Deploy)
            .await
            .unwrap();
        assert_eq!(r.revision, 2);
    }
}
