//! What a cluster serves: its aggregated discovery (`/api` and `/apis`),
//! read into a [`Catalog`] of kinds. The clusters of a fleet mostly answer discovery byte
//! for byte alike (same version, same CRDs), so a catalog is built once per distinct answer
//! and shared: parsing the same 60 KB for each of 1,000 targets was 5 % of a deploy's CPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::core::discovery::v2::{APIGroupDiscovery, APIGroupDiscoveryList};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::cluster::retry::{RetryBudget, RetryError, with_retry};

mod documents;
use documents::DOCUMENTS;

/// A kind as a cluster serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedKind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// The kinds a cluster serves, by (group, version, kind).
#[derive(Debug, Default, PartialEq)]
pub struct Catalog {
    kinds: HashMap<(String, String, String), ServedKind>,
}

impl Catalog {
    /// How the cluster serves `kind` of `group`/`version` (`""` is the core group).
    pub fn resolve(&self, group: &str, version: &str, kind: &str) -> Option<&ServedKind> {
        // Keys are owned; a lookup builds one (three short strings, once per kind).
        self.kinds
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The first resource of a kind wins, as in kube's `resolve_gvk` (a group may list a
    /// kind twice, e.g. under a legacy plural).
    fn insert(&mut self, resource: ApiResource, namespaced: bool) {
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
        );
        self.kinds.entry(key).or_insert(ServedKind {
            resource,
            namespaced,
        });
    }

    /// From the aggregated documents' groups (resources without a kind are skipped).
    fn from_groups<'a>(groups: impl Iterator<Item = &'a APIGroupDiscovery>) -> Catalog {
        let mut catalog = Catalog::default();
        for group in groups {
            let name = group
                .metadata
                .as_ref()
                .and_then(|m| m.name.as_deref())
                .unwrap_or_default();
            for version in &group.versions {
                let version = version_resources(name, version);
                for (resource, namespaced) in version {
                    catalog.insert(resource, namespaced);
                }
            }
        }
        catalog
    }

    /// From kube's per-group discovery (servers without aggregated discovery).
    fn from_discovery(discovery: &Discovery) -> Catalog {
        let mut catalog = Catalog::default();
        for group in discovery.groups() {
            for version in group.versions() {
                for (resource, caps) in group.versioned_resources(version) {
                    catalog.insert(resource, caps.scope == Scope::Namespaced);
                }
            }
        }
        catalog
    }
}

/// One version's resources as (resource, namespaced), as kube reads them.
fn version_resources(
    group: &str,
    version: &kube::core::discovery::v2::APIVersionDiscovery,
) -> Vec<(ApiResource, bool)> {
    let name = version.version.clone().unwrap_or_default();
    let api_version = if group.is_empty() {
        name.clone()
    } else {
        format!("{group}/{name}")
    };
    version
        .resources
        .iter()
        .filter_map(|res| {
            let kind = res.response_kind.as_ref()?.kind.clone()?;
            let resource = ApiResource {
                group: group.to_string(),
                version: name.clone(),
                api_version: api_version.clone(),
                kind,
                plural: res.resource.clone().unwrap_or_default(),
            };
            Some((resource, res.scope.as_deref() == Some("Namespaced")))
        })
        .collect()
}

/// The two aggregated documents, as the server sent them: the cache's key.
type Answer = (String, String);

/// Catalogs of the distinct answers seen, newest last. Few fleets have more than a handful
/// of distinct clusters; past the bound the oldest is dropped (its catalog is then built
/// again, never a wrong one: the key is the whole answer).
struct Catalogs {
    kept: Mutex<Vec<(Answer, Arc<Catalog>)>>,
}

const KEPT: usize = 8;

/// One cache for the process: its entries are pure functions of their keys, so every run
/// and target may share them.
static CATALOGS: Catalogs = Catalogs::new();

impl Catalogs {
    const fn new() -> Catalogs {
        Catalogs {
            kept: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Answer, Arc<Catalog>)>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The catalog of an answer, built once per distinct answer; a failed build is not kept.
    fn get_or_build<E>(
        &self,
        answer: Answer,
        build: impl FnOnce(&Answer) -> Result<Catalog, E>,
    ) -> Result<Arc<Catalog>, E> {
        if let Some((_, found)) = self.lock().iter().find(|(a, _)| *a == answer) {
            return Ok(found.clone());
        }
        // Built outside the lock: two targets may each build the same catalog at the start,
        // which is cheaper than making every other target wait.
        let catalog = Arc::new(build(&answer)?);
        let mut kept = self.lock();
        if !kept.iter().any(|(a, _)| *a == answer) {
            if kept.len() >= KEPT {
                kept.remove(0);
            }
            kept.push((answer, catalog.clone()));
        }
        Ok(catalog)
    }
}

/// Only the field that tells an aggregated answer from a legacy one (a server without
/// aggregated discovery answers the same request with an `APIGroupList` or `APIVersions`).
#[derive(Deserialize)]
struct Kind {
    #[serde(default)]
    kind: String,
}

fn is_aggregated(text: &str) -> bool {
    serde_json::from_str::<Kind>(text).is_ok_and(|k| k.kind == "APIGroupDiscoveryList")
}

/// Why an answer has no catalog: the server answered in the legacy form, or with documents
/// that do not parse. Either way per-group discovery follows.
#[derive(Debug)]
enum Unusable {
    Legacy,
    Unreadable(serde_json::Error),
}

/// Parses both documents into one catalog. Only an answer not seen before is parsed, so
/// only it is checked for the legacy form (each check reads a whole document).
fn parse_answer(answer: &Answer) -> Result<Catalog, Unusable> {
    if !(is_aggregated(&answer.0) && is_aggregated(&answer.1)) {
        return Err(Unusable::Legacy);
    }
    let core: APIGroupDiscoveryList =
        serde_json::from_str(&answer.0).map_err(Unusable::Unreadable)?;
    let apis: APIGroupDiscoveryList =
        serde_json::from_str(&answer.1).map_err(Unusable::Unreadable)?;
    // The core group first, as kube reads it; a kind is keyed by its group anyway.
    Ok(Catalog::from_groups(core.items.iter().chain(&apis.items)))
}

/// Discovery, retried within the budget: aggregated (two requests), falling
/// back to per-group discovery of `groups` for servers without it.
pub async fn discover(
    client: &Client,
    groups: &[String],
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<Arc<Catalog>, RetryError> {
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    // The core document an earlier attempt read: a retry asks only for what failed, so
    // that under a flaky server each attempt is one request that must pass, not two.
    let core = Mutex::new(None);
    with_retry("discovery", budget, cancel, || {
        discover_once(client, &groups, &core)
    })
    .await
}

async fn discover_once(
    client: &Client,
    groups: &[&str],
    core: &Mutex<Option<String>>,
) -> Result<Arc<Catalog>, kube::Error> {
    match aggregated_catalog(client, core).await {
        Ok(Some(catalog)) => return Ok(catalog),
        Ok(None) => {}
        Err(e) if falls_back(&e) => {
            tracing::debug!(error = %e, "aggregated discovery refused, using per-group discovery");
        }
        Err(e) => return Err(e),
    }
    let discovery = Discovery::new(client.clone()).filter(groups).run().await?;
    Ok(Arc::new(Catalog::from_discovery(&discovery)))
}

/// The catalog of the server's aggregated answer, or None when it has none (it answered in
/// the legacy form, or with documents that do not parse).
async fn aggregated_catalog(
    client: &Client,
    kept: &Mutex<Option<String>>,
) -> Result<Option<Arc<Catalog>>, kube::Error> {
    let known = kept.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // One after the other: asked at once before the first connection is up, the two would
    // open two connections where HTTP/2 needs one.
    let core = match known {
        Some(core) => core,
        None => {
            let core = aggregated(client, "/api").await?;
            *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(core.clone());
            core
        }
    };
    let apis = aggregated(client, "/apis").await?;
    match CATALOGS.get_or_build((core, apis), parse_answer) {
        Ok(catalog) => Ok(Some(catalog)),
        Err(Unusable::Legacy) => {
            tracing::debug!("aggregated discovery unavailable, using per-group discovery");
            Ok(None)
        }
        Err(Unusable::Unreadable(e)) => {
            tracing::debug!(error = %e, "aggregated discovery unreadable, using per-group discovery");
            Ok(None)
        }
    }
}

/// Whether an error of the aggregated requests means a server without aggregated discovery
/// (a proxy refusing the Accept, an old server's 404): not a transient error, which is the
/// retry's, nor a refused credential, which is the answer.
fn falls_back(e: &kube::Error) -> bool {
    let transient = matches!(
        crate::cluster::retry::classify(e),
        crate::cluster::retry::ErrorClass::Transient { .. }
    );
    let refused = matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403);
    !transient && !refused
}

/// One aggregated discovery document, as text (the fleet's copy when the server says it
/// has not changed).
async fn aggregated(client: &Client, path: &str) -> Result<String, kube::Error> {
    let fetched = DOCUMENTS.fetch(client, path).await?;
    if fetched.not_modified {
        tracing::debug!(
            path,
            "discovery document as another target's (304 Not Modified)"
        );
    }
    Ok(fetched.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(name: &str) -> Option<String> {
        let shared = crate::util::shared::shared_for_test("discovery recordings")?;
        let path = shared.join("apiserver-recordings").join(name);
        Some(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}")))
    }

    fn recorded_answer(apis: &str) -> Option<Answer> {
        Some((
            recording("01-discovery-api-aggregated.json")?,
            recording(apis)?,
        ))
    }

    /// A failed attempt that had read `/api` asks again only for `/apis`: under a server
    /// failing a share of requests, each attempt is one request that must pass, not two.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retry_asks_again_only_for_the_document_that_failed() {
        let cluster = crate::util::test_cluster::TestCluster::start().await;
        cluster.set_faults(kube_sim::Faults {
            error_rate: 1.0,
            // 500: no Retry-After, so every failed attempt counts against the three.
            error_status: 500,
            only_resources: vec!["/apis".into()],
            ..kube_sim::Faults::default()
        });
        cluster.reset_counters();
        let fast = std::time::Duration::from_millis(1);
        let budget = RetryBudget {
            max_attempts: Some(3),
            base_delay: fast,
            max_delay: fast,
            ..RetryBudget::until(tokio::time::Instant::now() + std::time::Duration::from_secs(10))
        };
        let cancel = CancellationToken::new();
        let failed = discover(&cluster.client(), &[], &budget, &cancel).await;
        assert!(failed.is_err(), "every /apis answered 500");
        let counted = cluster.counters();
        assert_eq!(counted.get("discovery", "/api"), 1, "{counted:?}");
        assert_eq!(counted.get("discovery", "/apis"), 3, "{counted:?}");
        cluster.set_faults(kube_sim::Faults::default());
        let catalog = discover(&cluster.client(), &[], &budget, &cancel)
            .await
            .expect("discovery once the server answers");
        assert!(catalog.resolve("apps", "v1", "Deployment").is_some());
    }

    /// Against a cluster, the catalog is the one kube's own reading of the same answer
    /// gives (aggregated), and the per-group fallback serves the same kinds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_catalog_is_what_kube_reads_from_the_same_server() {
        let cluster = crate::util::test_cluster::TestCluster::start().await;
        let client = cluster.client();
        let ours = aggregated_catalog(&client, &Mutex::new(None))
            .await
            .expect("discovery answers")
            .expect("kube-sim serves aggregated discovery");
        let kube_aggregated = Discovery::new(client.clone())
            .run_aggregated()
            .await
            .expect("kube's aggregated discovery");
        assert_eq!(*ours, Catalog::from_discovery(&kube_aggregated));
        let by_group = Discovery::new(client.clone())
            .run()
            .await
            .expect("kube's per-group discovery");
        let by_group = Catalog::from_discovery(&by_group);
        assert_eq!(ours.len(), by_group.len());
        for (key, served) in &ours.kinds {
            assert_eq!(by_group.kinds.get(key), Some(served), "{key:?}");
        }
    }

    /// The recorded v1.36 answers resolve the kinds with their plural, apiVersion and scope.
    #[test]
    fn the_recorded_answers_resolve_kinds_with_their_plural_version_and_scope() {
        let Some(answer) = recorded_answer("01-discovery-apis-aggregated.json") else {
            return;
        };
        let catalog = parse_answer(&answer).expect("the recordings parse");
        assert!(is_aggregated(&answer.0) && is_aggregated(&answer.1));
        let cases = [
            // (group, version, kind) -> Some((plural, api_version, namespaced))
            (("", "v1", "Pod"), Some(("pods", "v1", true))),
            (("", "v1", "Namespace"), Some(("namespaces", "v1", false))),
            (("", "v1", "Event"), Some(("events", "v1", true))),
            (
                ("events.k8s.io", "v1", "Event"),
                Some(("events", "events.k8s.io/v1", true)),
            ),
            (
                ("apps", "v1", "Deployment"),
                Some(("deployments", "apps/v1", true)),
            ),
            (
                ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
                Some(("clusterroles", "rbac.authorization.k8s.io/v1", false)),
            ),
            (("apps", "v1beta1", "Deployment"), None),
            (("apps", "v1", "Pod"), None),
            (("example.com", "v1", "Widget"), None),
        ];
        for ((group, version, kind), want) in cases {
            let got = catalog.resolve(group, version, kind).map(|s| {
                (
                    s.resource.plural.as_str(),
                    s.resource.api_version.as_str(),
                    s.namespaced,
                )
            });
            assert_eq!(got, want, "{group}/{version} {kind}");
            if let Some(served) = catalog.resolve(group, version, kind) {
                assert_eq!(
                    (
                        served.resource.group.as_str(),
                        served.resource.version.as_str()
                    ),
                    (group, version)
                );
            }
        }
        // Every listed kind resolves, to its own group, version and kind.
        let mut listed = 0;
        for doc in [&answer.0, &answer.1] {
            let list: APIGroupDiscoveryList = serde_json::from_str(doc).expect("parses");
            for group in &list.items {
                let name = group.metadata.as_ref().and_then(|m| m.name.clone());
                for version in &group.versions {
                    for (r, _) in version_resources(name.as_deref().unwrap_or_default(), version) {
                        let served = catalog.resolve(&r.group, &r.version, &r.kind);
                        let served = served.expect("every listed kind resolves");
                        assert_eq!(
                            (
                                &served.resource.group,
                                &served.resource.version,
                                &served.resource.kind
                            ),
                            (&r.group, &r.version, &r.kind)
                        );
                        listed += 1;
                    }
                }
            }
        }
        assert!(
            catalog.len() > 50 && catalog.len() <= listed,
            "{}",
            catalog.len()
        );
    }

    /// A CRD's kind appears in the answer after it is established (the recorded answer
    /// after a CRD), and that answer has a catalog of its own.
    #[test]
    fn another_answer_gets_its_own_catalog_and_the_same_answer_shares_one() {
        let (Some(before), Some(after)) = (
            recorded_answer("01-discovery-apis-aggregated.json"),
            recorded_answer("06-crd-discovery-apis-aggregated-after-crd.json"),
        ) else {
            return;
        };
        let catalogs = Catalogs::new();
        let builds = std::cell::Cell::new(0);
        let build = |a: &Answer| {
            builds.set(builds.get() + 1);
            parse_answer(a)
        };
        let first = catalogs
            .get_or_build(before.clone(), build)
            .expect("parses");
        let again = catalogs
            .get_or_build(before.clone(), build)
            .expect("parses");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same answer shares its catalog"
        );
        let later = catalogs.get_or_build(after.clone(), build).expect("parses");
        assert!(!Arc::ptr_eq(&first, &later));
        assert_eq!(builds.get(), 2);
        let unreadable = (before.0.clone(), "{".to_string());
        assert!(
            catalogs
                .get_or_build(unreadable.clone(), parse_answer)
                .is_err()
        );
        assert!(
            catalogs.lock().iter().all(|(a, _)| *a != unreadable),
            "a failed build is not kept"
        );
        let new_kinds: Vec<_> = later
            .kinds
            .keys()
            .filter(|k| !first.kinds.contains_key(*k))
            .collect();
        assert!(
            !new_kinds.is_empty(),
            "the CRD's kind is in the later answer"
        );
        assert!(
            new_kinds
                .iter()
                .all(|(g, _, _)| !g.is_empty() && g.contains('.')),
            "{new_kinds:?}"
        );
    }

    #[test]
    fn a_legacy_answer_is_not_taken_for_an_aggregated_one() {
        for (text, want) in [
            (r#"{"kind":"APIGroupDiscoveryList","items":[]}"#, true),
            (r#"{"kind":"APIGroupList","groups":[]}"#, false),
            (r#"{"kind":"APIVersions","versions":["v1"]}"#, false),
            ("not json", false),
            ("{}", false),
        ] {
            assert_eq!(is_aggregated(text), want, "{text}");
        }
        // The check is the build's: a legacy answer gets no catalog, and is not kept.
        let catalogs = Catalogs::new();
        let legacy_answer = (
            r#"{"kind":"APIVersions","versions":["v1"]}"#.to_string(),
            r#"{"kind":"APIGroupList","groups":[]}"#.to_string(),
        );
        assert!(matches!(
            catalogs.get_or_build(legacy_answer, parse_answer),
            Err(Unusable::Legacy)
        ));
        assert!(catalogs.lock().is_empty());
        let broken = r#"{"kind":"APIGroupDiscoveryList","items":5}"#.to_string();
        assert!(matches!(
            parse_answer(&(broken.clone(), broken)),
            Err(Unusable::Unreadable(_))
        ));
        let Some(legacy) = recording("01-discovery-apis-legacy.json") else {
            return;
        };
        assert!(!is_aggregated(&legacy));
    }

    #[test]
    fn only_a_refused_request_falls_back_to_per_group_discovery() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        for (code, want) in [
            (404, true),
            (406, true),
            (415, true),
            (401, false),
            (403, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(falls_back(&status(code)), want, "{code}");
        }
    }

    /// The cache keeps at most KEPT answers, and an evicted answer is built again.
    #[test]
    fn the_cache_is_bounded() {
        let catalogs = Catalogs::new();
        let answer = |i: usize| (format!("core {i}"), String::new());
        let empty = |_: &Answer| Ok::<_, std::convert::Infallible>(Catalog::default());
        let get = |i: usize| catalogs.get_or_build(answer(i), empty).expect("infallible");
        let first = get(0);
        let second = get(1);
        for i in 2..=KEPT {
            get(i);
        }
        assert_eq!(catalogs.lock().len(), KEPT);
        assert!(
            !Arc::ptr_eq(&first, &get(0)),
            "the oldest was dropped, and built again"
        );
        assert!(!Arc::ptr_eq(&second, &get(1)), "then the next oldest");
        assert!(Arc::ptr_eq(&get(0), &get(0)));
    }
}
