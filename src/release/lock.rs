//! The deploy lock of one app on one target: a `coordination.k8s.io/v1` Lease.
//!
//! The Lease `rollguard-<app>` in the history namespace names its holder (CI run, host, pid)
//! and lapses when it has not been renewed for `leaseDurationSeconds` (30), so a killed CI
//! job never wedges later runs: a waiter takes it over once it has seen it unchanged for that
//! long. While held it is renewed in the
//! background with a conditional PUT (the resourceVersion makes a stale writer fail with 409).
//! The decision (create, take over, wait) is a pure function of the Lease and what this run
//! observed of it on its own monotonic clock: the holder's `renewTime` comes from another
//! machine's clock, so it is only compared for change, never with ours.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cluster::retry::{RetryBudget, RetryError, retry_call, with_retry};

/// Default `leaseDurationSeconds`.
pub const DEFAULT_LEASE_SECONDS: u64 = 30;
/// Environment knob for a shorter lease (tests, demos): whole seconds, at least 1.
/// (In config::env_vars::ENV_SETTINGS as `LEASE_SECONDS`, which the README lists.)
pub const LEASE_SECONDS_ENV: &str = "ROLLGUARD_LEASE_SECONDS";

/// Pause after losing a race for the Lease, before looking at it again.
const RACE_PAUSE: Duration = Duration::from_millis(50);

/// The Lease name of an app.
pub fn lease_name(app: &str) -> String {
    format!("rollguard-{app}")
}

/// Who holds the lock: the CI run when there is one, always host and pid (matrix jobs of one
/// run share the run id, so the pid keeps holders apart).
pub fn holder_identity(env: &dyn Fn(&str) -> Option<String>) -> String {
    let host = crate::release::host_name(env);
    let pid = std::process::id();
    match env("GITHUB_RUN_ID").filter(|s| !s.is_empty()) {
        Some(run) => {
            let attempt = env("GITHUB_RUN_ATTEMPT").unwrap_or_else(|| "1".to_string());
            let repo = env("GITHUB_REPOSITORY").unwrap_or_default();
            format!("{repo}#{run}.{attempt}@{host}:{pid}")
        }
        None => format!("{host}:{pid}"),
    }
}

#[derive(Debug, Clone)]
pub struct LockOptions {
    pub lease_duration: Duration,
    pub renew_every: Duration,
    /// How long to wait for another holder (lock.timeout, `--lock-timeout`).
    pub timeout: Duration,
    /// How often to look at a held Lease while waiting.
    pub poll: Duration,
}

impl LockOptions {
    pub fn new(timeout: Duration) -> LockOptions {
        LockOptions::with_lease(timeout, Duration::from_secs(DEFAULT_LEASE_SECONDS))
    }

    pub fn with_lease(timeout: Duration, lease_duration: Duration) -> LockOptions {
        let lease_duration = lease_duration.max(Duration::from_secs(1));
        LockOptions {
            lease_duration,
            // Three renewals per lease period tolerate two lost ones.
            renew_every: (lease_duration / 3).max(Duration::from_millis(300)),
            timeout,
            poll: Duration::from_millis(500),
        }
    }

    /// Like [`LockOptions::new`], with `ROLLGUARD_LEASE_SECONDS` honoured.
    pub fn from_env(timeout: Duration, env: &dyn Fn(&str) -> Option<String>) -> LockOptions {
        let seconds = env(LEASE_SECONDS_ENV)
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|s| *s >= 1)
            .unwrap_or(DEFAULT_LEASE_SECONDS);
        LockOptions::with_lease(timeout, Duration::from_secs(seconds))
    }
}

/// What the Lease says, in plain types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    pub holder: Option<String>,
    pub acquired_at: Option<Timestamp>,
    pub renewed_at: Option<Timestamp>,
    pub duration_seconds: i64,
    pub transitions: i32,
}

impl LeaseState {
    pub fn from_lease(lease: &Lease) -> LeaseState {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseState {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            acquired_at: spec.acquire_time.map(|t| t.0),
            renewed_at: spec.renew_time.map(|t| t.0),
            duration_seconds: i64::from(spec.lease_duration_seconds.unwrap_or(0)),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    /// When the Lease lapses without another renewal (None: no renew time, i.e. free).
    pub fn expires_at(&self) -> Option<Timestamp> {
        let renewed = self.renewed_at.or(self.acquired_at)?;
        renewed
            .checked_add(jiff::SignedDuration::from_secs(self.duration_seconds))
            .ok()
    }
}

/// What to do with the Lease as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it.
    Create,
    /// Free (released, or unchanged for its whole duration as this run watched it): take it
    /// over (`previous` = the lapsed holder, if any).
    TakeOver { previous: Option<String> },
    /// Ours already (e.g. a retried request): refresh it.
    Renew,
    /// Someone else holds it and it is alive.
    Wait {
        holder: String,
        since: Option<Timestamp>,
        /// When it lapses unless it changes first, on the waiter's monotonic clock.
        lapses_at: Duration,
    },
}

/// A Lease as a waiter last saw it, and since when (on the waiter's own monotonic clock,
/// an offset from when it began waiting) it has looked exactly like that. The holder's
/// `renewTime` is another machine's clock: it is compared for change, never with ours
/// (client-go's leader election keeps the same observedTime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub lease: LeaseState,
    pub since: Duration,
}

/// What the waiter knows after looking at `lease` at `now`: the same record keeps its first
/// sighting, any change (a renewal, a new holder) starts the count again.
pub fn observe(previous: Option<Observed>, lease: &LeaseState, now: Duration) -> Observed {
    match previous {
        Some(seen) if seen.lease == *lease => seen,
        _ => Observed {
            lease: lease.clone(),
            since: now,
        },
    }
}

/// The pure core of acquiring: given the Lease (if any), who we are, what this run has
/// observed of it and its monotonic `now`. Another holder's Lease is taken over only once
/// it has stayed unchanged for its whole duration (`fallback_duration` when it names none)
/// as this run watched it, whatever its timestamps say.
pub fn decide(
    lease: Option<&LeaseState>,
    me: &str,
    observed: Option<&Observed>,
    now: Duration,
    fallback_duration: Duration,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let Some(holder) = lease.holder.clone() else {
        return Decision::TakeOver { previous: None };
    };
    if holder == me {
        return Decision::Renew;
    }
    let duration = u64::try_from(lease.duration_seconds)
        .ok()
        .filter(|s| *s > 0)
        .map_or(fallback_duration, Duration::from_secs);
    let unchanged_since = observed
        .filter(|seen| seen.lease == *lease)
        .map_or(now, |seen| seen.since);
    let lapses_at = unchanged_since + duration;
    if now >= lapses_at {
        Decision::TakeOver {
            previous: Some(holder),
        }
    } else {
        Decision::Wait {
            holder,
            since: lease.acquired_at,
            lapses_at,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "lock {lease} in namespace {namespace} is held by {holder}{since}; gave up after waiting {waited}s. \
         If that run is gone, the lock lapses once it has not been renewed for {lease_seconds}s (as a waiting run sees it, whatever the holder's clock says); `rollguard unlock` releases it by force"
    )]
    Timeout {
        lease: String,
        namespace: String,
        holder: String,
        /// " since 2026-11-30T09:00:00Z" or empty.
        since: String,
        waited: u64,
        lease_seconds: i64,
    },
    #[error(
        "{action} (Lease {lease} in namespace {namespace}): {}",
        crate::cluster::connect::describe_error(source, server)
    )]
    Kube {
        action: String,
        lease: String,
        namespace: String,
        /// The API server's URL, for the message.
        server: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "targets {first} and {second} resolve to the same lock (Lease {lease} in namespace {namespace} on {server}): give them different namespaces or history.namespace, or drop one"
    )]
    SameLease {
        first: String,
        second: String,
        lease: String,
        namespace: String,
        server: String,
    },
    #[error(transparent)]
    Namespace(#[from] crate::release::ReleaseError),
}

/// A Lease's place in the one global order every run takes locks in: the cluster's server
/// (normalised, so `https://A:6443/` and `https://a:6443` are one) and the namespace.
pub fn lock_key(server: &str, namespace: &str) -> (String, String) {
    (
        server.trim().trim_end_matches('/').to_ascii_lowercase(),
        namespace.to_string(),
    )
}

/// The order to take the locks of `keys` in (indices into `keys`): sorted by key, ties by
/// position. Every run sorts the same way, so no two runs ever wait for each other in a
/// cycle: whichever holds the first contended Lease proceeds, the other waits holding only
/// Leases that come earlier, which the first never waits for.
pub fn lock_order(keys: &[(String, String)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|a, b| keys[*a].cmp(&keys[*b]).then(a.cmp(b)));
    order
}

/// Acquiring the lock.
pub struct Lock;

impl Lock {
    /// Take the lock of `app` in `namespace`, waiting up to `options.timeout` for another
    /// holder. Creates the namespace if missing. The guard renews the Lease until released.
    /// `server` (the API server's URL) is for messages.
    pub async fn acquire(
        client: Client,
        server: &str,
        app: &str,
        namespace: &str,
        holder: &str,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let taking = Taking {
            api: Api::namespaced(client.clone(), namespace),
            client,
            server,
            name: lease_name(app),
            namespace,
            holder,
            options,
        };
        // Most runs find no Lease: create it first and read only when that fails (one
        // request instead of two; an existing Lease answers AlreadyExists and the loop reads it).
        if let Some(guard) = taking.create_first().await? {
            return Ok(guard);
        }
        let started = tokio::time::Instant::now();
        let mut announced = false;
        let mut observed: Option<Observed> = None;
        // Every Lease call retries transient errors (the retry policy of retry.rs). A create
        // or replace whose answer was lost comes back as AlreadyExists or Conflict: the loop
        // then reads the Lease again and finds itself the holder (Decision::Renew).
        loop {
            let current = taking.read().await?;
            let state = current.as_ref().map(LeaseState::from_lease);
            let seen_at = started.elapsed();
            observed = state.as_ref().map(|s| observe(observed.take(), s, seen_at));
            let decision = decide(
                state.as_ref(),
                holder,
                observed.as_ref(),
                seen_at,
                options.lease_duration,
            );
            let taken = match decision {
                Decision::Create => taking.create().await?,
                Decision::TakeOver { .. } | Decision::Renew => {
                    let Some(current) = current else { continue };
                    taking.take_over(&current, state.as_ref()).await?
                }
                Decision::Wait {
                    holder: other,
                    since,
                    lapses_at,
                } => {
                    let waited = started.elapsed();
                    if waited >= options.timeout {
                        return Err(LockError::Timeout {
                            lease: taking.name.clone(),
                            namespace: namespace.to_string(),
                            holder: other,
                            since: since.map(|t| format!(" since {t:.0}")).unwrap_or_default(),
                            waited: waited.as_secs(),
                            lease_seconds: state.map(|s| s.duration_seconds).unwrap_or(0),
                        });
                    }
                    if !announced {
                        announced = true;
                        tracing::info!(
                            "lock {} in {namespace} is held by {other}; waiting up to {}s",
                            taking.name,
                            options.timeout.as_secs()
                        );
                    }
                    // Wake at the earliest of: next poll, the lease's lapse, our deadline.
                    let until_expiry = lapses_at.saturating_sub(waited) + Duration::from_millis(50);
                    let until_deadline = options.timeout.saturating_sub(waited);
                    tokio::time::sleep(options.poll.min(until_expiry).min(until_deadline)).await;
                    None
                }
            };
            if let Some(guard) = taken {
                return Ok(guard);
            }
        }
    }
}

/// What one create of the Lease found.
enum Posted {
    Held(Box<LockGuard>),
    Exists,
    /// The namespace is missing (a create in it answers NotFound).
    NoNamespace,
}

/// One attempt at the lock: the Lease, who asks for it, and how.
struct Taking<'a> {
    api: Api<Lease>,
    client: Client,
    server: &'a str,
    name: String,
    namespace: &'a str,
    holder: &'a str,
    options: &'a LockOptions,
}

impl Taking<'_> {
    fn error(&self, action: &str, e: kube::Error) -> LockError {
        LockError::Kube {
            action: action.to_string(),
            lease: self.name.clone(),
            namespace: self.namespace.to_string(),
            server: self.server.to_string(),
            source: Box::new(e),
        }
    }

    /// The Lease as it is now (None: there is none).
    async fn read(&self) -> Result<Option<Lease>, LockError> {
        let got = retry_call("read the lock", &RetryBudget::bookkeeping(), || {
            self.api.get_opt(&self.name)
        })
        .await;
        match got {
            Ok(lease) => Ok(lease),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
            Err(e) => Err(self.error("reading the lock", e)),
        }
    }

    /// Creates the Lease, held by us: the guard, or None to look again (another run created
    /// it first, or its namespace had to be created).
    async fn create(&self) -> Result<Option<LockGuard>, LockError> {
        match self.post().await? {
            Posted::Held(guard) => Ok(Some(*guard)),
            // Another run created it first: look again (not in a hot loop).
            Posted::Exists => {
                tokio::time::sleep(RACE_PAUSE).await;
                Ok(None)
            }
            Posted::NoNamespace => {
                self.create_namespace().await?;
                Ok(None)
            }
        }
    }

    /// The first attempt, made without reading: None when a Lease exists (the loop reads
    /// it and decides). A missing namespace is created and the Lease posted once more.
    async fn create_first(&self) -> Result<Option<LockGuard>, LockError> {
        let mut posted = self.post().await?;
        if matches!(posted, Posted::NoNamespace) {
            self.create_namespace().await?;
            posted = self.post().await?;
        }
        Ok(match posted {
            Posted::Held(guard) => Some(*guard),
            Posted::Exists | Posted::NoNamespace => None,
        })
    }

    async fn create_namespace(&self) -> Result<(), LockError> {
        crate::release::ensure_namespace(&self.client, self.server, self.namespace).await?;
        Ok(())
    }

    /// One create of the Lease, held by us.
    async fn post(&self) -> Result<Posted, LockError> {
        let (name, namespace, holder, options) =
            (&self.name, self.namespace, self.holder, self.options);
        let lease = new_lease(name, namespace, holder, options, Timestamp::now(), 0, None);
        let post = PostParams::default();
        let created = retry_call("create the lock", &RetryBudget::bookkeeping(), || {
            self.api.create(&post, &lease)
        })
        .await;
        match created {
            Ok(created) => Ok(Posted::Held(Box::new(LockGuard::start(
                self.api.clone(),
                self.server,
                created,
                holder,
                options,
                None,
            )))),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Posted::Exists),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Posted::NoNamespace),
            Err(e) => Err(self.error("creating the lock", e)),
        }
    }

    /// Replaces the `current` Lease (lapsed, or ours) with one held by us: the guard, or None
    /// to look again (someone else moved first).
    async fn take_over(
        &self,
        current: &Lease,
        state: Option<&LeaseState>,
    ) -> Result<Option<LockGuard>, LockError> {
        let (name, namespace, holder, options) =
            (&self.name, self.namespace, self.holder, self.options);
        let previous = state.and_then(|s| s.holder.clone());
        let transitions = state.map(|s| s.transitions).unwrap_or(0)
            + i32::from(previous.as_deref() != Some(holder));
        let lease = new_lease(
            name,
            namespace,
            holder,
            options,
            Timestamp::now(),
            transitions,
            Some(&current.metadata),
        );
        let post = PostParams::default();
        let replaced = retry_call("take over the lock", &RetryBudget::bookkeeping(), || {
            self.api.replace(name, &post, &lease)
        })
        .await;
        match replaced {
            Ok(taken) => {
                let lapsed = previous.filter(|p| p != holder);
                if let Some(p) = &lapsed {
                    tracing::warn!(
                        "lock {name} in {namespace}: took over the expired lease of {p}"
                    );
                }
                Ok(Some(LockGuard::start(
                    self.api.clone(),
                    self.server,
                    taken,
                    holder,
                    options,
                    lapsed,
                )))
            }
            // Someone else moved first: look again.
            Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
                tokio::time::sleep(RACE_PAUSE).await;
                Ok(None)
            }
            Err(e) => Err(self.error("taking over the lock", e)),
        }
    }
}

fn new_lease(
    name: &str,
    namespace: &str,
    holder: &str,
    options: &LockOptions,
    now: Timestamp,
    transitions: i32,
    base: Option<&ObjectMeta>,
) -> Lease {
    let mut metadata = base.cloned().unwrap_or_default();
    metadata.name = Some(name.to_string());
    metadata.namespace = Some(namespace.to_string());
    metadata.managed_fields = None;
    let mut labels = metadata.labels.take().unwrap_or_default();
    labels.insert(
        crate::release::LABEL_MANAGED_BY.to_string(),
        "rollguard".to_string(),
    );
    metadata.labels = Some(labels);
    Lease {
        metadata,
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(
                i32::try_from(options.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// A held lock. Renews in the background; call [`LockGuard::release`] when done. Dropping it
/// without release stops the renewals, so the Lease lapses after its duration.
pub struct LockGuard {
    api: Api<Lease>,
    /// The API server's URL, for messages.
    server: String,
    name: String,
    holder: String,
    lease: Arc<Mutex<Lease>>,
    renewer: Option<tokio::task::JoinHandle<()>>,
    lost: CancellationToken,
    lost_why: Arc<std::sync::Mutex<Option<String>>>,
    took_over_from: Option<String>,
}

/// How long releasing a lock dropped by a panic may take.
pub const PANIC_RELEASE_BUDGET: Duration = Duration::from_secs(3);

/// The releases of locks dropped by a panic, for the binary to wait for before it exits.
/// Process-wide on purpose: filled from `Drop` while a panic unwinds (no run context there)
/// and drained by main.rs after the run's future is gone.
static PANIC_RELEASES: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits (at most [`PANIC_RELEASE_BUDGET`]) for the releases of locks dropped by a panic.
pub async fn wait_for_panic_releases() {
    let handles = std::mem::take(&mut *PANIC_RELEASES.lock().unwrap_or_else(|p| p.into_inner()));
    let _ = tokio::time::timeout(PANIC_RELEASE_BUDGET, futures::future::join_all(handles)).await;
}

impl LockGuard {
    fn start(
        api: Api<Lease>,
        server: &str,
        lease: Lease,
        holder: &str,
        options: &LockOptions,
        took_over_from: Option<String>,
    ) -> LockGuard {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let shared = Arc::new(Mutex::new(lease));
        let lost = CancellationToken::new();
        let lost_why = Arc::new(std::sync::Mutex::new(None));
        // Renewal logs carry the caller's span (the target's name).
        let renewer = tokio::spawn(
            renew_loop(
                Renewal {
                    api: api.clone(),
                    name: name.clone(),
                    holder: holder.to_string(),
                    lease: shared.clone(),
                    every: options.renew_every,
                    lease_duration: options.lease_duration,
                },
                lost.clone(),
                lost_why.clone(),
            )
            .instrument(tracing::Span::current()),
        );
        LockGuard {
            api,
            server: server.to_string(),
            name,
            holder: holder.to_string(),
            lease: shared,
            renewer: Some(renewer),
            lost,
            lost_why,
            took_over_from,
        }
    }

    /// The holder whose expired lease was taken over, if this acquisition did that.
    pub fn took_over_from(&self) -> Option<&str> {
        self.took_over_from.as_deref()
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// True once the Lease is no longer ours: another holder took it, or no renewal
    /// succeeded for a whole lease duration (so another run may have taken it by now).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Fires when the lock is lost: whoever holds it must stop writing at once.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Why the lock was lost, naming the new holder when known.
    pub fn lost_reason(&self) -> Option<String> {
        if !self.is_lost() {
            return None;
        }
        self.lost_why
            .lock()
            .ok()
            .and_then(|why| why.clone())
            .or_else(|| Some(format!("lock {} was lost", self.name)))
    }

    /// Stop renewing and delete the Lease (only if it is still ours).
    pub async fn release(mut self) -> Result<(), LockError> {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
            let _ = renewer.await;
        }
        let lease = self.lease.lock().await.clone();
        let err = |action: &str, e: kube::Error| LockError::Kube {
            action: action.to_string(),
            lease: self.name.clone(),
            namespace: lease.metadata.namespace.clone().unwrap_or_default(),
            server: self.server.clone(),
            source: Box::new(e),
        };
        let budget = RetryBudget::bookkeeping();
        // The Lease as we last wrote it is still ours unless someone wrote it since: delete
        // exactly that version (one request). A conflict means it changed: read and look.
        // Only with a version: a take-over keeps the uid.
        if lease.metadata.resource_version.is_some() {
            let ours = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: lease.metadata.resource_version.clone(),
                    uid: lease.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            let deleted = retry_call("release the lock", &budget, || {
                self.api.delete(&self.name, &ours)
            })
            .await;
            match deleted {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
                Err(kube::Error::Api(s)) if s.is_conflict() => {}
                Err(e) => return Err(err("releasing the lock", e)),
            }
        }
        let found = retry_call("read the lock to release it", &budget, || {
            self.api.get_opt(&self.name)
        })
        .await;
        let current = match found {
            Ok(Some(current)) => current,
            Ok(None) => return Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
            Err(e) => return Err(err("reading the lock to release it", e)),
        };
        if LeaseState::from_lease(&current).holder.as_deref() != Some(self.holder.as_str()) {
            return Ok(());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: current.metadata.resource_version.clone(),
                uid: current.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        let deleted = retry_call("release the lock", &budget, || {
            self.api.delete(&self.name, &dp)
        })
        .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
            Err(e) => Err(err("releasing the lock", e)),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
        // Dropped by a panic's unwinding: release it anyway (best effort, bounded), so
        // that the next run does not wait out the lease.
        if std::thread::panicking()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let guard = LockGuard {
                api: self.api.clone(),
                server: self.server.clone(),
                name: self.name.clone(),
                holder: self.holder.clone(),
                lease: self.lease.clone(),
                renewer: None,
                lost: self.lost.clone(),
                lost_why: self.lost_why.clone(),
                took_over_from: None,
            };
            let release = async move {
                let _ = tokio::time::timeout(PANIC_RELEASE_BUDGET, guard.release()).await;
            };
            let handle = runtime.spawn(release);
            PANIC_RELEASES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(handle);
        }
    }
}

/// What the renewal task works on.
struct Renewal {
    api: Api<Lease>,
    name: String,
    holder: String,
    lease: Arc<Mutex<Lease>>,
    every: Duration,
    lease_duration: Duration,
}

/// Renews every `every`, each renewal retried (retry.rs) until the lease would lapse. The
/// lock counts as lost once another holder has it, or once a whole lease duration passed
/// since the last renewal the server confirmed: from then on another run may hold it, so
/// this run must not write (client-go's leader election gives up the same way).
async fn renew_loop(
    renewal: Renewal,
    lost: CancellationToken,
    lost_why: Arc<std::sync::Mutex<Option<String>>>,
) {
    let Renewal {
        api,
        name,
        holder,
        lease,
        every,
        lease_duration,
    } = renewal;
    let never = CancellationToken::new();
    let give_up = |why: String| {
        tracing::error!("{why}; stopping this target's writes");
        if let Ok(mut slot) = lost_why.lock() {
            *slot = Some(why);
        }
        lost.cancel();
    };
    // Counted from before the request that confirmed it, so the estimate errs early.
    let mut confirmed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let expires = confirmed + lease_duration;
        let mut next = lease.lock().await.clone();
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        next.metadata.managed_fields = None;
        let sent = tokio::time::Instant::now();
        let budget = RetryBudget {
            attempt_timeout: every.max(Duration::from_millis(200)),
            ..RetryBudget::until(expires)
        };
        let post = PostParams::default();
        let result = with_retry("renew the lock", &budget, &never, || {
            api.replace(&name, &post, &next)
        })
        .await;
        match result {
            Ok(renewed) => {
                *lease.lock().await = renewed;
                confirmed = sent;
            }
            Err(RetryError::Api(kube::Error::Api(s))) if s.is_conflict() || s.is_not_found() => {
                // Our copy is stale: if the Lease is still ours, continue from the fresh one.
                let fresh = with_retry(
                    "read the lock",
                    &RetryBudget::until(expires),
                    &never,
                    || api.get_opt(&name),
                )
                .await;
                match fresh {
                    Ok(Some(fresh))
                        if LeaseState::from_lease(&fresh).holder.as_deref()
                            == Some(holder.as_str()) =>
                    {
                        *lease.lock().await = fresh;
                    }
                    Ok(fresh) => {
                        let other = fresh
                            .as_ref()
                            .and_then(|l| LeaseState::from_lease(l).holder)
                            .unwrap_or_else(|| "nobody (it was deleted)".to_string());
                        give_up(format!("lock {name} was lost: it is now held by {other}"));
                        return;
                    }
                    Err(e) => tracing::warn!("lock {name}: could not re-read the lease: {e}"),
                }
            }
            Err(e) => tracing::warn!("lock {name}: renewal failed: {e}"),
        }
        if tokio::time::Instant::now() >= confirmed + lease_duration {
            give_up(format!(
                "lock {name} was lost: no renewal succeeded for its whole lease duration ({}s), so another run may hold it now",
                lease_duration.as_secs()
            ));
            return;
        }
    }
}

/// What `rollguard unlock` found and removed.
#[derive(Debug, Clone)]
pub struct Unlocked {
    pub namespace: String,
    pub lease: String,
    pub previous: Option<LeaseState>,
}

/// Delete the Lease whoever holds it (for humans: `rollguard unlock`).
pub async fn force_unlock(
    client: Client,
    server: &str,
    app: &str,
    namespace: &str,
) -> Result<Unlocked, LockError> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let name = lease_name(app);
    let err = |action: &str, e: kube::Error| LockError::Kube {
        action: action.to_string(),
        lease: name.clone(),
        namespace: namespace.to_string(),
        server: server.to_string(),
        source: Box::new(e),
    };
    let budget = RetryBudget::bookkeeping();
    let found = retry_call("read the lock", &budget, || api.get_opt(&name)).await;
    let previous = match found {
        Ok(lease) => lease.as_ref().map(LeaseState::from_lease),
        Err(kube::Error::Api(s)) if s.is_not_found() => None,
        Err(e) => return Err(err("reading the lock", e)),
    };
    if previous.is_some() {
        let delete = DeleteParams::default();
        let deleted = retry_call("delete the lock", &budget, || api.delete(&name, &delete)).await;
        match deleted {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(err("deleting the lock", e)),
        }
    }
    Ok(Unlocked {
        namespace: namespace.to_string(),
        lease: name,
        previous,
    })
}

/// Read the Lease without touching it.
pub async fn inspect(
    client: Client,
    server: &str,
    app: &str,
    namespace: &str,
) -> Result<Option<LeaseState>, LockError> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let name = lease_name(app);
    let found = retry_call("read the lock", &RetryBudget::bookkeeping(), || {
        api.get_opt(&name)
    })
    .await;
    match found {
        Ok(lease) => Ok(lease.as_ref().map(LeaseState::from_lease)),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
        Err(e) => Err(LockError::Kube {
            action: "reading the lock".to_string(),
            lease: name,
            namespace: namespace.to_string(),
            server: server.to_string(),
            source: Box::new(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn state(holder: Option<&str>, renewed: Option<&str>, secs: i64) -> LeaseState {
        LeaseState {
            holder: holder.map(str::to_string),
            acquired_at: Some(ts("2026-11-30T09:00:00Z")),
            renewed_at: renewed.map(ts),
            duration_seconds: secs,
            transitions: 0,
        }
    }

    #[test]
    fn decide_table() {
        let secs = Duration::from_secs;
        let fallback = secs(30);
        let other = |renewed: &str| state(Some("other"), Some(renewed), 30);
        let seen = |lease: LeaseState, since: u64| Observed {
            lease,
            since: secs(since),
        };
        let wait = |lapses: u64| Decision::Wait {
            holder: "other".into(),
            since: Some(ts("2026-11-30T09:00:00Z")),
            lapses_at: secs(lapses),
        };
        let take = Decision::TakeOver {
            previous: Some("other".into()),
        };
        // (lease, observed before, monotonic now, decision)
        type Case = (Option<LeaseState>, Option<Observed>, u64, Decision);
        let cases: Vec<Case> = vec![
            (None, None, 0, Decision::Create),
            (
                Some(state(None, Some("2026-11-30T09:00:59Z"), 30)),
                None,
                0,
                Decision::TakeOver { previous: None },
            ),
            (
                Some(state(Some("me"), Some("2026-11-30T09:00:59Z"), 30)),
                None,
                0,
                Decision::Renew,
            ),
            // First sight: alive for a whole duration from now, however old renewTime looks.
            (Some(other("2020-01-01T00:00:00Z")), None, 5, wait(35)),
            // Unchanged since 10 s ago: 20 s left.
            (
                Some(other("2026-11-30T09:00:50Z")),
                Some(seen(other("2026-11-30T09:00:50Z"), 0)),
                10,
                wait(30),
            ),
            // Unchanged for the whole 30 s (exactly at the end counts): lapsed.
            (
                Some(other("2026-11-30T09:00:50Z")),
                Some(seen(other("2026-11-30T09:00:50Z"), 0)),
                30,
                take.clone(),
            ),
            // Renewed meanwhile: the count starts again.
            (
                Some(other("2026-11-30T09:01:20Z")),
                Some(seen(other("2026-11-30T09:00:50Z"), 0)),
                30,
                wait(60),
            ),
            // No duration in the Lease: ours.
            (
                Some(state(Some("other"), Some("2026-11-30T09:00:50Z"), 0)),
                Some(seen(
                    state(Some("other"), Some("2026-11-30T09:00:50Z"), 0),
                    0,
                )),
                29,
                wait(30),
            ),
        ];
        for (lease, observed, now, want) in cases {
            assert_eq!(
                decide(lease.as_ref(), "me", observed.as_ref(), secs(now), fallback),
                want,
                "{lease:?} seen {observed:?} at {now}"
            );
        }
    }

    /// A waiter whose wall clock reads 09:00:00 polls every 5 s a Lease (30 s) whose holder
    /// renews every 10 s with a clock minutes off ours, then stops renewing at 60 s.
    #[test]
    fn holder_clocks_minutes_off_do_not_decide() {
        let secs = Duration::from_secs;
        for skew_minutes in [-10i64, -3, 3, 10] {
            let mut observed: Option<Observed> = None;
            let mut taken_at = None;
            for now in (0..=200u64).step_by(5) {
                // The holder's last renewal happened at min(now, 60) rounded down to 10 s,
                // written with its own clock.
                let renewed_at = (now.min(60) / 10) * 10;
                let holder_clock = ts("2026-11-30T09:00:00Z")
                    .checked_add(jiff::SignedDuration::from_secs(
                        skew_minutes * 60 + renewed_at as i64,
                    ))
                    .unwrap();
                let mut lease = state(Some("other"), None, 30);
                lease.renewed_at = Some(holder_clock);
                observed = Some(observe(observed.take(), &lease, secs(now)));
                let d = decide(Some(&lease), "me", observed.as_ref(), secs(now), secs(30));
                if matches!(d, Decision::TakeOver { .. }) {
                    taken_at = Some(now);
                    break;
                }
            }
            // Renewed last at 60 s, first seen so at 60 s: lapsed at 90 s, not sooner (a
            // clock behind) and not minutes later (a clock ahead).
            assert_eq!(taken_at, Some(90), "holder clock {skew_minutes} min off");
        }
    }

    #[test]
    fn observing_keeps_the_first_sighting_of_a_record() {
        let a = state(Some("x"), Some("2026-11-30T09:00:00Z"), 30);
        let b = state(Some("x"), Some("2026-11-30T09:00:10Z"), 30);
        let s = Duration::from_secs;
        let first = observe(None, &a, s(1));
        assert_eq!(first.since, s(1));
        assert_eq!(observe(Some(first.clone()), &a, s(9)).since, s(1));
        assert_eq!(observe(Some(first), &b, s(9)).since, s(9));
    }

    #[test]
    fn lock_order_table() {
        let k = |server: &str, ns: &str| lock_key(server, ns);
        type Case = (Vec<(String, String)>, Vec<usize>);
        let cases: Vec<Case> = vec![
            (vec![], vec![]),
            (
                vec![k("https://b", "shop"), k("https://a", "shop")],
                vec![1, 0],
            ),
            (
                vec![
                    k("https://a", "z"),
                    k("https://a", "b"),
                    k("https://0", "z"),
                ],
                vec![2, 1, 0],
            ),
            // One server spelt two ways sorts as one.
            (
                vec![k("https://B:6443/", "x"), k("https://a:6443", "x")],
                vec![1, 0],
            ),
            // Ties keep config order.
            (vec![k("https://a", "x"), k("https://a", "x")], vec![0, 1]),
        ];
        for (keys, want) in cases {
            assert_eq!(lock_order(&keys), want, "{keys:?}");
        }
        // Two runs with their targets in different orders take the Leases in one order.
        let run_a = vec![
            k("https://c", "s"),
            k("https://a", "s"),
            k("https://b", "s"),
        ];
        let run_b = vec![
            k("https://b", "s"),
            k("https://c", "s"),
            k("https://a", "s"),
        ];
        let ordered = |keys: &[(String, String)]| -> Vec<(String, String)> {
            lock_order(keys)
                .into_iter()
                .map(|i| keys[i].clone())
                .collect()
        };
        assert_eq!(ordered(&run_a), ordered(&run_b));
    }

    #[test]
    fn expiry_falls_back_to_acquire_time() {
        let s = state(Some("x"), None, 30);
        assert_eq!(s.expires_at(), Some(ts("2026-11-30T09:00:30Z")));
    }

    #[test]
    fn options_from_env() {
        let t = Duration::from_secs(120);
        let o = LockOptions::from_env(t, &|_| None);
        assert_eq!(o.lease_duration, Duration::from_secs(30));
        assert_eq!(o.renew_every, Duration::from_secs(10));
        let o = LockOptions::from_env(t, &|k| (k == LEASE_SECONDS_ENV).then(|| "3".into()));
        assert_eq!(o.lease_duration, Duration::from_secs(3));
        assert_eq!(o.renew_every, Duration::from_secs(1));
        let o = LockOptions::from_env(t, &|k| (k == LEASE_SECONDS_ENV).then(|| "zero".into()));
        assert_eq!(o.lease_duration, Duration::from_secs(30));
    }

    #[test]
    fn holder_names_run_and_pid() {
        let env = |k: &str| match k {
            "GITHUB_RUN_ID" => Some("77".to_string()),
            "GITHUB_RUN_ATTEMPT" => Some("2".to_string()),
            "GITHUB_REPOSITORY" => Some("acme/shop".to_string()),
            "HOSTNAME" => Some("runner".to_string()),
            _ => None,
        };
        let h = holder_identity(&env);
        assert!(h.starts_with("acme/shop#77.2@"), "{h}");
        assert!(h.ends_with(&format!(":{}", std::process::id())), "{h}");
        assert!(!holder_identity(&|_| None).contains('#'));
    }
}

#[cfg(test)]
mod lease_tests {
    use super::*;
    use crate::util::test_cluster::TestCluster;
    use serde_json::json;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";
    const SERVER: &str = "https://fake";

    fn quick(timeout_ms: u64, lease_secs: u64) -> LockOptions {
        let mut o = LockOptions::with_lease(
            Duration::from_millis(timeout_ms),
            Duration::from_secs(lease_secs),
        );
        o.poll = Duration::from_millis(50);
        o
    }

    #[tokio::test]
    async fn acquire_release_and_timeout_naming_the_holder() {
        let fake = TestCluster::start().await;
        let a = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-a",
            &quick(1000, 30),
        )
        .await
        .unwrap();
        assert!(
            fake.has_namespace("shop"),
            "namespace created for the lease"
        );
        let lease = fake.get(LEASES, "rollguard-shop").unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "run-a");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 30);
        assert_eq!(lease["spec"]["leaseTransitions"], 0);
        assert!(a.took_over_from().is_none());

        let err = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(300, 30),
        )
        .await
        .err()
        .expect("times out");
        let text = err.to_string();
        assert!(matches!(err, LockError::Timeout { .. }), "{text}");
        assert!(text.contains("held by run-a since "), "{text}");
        assert!(text.contains("rollguard unlock"), "{text}");

        a.release().await.unwrap();
        assert!(fake.get(LEASES, "rollguard-shop").is_none());
        let b = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(300, 30),
        )
        .await
        .unwrap();
        b.release().await.unwrap();
    }

    #[tokio::test]
    async fn two_runs_racing_for_a_new_lease_get_one_holder() {
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        let options = quick(400, 30);
        let (a, b) = tokio::join!(
            Lock::acquire(fake.client(), SERVER, "shop", "shop", "run-a", &options),
            Lock::acquire(fake.client(), SERVER, "shop", "shop", "run-b", &options),
        );
        assert!(a.is_ok() != b.is_ok(), "exactly one holds the lock");
        let winner = a.or(b).unwrap();
        let lease = fake.get(LEASES, "rollguard-shop").unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], winner.holder());
        winner.release().await.unwrap();
    }

    #[tokio::test]
    async fn expired_lease_is_taken_over() {
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        fake.put_raw(
            LEASES,
            "rollguard-shop",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "rollguard-shop", "namespace": "shop"},
                   "spec": {"holderIdentity": "dead-run", "leaseDurationSeconds": 1,
                            "acquireTime": "2020-01-01T00:00:00.000000Z",
                            "renewTime": "2020-01-01T00:00:10.000000Z", "leaseTransitions": 4}}),
        );
        // An old renewTime alone proves nothing (the holder's clock may be behind): it is
        // taken over once this run has seen it unchanged for its duration.
        let guard = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(5000, 1),
        )
        .await
        .unwrap();
        assert_eq!(guard.took_over_from(), Some("dead-run"));
        let lease = fake.get(LEASES, "rollguard-shop").unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "run-b");
        assert_eq!(lease["spec"]["leaseTransitions"], 5);
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn renewals_keep_it_and_a_waiter_gets_it_after_release() {
        let fake = TestCluster::start().await;
        // 2 s lease, renewed every ~667 ms: a waiter never sees it expire.
        let a = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-a",
            &quick(1000, 2),
        )
        .await
        .unwrap();
        let first = fake.get(LEASES, "rollguard-shop").unwrap()["spec"]["renewTime"].clone();
        let waiter = tokio::spawn({
            let client = fake.client();
            async move {
                Lock::acquire(client, SERVER, "shop", "shop", "run-b", &quick(10_000, 2)).await
            }
        });
        tokio::time::sleep(Duration::from_millis(3000)).await;
        assert!(
            !waiter.is_finished(),
            "run-a renews, so run-b keeps waiting"
        );
        let later = fake.get(LEASES, "rollguard-shop").unwrap()["spec"]["renewTime"].clone();
        assert_ne!(first, later, "renewTime moved");
        assert!(!a.is_lost());
        a.release().await.unwrap();
        let b = waiter.await.unwrap().unwrap();
        assert_eq!(b.took_over_from(), None, "released, not expired");
        b.release().await.unwrap();
    }

    /// A holder whose clock is 10 minutes behind ours renews (every 300 ms, 1 s lease): its
    /// renewTime always looks 10 minutes old to a waiter, which still waits; once it stops
    /// renewing the Lease is taken over.
    #[tokio::test]
    async fn a_holder_with_a_clock_10_minutes_behind_keeps_its_lock_while_it_renews() {
        let fake = TestCluster::start().await;
        fake.add_namespace("shop");
        let behind = || {
            MicroTime(
                Timestamp::now()
                    .checked_sub(jiff::SignedDuration::from_mins(10))
                    .unwrap(),
            )
        };
        let api: Api<Lease> = Api::namespaced(fake.client(), "shop");
        let mut lease = new_lease(
            "rollguard-shop",
            "shop",
            "behind-run",
            &quick(1000, 1),
            behind().0,
            0,
            None,
        );
        lease = api.create(&PostParams::default(), &lease).await.unwrap();
        let stop = CancellationToken::new();
        let renewer = tokio::spawn({
            let stop = stop.clone();
            async move {
                while !stop.is_cancelled() {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    if let Some(spec) = lease.spec.as_mut() {
                        spec.renew_time = Some(behind());
                    }
                    lease.metadata.managed_fields = None;
                    lease = api
                        .replace("rollguard-shop", &PostParams::default(), &lease)
                        .await
                        .unwrap();
                }
            }
        });
        let err = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(2500, 1),
        )
        .await
        .err()
        .expect("a renewed lock is not taken over");
        assert!(matches!(err, LockError::Timeout { .. }), "{err}");
        let held = fake.get(LEASES, "rollguard-shop").unwrap();
        assert_eq!(held["spec"]["holderIdentity"], "behind-run");
        stop.cancel();
        renewer.await.unwrap();
        let b = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(5000, 1),
        )
        .await
        .unwrap();
        assert_eq!(b.took_over_from(), Some("behind-run"));
        b.release().await.unwrap();
    }

    #[tokio::test]
    async fn a_run_whose_lease_was_taken_over_releases_nothing() {
        let fake = TestCluster::start().await;
        let a = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-a",
            &quick(1000, 60),
        )
        .await
        .unwrap();
        // Another run took it over (a replace: same uid, new version).
        let mut taken = fake.get(LEASES, "rollguard-shop").unwrap();
        taken["spec"]["holderIdentity"] = json!("run-b");
        fake.put_raw(LEASES, "rollguard-shop", taken);
        a.release().await.unwrap();
        let lease = fake
            .get(LEASES, "rollguard-shop")
            .expect("run-b's lease is kept");
        assert_eq!(lease["spec"]["holderIdentity"], "run-b");
        // Its own lease, as last written, a run deletes.
        let b = Lock::acquire(
            fake.client(),
            SERVER,
            "other",
            "shop",
            "run-c",
            &quick(1000, 60),
        )
        .await
        .unwrap();
        b.release().await.unwrap();
        assert!(fake.get(LEASES, "rollguard-other").is_none());
    }

    #[tokio::test]
    async fn a_dropped_guard_lapses_and_is_taken_over() {
        let fake = TestCluster::start().await;
        let a = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-a",
            &quick(1000, 1),
        )
        .await
        .unwrap();
        // Like a killed process: renewals stop, the Lease stays.
        drop(a);
        let b = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-b",
            &quick(5000, 1),
        )
        .await
        .unwrap();
        assert_eq!(b.took_over_from(), Some("run-a"));
        b.release().await.unwrap();
    }

    #[tokio::test]
    async fn losing_the_lease_is_noticed_and_unlock_forces() {
        let fake = TestCluster::start().await;
        let a = Lock::acquire(
            fake.client(),
            SERVER,
            "shop",
            "shop",
            "run-a",
            &quick(1000, 1),
        )
        .await
        .unwrap();
        let mut lease = fake.get(LEASES, "rollguard-shop").unwrap();
        lease["spec"]["holderIdentity"] = json!("intruder");
        fake.put_raw(LEASES, "rollguard-shop", lease);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(a.is_lost());
        // Release leaves the intruder's lease alone.
        a.release().await.unwrap();
        assert!(fake.get(LEASES, "rollguard-shop").is_some());
        let state = inspect(fake.client(), SERVER, "shop", "shop")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state.holder.as_deref(), Some("intruder"));
        let unlocked = force_unlock(fake.client(), SERVER, "shop", "shop")
            .await
            .unwrap();
        assert_eq!(
            unlocked.previous.and_then(|p| p.holder).as_deref(),
            Some("intruder")
        );
        assert!(fake.get(LEASES, "rollguard-shop").is_none());
    }
}
