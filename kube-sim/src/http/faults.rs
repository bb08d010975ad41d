//! Faults a test can switch on per cluster, and request counters per verb and resource.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Faults that apply to requests under /api and /apis (never to /_sim).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Added to every request before it is answered.
    pub latency_ms: u64,
    /// Share of requests (0.0 to 1.0) answered with `error_status` instead.
    pub error_rate: f64,
    /// 500, 503 or 429 (any 4xx/5xx is accepted); 0 means 503.
    pub error_status: u16,
    /// Retry-After seconds sent with 429 (and 503) errors.
    pub retry_after_seconds: u64,
    /// Watch streams end after this many events.
    pub drop_watch_after_events: Option<u64>,
    /// Watch streams end after this many milliseconds.
    pub drop_watch_after_ms: Option<u64>,
    /// Share of writes (0.0 to 1.0) that are done and then answered with `error_status`, as
    /// when an answer is lost: tests that retried writes are idempotent. Not limited by
    /// `only_resources`.
    pub lost_answer_rate: f64,
    /// When not empty, latency and errors apply only to requests on these resources, named
    /// as the counters name them (`leases.coordination.k8s.io`, `secrets`, or a discovery
    /// path such as `/apis`): to stall one kind of call (a lock's renewals) while the rest
    /// of the API answers.
    pub only_resources: Vec<String>,
    /// When not empty, latency and errors apply only to requests of these verbs, named as
    /// the counters name them (`patch`, `get`): with a 403, a role without that verb.
    pub only_verbs: Vec<String>,
    /// Requests are accepted (TLS completed, request read) and never answered, as by a
    /// stalled server or a black-holing proxy. They are not counted: nothing is done. Not
    /// limited by `only_resources`.
    pub never_answer: bool,
    /// The real server's `--max-requests-inflight` (non-mutating requests answered at once;
    /// 0: its default, 400). Beyond it a request is answered 429 with `Retry-After: 1`
    /// before it is handled, as the real max-in-flight filter does; watches are exempt.
    pub max_requests_inflight: u32,
    /// `--max-mutating-requests-inflight` (0: its default, 200).
    pub max_mutating_requests_inflight: u32,
    /// Discovery as a server without aggregated discovery answers it (before v1.26, or with
    /// the feature off): `/api` and `/apis` in their legacy form whatever the Accept asks.
    pub legacy_discovery: bool,
}

/// The real kube-apiserver's defaults for the max-in-flight limits.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: u32 = 400;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: u32 = 200;

/// The verb a request throttled by the max-in-flight limit is counted under (never a write).
pub const THROTTLED: &str = "throttled";

impl Faults {
    /// The status used for injected errors.
    pub fn status(&self) -> u16 {
        match self.error_status {
            400..=599 => self.error_status,
            _ => 503,
        }
    }

    /// Whether latency and errors apply to a request of `verb` on `resource` (None: not a
    /// resource).
    pub fn applies_to(&self, request: Option<(&str, &str)>) -> bool {
        let resource_ok = self.only_resources.is_empty()
            || request.is_some_and(|(_, r)| {
                // A discovery path ("/apis") is named whole; a resource without its
                // subresource.
                let base = match r.strip_prefix('/') {
                    Some(_) => r,
                    None => r.split('/').next().unwrap_or(r),
                };
                self.only_resources.iter().any(|o| o == base)
            });
        let verb_ok = self.only_verbs.is_empty()
            || request.is_some_and(|(verb, _)| self.only_verbs.iter().any(|v| v == verb));
        resource_ok && verb_ok
    }

    /// Whether the answer to this write is replaced by an error (drawing a random number).
    pub fn roll_lost_answer(&self) -> bool {
        self.lost_answer_rate > 0.0 && rand::random::<f64>() < self.lost_answer_rate
    }

    /// The in-flight limit for a request: mutating or not.
    pub fn in_flight_limit(&self, mutating: bool) -> u32 {
        match (
            mutating,
            self.max_requests_inflight,
            self.max_mutating_requests_inflight,
        ) {
            (false, 0, _) => DEFAULT_MAX_REQUESTS_INFLIGHT,
            (false, n, _) => n,
            (true, _, 0) => DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            (true, _, n) => n,
        }
    }

    /// Whether this request should fail (drawing a random number).
    pub fn roll_error(&self) -> bool {
        self.error_rate > 0.0 && rand::random::<f64>() < self.error_rate
    }
}

/// One counter: a verb on a resource (`deployments.apps`, `pods/status`), dry-run or not.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CounterKey {
    pub verb: String,
    pub resource: String,
    pub dry_run: bool,
}

/// One kind of call as RBAC sees it: a verb on a resource (with its subresource, `pods/log`)
/// in a namespace (None: cluster-scoped, or across all namespaces), dry-run or not.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AccessKey {
    pub verb: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub dry_run: bool,
}

/// Verbs that change stored state.
pub const WRITE_VERBS: [&str; 7] = [
    "create",
    "update",
    "patch",
    "apply",
    "delete",
    "deletecollection",
    "update-status",
];

/// A snapshot of request counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub counts: BTreeMap<CounterKey, u64>,
}

impl Counters {
    /// Requests of one verb on one resource (dry runs not included).
    pub fn get(&self, verb: &str, resource: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == resource && !k.dry_run)
            .map(|(_, v)| v)
            .sum()
    }

    /// Requests of one verb on any resource (dry runs not included).
    pub fn verb(&self, verb: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.verb == verb && !k.dry_run)
            .map(|(_, v)| v)
            .sum()
    }

    /// Write requests that could have changed something (dry runs not included).
    pub fn writes(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| !k.dry_run && WRITE_VERBS.contains(&k.verb.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    /// Dry-run write requests.
    pub fn dry_run_writes(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.dry_run)
            .map(|(_, v)| v)
            .sum()
    }

    /// All counted requests.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The JSON served at `GET /_sim/counters`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in &self.counts {
            let verb = if k.dry_run {
                format!("{}:dry-run", k.verb)
            } else {
                k.verb.clone()
            };
            *by_verb.entry(verb).or_default() += v;
        }
        let requests: Vec<serde_json::Value> = self
            .counts
            .iter()
            .map(|(k, v)| {
                serde_json::json!({"verb": k.verb, "resource": k.resource, "dry_run": k.dry_run, "count": v})
            })
            .collect();
        serde_json::json!({
            "total": self.total(),
            "writes": self.writes(),
            "dry_run_writes": self.dry_run_writes(),
            "by_verb": by_verb,
            "requests": requests,
        })
    }
}

/// Thread-safe request counting.
#[derive(Debug, Default)]
pub struct CounterSet {
    counts: Mutex<BTreeMap<CounterKey, u64>>,
    /// Every (verb, resource, namespace) seen, for tests of the least privilege a client
    /// needs. A set, not counts: a client's calls are few kinds, repeated.
    access: Mutex<BTreeSet<AccessKey>>,
}

impl CounterSet {
    /// Counts a request as [`CounterSet::record`] does, and notes its namespace.
    pub fn record_in(&self, verb: &str, resource: &str, namespace: Option<&str>, dry_run: bool) {
        self.record(verb, resource, dry_run);
        let mut access = self.access.lock().unwrap_or_else(|e| e.into_inner());
        let seen = access.iter().any(|k| {
            k.verb == verb
                && k.resource == resource
                && k.namespace.as_deref() == namespace
                && k.dry_run == dry_run
        });
        if !seen {
            access.insert(AccessKey {
                verb: verb.to_string(),
                resource: resource.to_string(),
                namespace: namespace.map(str::to_string),
                dry_run,
            });
        }
    }

    /// Every (verb, resource, namespace) requested since the start or the last reset.
    pub fn access(&self) -> BTreeSet<AccessKey> {
        self.access
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn record(&self, verb: &str, resource: &str, dry_run: bool) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        // Look up without allocating on the hot path.
        if let Some(n) = counts.iter_mut().find_map(|(k, n)| {
            (k.verb == verb && k.resource == resource && k.dry_run == dry_run).then_some(n)
        }) {
            *n += 1;
            return;
        }
        counts.insert(
            CounterKey {
                verb: verb.to_string(),
                resource: resource.to_string(),
                dry_run,
            },
            1,
        );
    }

    pub fn snapshot(&self) -> Counters {
        Counters {
            counts: self
                .counts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.access
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Connections accepted by one cluster and the HTTP version each spoke (read from its first
/// request: ALPN over TLS, the preface in plain HTTP), for the tests of connection reuse.
#[derive(Debug, Default)]
pub struct ConnectionCounter {
    accepted: AtomicU64,
    http1: AtomicU64,
    http2: AtomicU64,
}

/// A snapshot of [`ConnectionCounter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Connections {
    /// TCP connections accepted (TLS handshake or not).
    pub accepted: u64,
    /// Connections whose first request was HTTP/1.x.
    pub http1: u64,
    /// Connections whose first request was HTTP/2.
    pub http2: u64,
}

impl ConnectionCounter {
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// The first request of a connection came in this version.
    pub fn spoke(&self, version: hyper::Version) {
        let counter = if version == hyper::Version::HTTP_2 {
            &self.http2
        } else {
            &self.http1
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Connections {
        Connections {
            accepted: self.accepted.load(Ordering::Relaxed),
            http1: self.http1.load(Ordering::Relaxed),
            http2: self.http2.load(Ordering::Relaxed),
        }
    }

    pub fn reset(&self) {
        for counter in [&self.accepted, &self.http1, &self.http2] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_writes_and_dry_runs_apart() {
        let set = CounterSet::default();
        set.record("get", "deployments.apps", false);
        set.record("apply", "deployments.apps", false);
        set.record("apply", "deployments.apps", true);
        set.record("apply", "deployments.apps", false);
        let c = set.snapshot();
        assert_eq!(c.get("apply", "deployments.apps"), 2);
        assert_eq!(c.writes(), 2);
        assert_eq!(c.dry_run_writes(), 1);
        assert_eq!(c.total(), 4);
        assert_eq!(c.to_json()["by_verb"]["apply:dry-run"], 1);
        set.reset();
        assert_eq!(set.snapshot().total(), 0);
    }

    #[test]
    fn access_keeps_each_verb_resource_and_namespace_once() {
        let set = CounterSet::default();
        set.record_in("get", "secrets", Some("shop"), false);
        set.record_in("get", "secrets", Some("shop"), false);
        set.record_in("get", "secrets", Some("other"), false);
        set.record_in("create", "namespaces", None, false);
        let access = set.access();
        let seen: Vec<(&str, &str, Option<&str>)> = access
            .iter()
            .map(|k| (k.verb.as_str(), k.resource.as_str(), k.namespace.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("create", "namespaces", None),
                ("get", "secrets", Some("other")),
                ("get", "secrets", Some("shop")),
            ]
        );
        assert_eq!(set.snapshot().get("get", "secrets"), 3, "still counted");
        set.reset();
        assert!(set.access().is_empty());
    }

    #[test]
    fn counts_connections_by_the_version_they_spoke() {
        let c = ConnectionCounter::default();
        c.accepted();
        c.accepted();
        c.spoke(hyper::Version::HTTP_2);
        c.spoke(hyper::Version::HTTP_11);
        c.accepted();
        assert_eq!(
            c.snapshot(),
            Connections {
                accepted: 3,
                http1: 1,
                http2: 1
            }
        );
        c.reset();
        assert_eq!(c.snapshot(), Connections::default());
    }

    #[test]
    fn error_status_defaults_to_503() {
        assert_eq!(Faults::default().status(), 503);
        let f = Faults {
            error_status: 429,
            ..Faults::default()
        };
        assert_eq!(f.status(), 429);
        assert!(!Faults::default().roll_error());
    }

    #[test]
    fn faults_on_some_resources_only() {
        let all = Faults::default();
        assert!(all.applies_to(None) && all.applies_to(Some(("get", "secrets"))));
        let leases = Faults {
            only_resources: vec!["leases.coordination.k8s.io".into()],
            ..Faults::default()
        };
        let cases = [
            (Some(("get", "leases.coordination.k8s.io")), true),
            (Some(("update", "leases.coordination.k8s.io/status")), true),
            (Some(("get", "secrets")), false),
            (Some(("discovery", "/apis")), false),
            (None, false),
        ];
        for (request, want) in cases {
            assert_eq!(leases.applies_to(request), want, "{request:?}");
        }
        let apis = Faults {
            only_resources: vec!["/apis".into()],
            ..Faults::default()
        };
        let cases = [
            (Some(("discovery", "/apis")), true),
            (Some(("discovery", "/api")), false),
            (Some(("discovery", "/apis/apps/v1")), false),
            (Some(("get", "secrets")), false),
        ];
        for (request, want) in cases {
            assert_eq!(apis.applies_to(request), want, "{request:?}");
        }
        let secret_patches = Faults {
            only_resources: vec!["secrets".into()],
            only_verbs: vec!["patch".into()],
            ..Faults::default()
        };
        let cases = [
            (Some(("patch", "secrets")), true),
            (Some(("get", "secrets")), false),
            (Some(("patch", "configmaps")), false),
            (None, false),
        ];
        for (request, want) in cases {
            assert_eq!(secret_patches.applies_to(request), want, "{request:?}");
        }
    }
}
