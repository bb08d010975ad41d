//! Server-side apply of a manifest set to one target, through discovery and `DynamicObject`.
//!
//! Every kind is resolved by discovery before anything is written, so a kind the target does
//! not serve fails the target with zero writes (kinds defined by a CRD of the same set are
//! resolved after that CRD is Established). Phases come from `ManifestSet::phases()` and run
//! in order; within a phase up to `in_flight` requests are in flight.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::connect::{describe_error, target_failure};
use crate::cluster::discovery::{Catalog, discover};
use crate::cluster::retry::{RetryBudget, RetryError, retry_kube, with_retry};
use crate::manifests::{ApplyPhase, ManifestObject, ManifestSet};
use crate::report::Failure;
use crate::util::in_order::{Window, in_order_made};
use crate::util::retry::Cancel;

/// The field manager every app shared before managers were per app. Objects it still owns
/// are taken over once, on purpose, by the app's own manager ([`field_manager`]).
pub const LEGACY_FIELD_MANAGER: &str = "rollguard";

/// The field manager of an app's applies: `rollguard-<app>`. Per app, so that two apps that
/// declare the same object meet as a Conflict instead of silently taking each other's fields.
pub fn field_manager(app: &str) -> String {
    format!("{LEGACY_FIELD_MANAGER}-{app}")
}

/// Who a field manager is, in words: `app web (field manager "rollguard-web")`.
pub fn describe_manager(manager: &str) -> String {
    let bare = manager.trim_matches('"');
    match bare.strip_prefix("rollguard-") {
        Some(app) if !app.is_empty() => format!("app {app} (field manager \"{bare}\")"),
        _ => format!("\"{bare}\""),
    }
}

/// How to apply.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// The field manager ([`field_manager`] of the app).
    pub field_manager: String,
    /// Take ownership of fields another manager owns (`--force-conflicts`).
    pub force: bool,
    /// `dryRun=All`: the server answers with the would-be objects and stores nothing.
    pub dry_run: bool,
    /// Namespace for namespaced objects that name none.
    pub default_namespace: String,
    /// Requests in flight per target within a phase, and the fleet's bound.
    pub in_flight: Window,
    /// Nothing is attempted after this instant.
    pub deadline: Instant,
}

/// One object as applied: where it lives and what the server answered.
#[derive(Debug, Clone)]
pub struct AppliedObject {
    /// "Deployment shop/web"
    pub display: String,
    pub resource: ApiResource,
    pub name: String,
    pub namespace: Option<String>,
    /// The object as the server returned it, for the wait. `None` when it was already
    /// healthy, or in a dry run (no wait follows): nothing is left to watch, and with many
    /// objects on many targets the bodies are most of the memory.
    pub response: Option<KeptObject>,
    /// Something the report should say about this object (a field-manager takeover).
    pub note: Option<String>,
}

/// An object kept as compact JSON text: parsed, a `Value` is several times the size of its
/// text, and a fleet's waits keep thousands that are read a few times each.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptObject(Box<str>);

impl KeptObject {
    /// The object (Null if the text did not parse, which text written by `From` always does).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

impl From<Value> for KeptObject {
    fn from(object: Value) -> KeptObject {
        KeptObject(object.to_string().into_boxed_str())
    }
}

/// Why one object could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFailure {
    pub object: String,
    /// "k8s/web.yaml:12"
    pub origin: String,
    pub reason: String,
    pub message: String,
}

/// Why applying to a target stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the cluster does not serve {}", .0.join(", "))]
    UnservedKinds(Vec<String>),
    #[error("{} object(s) could not be applied", .0.len())]
    Objects(Vec<ObjectFailure>),
    #[error("discovery failed: {0}")]
    Discovery(kube::Error),
    #[error("CustomResourceDefinition {name} did not become Established: {message}")]
    CrdNotEstablished { name: String, message: String },
    #[error("namespace {name}: {source}")]
    Namespace { name: String, source: kube::Error },
    #[error("cancelled")]
    Cancelled,
}

/// The result of applying: what got applied (also on error, for rollback decisions).
#[derive(Debug)]
pub struct ApplyOutcome {
    pub applied: Vec<AppliedObject>,
    /// Writes that were sent and never answered: the server may have done them, so they
    /// count as changes (a rollback re-applies the last good release over them).
    pub unanswered: usize,
    pub result: Result<(), ApplyError>,
    /// What a dry run could not check (objects in namespaces that do not exist yet).
    pub warnings: Vec<String>,
}

/// A kind resolved by discovery.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// The API groups a set needs from discovery ("" is the core group).
pub fn needed_groups(objects: &[ManifestObject]) -> Vec<String> {
    let groups: BTreeSet<String> = objects.iter().map(|o| o.group().to_string()).collect();
    groups.into_iter().collect()
}

/// (group, kind) pairs that CustomResourceDefinitions in the set will serve.
pub fn crd_provided_kinds(objects: &[ManifestObject]) -> HashSet<(String, String)> {
    objects
        .iter()
        .filter(|o| o.kind == "CustomResourceDefinition" && o.group() == "apiextensions.k8s.io")
        .filter_map(|o| {
            let spec = o.body.get("spec")?;
            let group = spec.get("group")?.as_str()?;
            let kind = spec.get("names")?.get("kind")?.as_str()?;
            Some((group.to_string(), kind.to_string()))
        })
        .collect()
}

/// The key kinds are resolved by: (apiVersion, kind).
pub fn kind_key(obj: &ManifestObject) -> (String, String) {
    (obj.api_version.clone(), obj.kind.clone())
}

/// Resolves every kind of `objects`; kinds in `later` (CRD-provided) may stay unresolved.
/// Returns the resolutions, or the list of kinds the target does not serve.
pub fn resolve_kinds(
    catalog: &Catalog,
    objects: &[ManifestObject],
    later: &HashSet<(String, String)>,
) -> Result<HashMap<(String, String), Resolved>, Vec<String>> {
    let mut resolved = HashMap::new();
    let mut missing = Vec::new();
    for obj in objects {
        let key = kind_key(obj);
        if resolved.contains_key(&key) {
            continue;
        }
        match catalog.resolve(obj.group(), obj.version(), &obj.kind) {
            Some(served) => {
                resolved.insert(
                    key,
                    Resolved {
                        resource: served.resource.clone(),
                        namespaced: served.namespaced,
                    },
                );
            }
            None if later.contains(&(obj.group().to_string(), obj.kind.clone())) => {}
            None => {
                let text = format!("{} {} ({})", obj.api_version, obj.kind, obj.origin);
                if !missing.contains(&text) {
                    missing.push(text);
                }
            }
        }
    }
    if missing.is_empty() {
        Ok(resolved)
    } else {
        Err(missing)
    }
}

/// The namespace an object is applied in: its own, else the default, for namespaced kinds.
pub fn effective_namespace(
    obj: &ManifestObject,
    namespaced: bool,
    default_namespace: &str,
) -> Option<String> {
    if !namespaced {
        return None;
    }
    Some(
        obj.namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| default_namespace.to_string()),
    )
}

/// The body sent to the server: server-owned fields stripped (apply refuses managedFields),
/// the namespace set for namespaced kinds and removed for cluster-scoped ones.
pub fn prepare_body(body: &Value, namespace: Option<&str>) -> Value {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "managedFields",
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "selfLink",
            ] {
                meta.remove(field);
            }
            match namespace {
                Some(ns) => {
                    meta.insert("namespace".into(), Value::String(ns.to_string()));
                }
                None => {
                    meta.remove("namespace");
                }
            }
        }
    }
    body
}

/// The fields of a server-side apply conflict (409 with FieldManagerConflict causes), each
/// with the manager that owns it: `.spec.replicas (owned by "kubectl")`.
pub fn conflict_fields(status: &kube::core::Status) -> Vec<String> {
    let Some(details) = &status.details else {
        return Vec::new();
    };
    details
        .causes
        .iter()
        .filter(|c| c.reason == "FieldManagerConflict" || !c.field.is_empty())
        .map(|c| {
            let owner = c
                .message
                .strip_prefix("conflict with ")
                .unwrap_or(&c.message);
            if owner.is_empty() {
                c.field.clone()
            } else {
                format!("{} (owned by {})", c.field, describe_manager(owner))
            }
        })
        .collect()
}

/// A failed apply of one object, in words.
pub fn describe_apply_error(obj: &ManifestObject, err: &kube::Error) -> ObjectFailure {
    // A refused field is named where it is written, not where its object starts.
    let mut origin = obj.origin.clone();
    let (reason, message) = match err {
        kube::Error::Api(status) if status.code == 409 && status.reason == "Conflict" => {
            let fields = conflict_fields(status);
            (
                "Conflict".to_string(),
                format!(
                    "fields owned by another field manager: {}; run with --force-conflicts to take ownership",
                    if fields.is_empty() {
                        status.message.clone()
                    } else {
                        fields.join(", ")
                    }
                ),
            )
        }
        kube::Error::Api(_) if crate::cluster::retry::rate_limited(err).is_some() => (
            "RateLimited".to_string(),
            crate::cluster::retry::rate_limited_message(
                crate::cluster::retry::rate_limited(err).unwrap_or_default(),
            ),
        ),
        kube::Error::Api(status) if !undeclared_fields(&status.message).is_empty() => {
            let paths = undeclared_fields(&status.message);
            if let Some(first) = paths.first() {
                origin = obj.field_origin(first);
            }
            let (what, fix, them) = match paths.as_slice() {
                [one] => (
                    format!("{one} is not a field"),
                    "its name or indentation",
                    "it",
                ),
                many => (
                    format!("{} are not fields", many.join(", ")),
                    "their names or indentation",
                    "them",
                ),
            };
            // Kubernetes' own groups are empty, dotless (apps, batch) or end in .k8s.io.
            let group = obj.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let custom = group.contains('.') && !group.ends_with(".k8s.io");
            (
                "FieldNotDeclared".to_string(),
                format!(
                    "{what} of {} {}: fix {fix}{}",
                    obj.api_version,
                    obj.kind,
                    if custom {
                        format!(", or add {them} to the CRD's schema")
                    } else {
                        String::new()
                    }
                ),
            )
        }
        kube::Error::Api(status)
            if status
                .message
                .contains(crate::cluster::retry::TYPED_PATCH_FAILED) =>
        {
            // `failed to create typed patch object (ns/name; v, Kind=K): .spec.replicas:
            // expected numeric (int or float), got string`: the field and why, without the
            // object (the failure names it).
            let why = status
                .message
                .split_once("): ")
                .map_or(status.message.as_str(), |(_, why)| why);
            // The value's own line, as for an undeclared field.
            if let Some((path, _)) = why.split_once(": ")
                && path.starts_with('.')
            {
                origin = obj.field_origin(path);
            }
            (
                "InvalidField".to_string(),
                format!(
                    "{why} in {} {}: fix the value's type in the manifest (quote strings, not numbers)",
                    obj.api_version, obj.kind
                ),
            )
        }
        kube::Error::Api(status) => (
            if status.reason.is_empty() {
                format!("HTTP{}", status.code)
            } else {
                status.reason.clone()
            },
            format!(
                "the API server refused it ({}): {}",
                status.code, status.message
            ),
        ),
        other
            if crate::cluster::retry::io_error_kind(other)
                == Some(std::io::ErrorKind::TimedOut) =>
        {
            (
                UNANSWERED.to_string(),
                format!(
                    "sent, but no answer came, so whether the server applied it is unknown ({})",
                    crate::cluster::retry::error_chain_text(other)
                ),
            )
        }
        other => (
            "Unreachable".to_string(),
            crate::cluster::retry::error_chain_text(other),
        ),
    };
    ObjectFailure {
        object: obj.display_name(),
        origin: origin.to_string(),
        reason,
        message,
    }
}

/// The fields a server-side apply was refused for, from the server's message: one,
/// `failed to create typed patch object (shop/w; example.com/v1, Kind=Widget): .spec.x: field
/// not declared in schema`, or several, one per line after `errors:`.
fn undeclared_fields(message: &str) -> Vec<&str> {
    message
        .lines()
        .filter_map(|line| {
            let before = line
                .trim()
                .strip_suffix(crate::cluster::retry::FIELD_NOT_DECLARED)?;
            let before = before.strip_suffix(": ")?;
            let path = before.rsplit_once("): ").map_or(before, |(_, path)| path);
            path.starts_with('.').then_some(path)
        })
        .collect()
}

/// What is kept of the server's answer (see [`AppliedObject::response`]): nothing in a dry
/// run (no wait reads it: keeping the would-be objects, the bench's dry run of 50 targets x
/// 100 objects peaked at 79.5 MiB, above the whole deploy's 49.4) or for an object that is
/// already healthy (a ConfigMap, a Service...), else the object without its managedFields
/// and with its pod template as a digest.
fn kept_response(
    mut returned: DynamicObject,
    resource: &ApiResource,
    dry_run: bool,
) -> Option<KeptObject> {
    if dry_run {
        return None;
    }
    // Nothing downstream reads managedFields, and they are most of a returned object.
    returned.metadata.managed_fields = None;
    let mut obj = serde_json::to_value(&returned).unwrap_or(Value::Null);
    let assessment = crate::cluster::health::assess_as(&obj, &resource.api_version, &resource.kind);
    if assessment.status == crate::cluster::health::Status::Current {
        return None;
    }
    // Kept only for the wait's rules, which read the pod template only as its digest.
    crate::cluster::health::slim_template(&mut obj);
    Some(obj.into())
}

/// True for the 404 an object in a namespace that does not exist gets.
pub fn is_missing_namespace(f: &ObjectFailure) -> bool {
    f.reason == "NotFound" && f.message.contains("namespaces \"")
}

/// The API of one resolved kind, in a namespace or cluster-wide.
pub fn dynamic_api(
    client: &Client,
    resolved: &Resolved,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resolved.resource),
        None => Api::all_with(client.clone(), &resolved.resource),
    }
}

/// Creates namespace `name` when it is missing, tolerating one that exists already or
/// appears meanwhile (the one place rollguard creates namespaces: for objects whose namespace
/// the set does not contain, and for the release history and lock). Without the right to read
/// namespaces it assumes the namespace exists: the writes that follow will tell. Err says
/// which step failed ("reading" or "creating").
pub async fn ensure_namespace(
    client: &Client,
    name: &str,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<(), (&'static str, RetryError)> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let existing = with_retry("get namespace", budget, cancel, || api.get_opt(name)).await;
    match existing {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(RetryError::Api(kube::Error::Api(s))) if s.code == 403 => return Ok(()),
        Err(e) => return Err(("reading", e)),
    }
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let post = PostParams::default();
    match retry_kube("create namespace", budget, Cancel::Write(cancel), || {
        api.create(&post, &ns)
    })
    .await
    {
        Ok(_) => Ok(()),
        Err(RetryError::Api(kube::Error::Api(s))) if s.code == 409 => Ok(()),
        Err(e) => Err(("creating", e)),
    }
}

/// Waits (by watch) until the CRD is Established, within the deadline.
async fn await_crd_established(
    client: &Client,
    name: &str,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<(), ApplyError> {
    use kube::runtime::wait::{await_condition, conditions};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let wait = tokio::time::timeout_at(
        deadline,
        await_condition(api, name, conditions::is_crd_established()),
    );
    tokio::select! {
        _ = cancel.cancelled() => Err(ApplyError::Cancelled),
        r = wait => match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ApplyError::CrdNotEstablished { name: name.to_string(), message: e.to_string() }),
            Err(_) => Err(ApplyError::CrdNotEstablished { name: name.to_string(), message: "deadline reached".into() }),
        }
    }
}

/// The kinds of a set as one target serves them, resolved before anything is written.
#[derive(Debug, Clone)]
pub struct Resolution {
    kinds: HashMap<(String, String), Resolved>,
    groups: Vec<String>,
}

impl Resolution {
    /// How the target serves this object's kind (None: a kind a CRD of the set will serve).
    pub fn resolved(&self, obj: &ManifestObject) -> Option<&Resolved> {
        self.kinds.get(&kind_key(obj))
    }

    /// The namespaces the set's objects go to but the set does not create: what rollguard
    /// creates before it applies (apply) or says it would (diff).
    pub fn namespaces_to_create(
        &self,
        set: &ManifestSet,
        default_namespace: &str,
    ) -> BTreeSet<String> {
        let declared: HashSet<&str> = set
            .objects
            .iter()
            .filter(|o| o.kind == "Namespace" && o.group().is_empty())
            .map(|o| o.name.as_str())
            .collect();
        set.objects
            .iter()
            .filter_map(|o| {
                let namespaced = self.resolved(o).map(|r| r.namespaced).unwrap_or(true);
                effective_namespace(o, namespaced, default_namespace)
            })
            .filter(|ns| !declared.contains(ns.as_str()))
            .collect()
    }

    /// How many distinct kinds were resolved (CRD-provided kinds come later).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

/// Discovers the groups the set uses and resolves every kind: the first contact with the
/// cluster (a few quick attempts, so an unreachable target fails in seconds) and the check
/// that the target serves every kind, with no write.
pub async fn resolve_set(
    client: &Client,
    set: &ManifestSet,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<Resolution, ApplyError> {
    let groups = needed_groups(&set.objects);
    let later = crd_provided_kinds(&set.objects);
    let catalog = discover(
        client,
        &groups,
        &RetryBudget::first_contact(deadline),
        cancel,
    )
    .await
    .map_err(discovery_error)?;
    let kinds = resolve_kinds(&catalog, &set.objects, &later).map_err(ApplyError::UnservedKinds)?;
    Ok(Resolution { kinds, groups })
}

/// Resolves and applies the set (`resolve_set` then `apply_resolved`).
pub async fn apply_set(
    client: &Client,
    set: &ManifestSet,
    options: &ApplyOptions,
    cancel: &CancellationToken,
    on_progress: &(dyn Fn(usize, usize) + Sync),
) -> ApplyOutcome {
    match resolve_set(client, set, options.deadline, cancel).await {
        Ok(resolution) => {
            apply_resolved(client, set, resolution, options, cancel, on_progress).await
        }
        Err(e) => ApplyOutcome {
            applied: Vec::new(),
            unanswered: 0,
            result: Err(e),
            warnings: Vec::new(),
        },
    }
}

/// Applies the set, phase by phase, with kinds resolved beforehand. `on_progress(done,
/// total)` is called after each object.
pub async fn apply_resolved(
    client: &Client,
    set: &ManifestSet,
    resolution: Resolution,
    options: &ApplyOptions,
    cancel: &CancellationToken,
    on_progress: &(dyn Fn(usize, usize) + Sync),
) -> ApplyOutcome {
    let mut outcome = ApplyOutcome {
        applied: Vec::new(),
        unanswered: 0,
        result: Ok(()),
        warnings: Vec::new(),
    };
    outcome.result = apply_phases(
        client,
        set,
        resolution,
        options,
        cancel,
        on_progress,
        &mut outcome,
    )
    .await;
    outcome
}

async fn apply_phases(
    client: &Client,
    set: &ManifestSet,
    resolution: Resolution,
    options: &ApplyOptions,
    cancel: &CancellationToken,
    on_progress: &(dyn Fn(usize, usize) + Sync),
    collected: &mut ApplyOutcome,
) -> Result<(), ApplyError> {
    let budget = RetryBudget::until(options.deadline);
    if !options.dry_run {
        let needed = resolution.namespaces_to_create(set, &options.default_namespace);
        create_namespaces(client, &needed, &budget, cancel).await?;
    }
    let Resolution { mut kinds, groups } = resolution;
    let mut progress = Progress {
        done: 0,
        total: set.objects.len(),
        report: on_progress,
    };
    let phases = set.phases();
    for (index, phase) in phases.iter().enumerate() {
        if cancel.is_cancelled() {
            return Err(ApplyError::Cancelled);
        }
        // Past the deadline nothing more is sent: every object left is reported as such.
        if Instant::now() >= options.deadline {
            return Err(ApplyError::Objects(unsent(
                &phases[index..],
                &kinds,
                options,
            )));
        }
        // Kinds served by CRDs of an earlier phase are discovered now.
        let unresolved = |o: &&ManifestObject| !kinds.contains_key(&kind_key(o));
        let unresolved = phase.objects.iter().filter(unresolved).count();
        if unresolved > 0 {
            if options.dry_run {
                // A dry run never establishes CRDs: objects of their kinds cannot be checked.
                progress.done += unresolved;
            } else {
                kinds = rediscover(client, set, &groups, &budget, cancel).await?;
            }
        }
        let results = send_phase(
            client,
            phase,
            &kinds,
            options,
            &budget,
            cancel,
            &mut progress,
        )
        .await;
        if cancel.is_cancelled() {
            // What was done (or may have been) before the cancel still counts.
            keep_results(results, options, collected);
            return Err(ApplyError::Cancelled);
        }
        let mut failures = keep_results(results, options, collected);
        if !failures.is_empty() {
            // When the deadline stopped this phase, the later phases were never sent either.
            if failures.iter().any(|f| f.reason == NOT_APPLIED) {
                failures.extend(unsent(&phases[index + 1..], &kinds, options));
            }
            return Err(ApplyError::Objects(failures));
        }
        if !options.dry_run {
            await_phase_crds(client, phase, options, cancel).await?;
        }
    }
    Ok(())
}

/// How many objects were sent, of how many, and whom to tell.
struct Progress<'a> {
    done: usize,
    total: usize,
    report: &'a (dyn Fn(usize, usize) + Sync),
}

/// Creates the namespaces the objects go to but the set does not create (when missing).
async fn create_namespaces(
    client: &Client,
    needed: &BTreeSet<String>,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<(), ApplyError> {
    for ns in needed {
        match ensure_namespace(client, ns, budget, cancel).await {
            Ok(()) => {}
            Err((_, RetryError::Cancelled)) => return Err(ApplyError::Cancelled),
            Err((step, e)) => {
                return Err(ApplyError::Namespace {
                    name: ns.clone(),
                    source: e.into_kube().unwrap_or_else(|| {
                        crate::cluster::retry::timeout_error(step, Duration::ZERO)
                    }),
                });
            }
        }
    }
    Ok(())
}

/// Every object of `phases`, reported as never sent (the deadline passed).
fn unsent(
    phases: &[ApplyPhase<'_>],
    kinds: &HashMap<(String, String), Resolved>,
    options: &ApplyOptions,
) -> Vec<ObjectFailure> {
    phases
        .iter()
        .flat_map(|p| p.objects.iter())
        .map(|o| {
            let namespaced = kinds.get(&kind_key(o)).is_none_or(|r| r.namespaced);
            let ns = effective_namespace(o, namespaced, &options.default_namespace);
            not_applied(display_of(o, ns.as_deref()), o)
        })
        .collect()
}

/// Discovers the kinds again, now that the CRDs of an earlier phase serve theirs.
async fn rediscover(
    client: &Client,
    set: &ManifestSet,
    groups: &[String],
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<HashMap<(String, String), Resolved>, ApplyError> {
    let catalog = discover(client, groups, budget, cancel)
        .await
        .map_err(discovery_error)?;
    resolve_kinds(&catalog, &set.objects, &HashSet::new()).map_err(ApplyError::UnservedKinds)
}

/// A discovery that did not answer: the cluster's error, or the cancel.
fn discovery_error(e: RetryError) -> ApplyError {
    e.into_kube()
        .map(ApplyError::Discovery)
        .unwrap_or(ApplyError::Cancelled)
}

/// Sends the phase's objects, up to `in_flight` at once, counting each as it ends.
async fn send_phase(
    client: &Client,
    phase: &ApplyPhase<'_>,
    kinds: &HashMap<(String, String), Resolved>,
    options: &ApplyOptions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
    progress: &mut Progress<'_>,
) -> Vec<Result<AppliedObject, ObjectFailure>> {
    let objects: Vec<(&ManifestObject, &Resolved)> = phase
        .objects
        .iter()
        .filter_map(|obj| Some((obj, kinds.get(&kind_key(obj))?)))
        .collect();
    in_order_made(
        objects.len(),
        &options.in_flight,
        |i| {
            let (obj, resolved) = objects[i];
            apply_one(client, obj, resolved.clone(), options, budget, cancel)
        },
        || {
            progress.done += 1;
            (progress.report)(progress.done, progress.total);
        },
    )
    .await
}

/// Keeps the applied objects, the unanswered writes and the warnings in `collected`; returns
/// the failures.
fn keep_results(
    results: Vec<Result<AppliedObject, ObjectFailure>>,
    options: &ApplyOptions,
    collected: &mut ApplyOutcome,
) -> Vec<ObjectFailure> {
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(mut a) => {
                collected.warnings.extend(a.note.take());
                collected.applied.push(a);
            }
            // A dry run creates no namespace, so objects in a namespace of this set
            // (or one rollguard would create) cannot be checked: the server says 404.
            Err(f) if options.dry_run && is_missing_namespace(&f) => collected
                .warnings
                .push(format!("dry run: {} not checked: {}", f.object, f.message)),
            Err(f) => {
                if f.reason == UNANSWERED && !options.dry_run {
                    collected.unanswered += 1;
                }
                failures.push(f);
            }
        }
    }
    failures
}

/// Waits until the CRDs of a phase that asks for it are established.
async fn await_phase_crds(
    client: &Client,
    phase: &ApplyPhase<'_>,
    options: &ApplyOptions,
    cancel: &CancellationToken,
) -> Result<(), ApplyError> {
    for crd in phase
        .objects
        .iter()
        .filter(|o| phase.wait_for_crds && o.kind == "CustomResourceDefinition")
    {
        await_crd_established(client, &crd.name, options.deadline, cancel).await?;
    }
    Ok(())
}

/// The reason of an object the deadline kept from being sent.
pub const NOT_APPLIED: &str = "NotApplied";

/// The reason of an object whose write was sent and never answered.
pub const UNANSWERED: &str = "Timeout";

/// An object that was never sent, because the deadline had passed.
pub(crate) fn not_applied(display: String, obj: &ManifestObject) -> ObjectFailure {
    ObjectFailure {
        object: display,
        origin: obj.origin.to_string(),
        reason: NOT_APPLIED.into(),
        message: "not applied (deadline): the target's deadline passed before it was sent".into(),
    }
}

/// How an object is named in reports: "Deployment shop/web".
fn display_of(obj: &ManifestObject, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{} {}/{}", obj.kind, ns, obj.name),
        None => format!("{} {}", obj.kind, obj.name),
    }
}

/// True when every conflicting field of a 409 is owned by the old shared manager only: the
/// app's own earlier applies, which its manager takes over on purpose.
fn conflicts_only_with_legacy(err: &kube::Error) -> bool {
    let kube::Error::Api(status) = err else {
        return false;
    };
    let Some(details) = status.details.as_ref().filter(|_| status.code == 409) else {
        return false;
    };
    let legacy = format!("conflict with \"{LEGACY_FIELD_MANAGER}\"");
    !details.causes.is_empty()
        && details.causes.iter().all(|c| {
            c.message.trim() == legacy
                || c.message.trim() == format!("conflict with {LEGACY_FIELD_MANAGER}")
        })
}

/// True when the object's managedFields still hold an apply of the old shared manager.
fn owned_by_legacy(obj: &DynamicObject) -> bool {
    obj.metadata.managed_fields.as_ref().is_some_and(|entries| {
        entries.iter().any(|e| {
            e.manager.as_deref() == Some(LEGACY_FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
        })
    })
}

async fn apply_one(
    client: &Client,
    obj: &ManifestObject,
    resolved: Resolved,
    options: &ApplyOptions,
    budget: &RetryBudget,
    cancel: &CancellationToken,
) -> Result<AppliedObject, ObjectFailure> {
    let namespace = effective_namespace(obj, resolved.namespaced, &options.default_namespace);
    let display = display_of(obj, namespace.as_deref());
    if Instant::now() >= options.deadline {
        return Err(not_applied(display, obj));
    }
    let body = prepare_body(&obj.body, namespace.as_deref());
    let api = dynamic_api(client, &resolved, namespace.as_deref());
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = options.force;
    params.dry_run = options.dry_run;
    let started = Instant::now();
    let patch = Patch::Apply(&body);
    // A dry run changes nothing: it can be dropped mid-request.
    let stop = match options.dry_run {
        true => Cancel::Read(cancel),
        false => Cancel::Write(cancel),
    };
    let mut result = retry_kube("apply", budget, stop, || {
        api.patch(&obj.name, &params, &patch)
    })
    .await;
    let mut note = None;
    // Fields the old shared manager holds with other values are this app's own earlier
    // applies: taken over once, on purpose, and said in the report.
    if let Err(RetryError::Api(err)) = &result
        && options.field_manager != LEGACY_FIELD_MANAGER
        && !options.force
        && conflicts_only_with_legacy(err)
    {
        let mut forced = params.clone();
        forced.force = true;
        result = retry_kube("apply", budget, stop, || {
            api.patch(&obj.name, &forced, &patch)
        })
        .await;
    }
    if let Ok(returned) = &result
        && !options.dry_run
        && options.field_manager != LEGACY_FIELD_MANAGER
        && owned_by_legacy(returned)
    {
        note = Some(
            release_legacy(
                &api,
                obj,
                &body,
                budget,
                cancel,
                &display,
                &options.field_manager,
            )
            .await,
        );
    }
    tracing::debug!(object = %obj.display_name(), ms = started.elapsed().as_millis() as u64, ok = result.is_ok(), "applied");
    match result {
        Ok(returned) => Ok(AppliedObject {
            display,
            response: kept_response(returned, &resolved.resource, options.dry_run),
            resource: resolved.resource,
            name: obj.name.clone(),
            namespace,
            note,
        }),
        Err(RetryError::Cancelled) => Err(ObjectFailure {
            object: display,
            origin: obj.origin.to_string(),
            reason: "Cancelled".into(),
            message: "cancelled before it was applied".into(),
        }),
        Err(RetryError::NotSent) => Err(not_applied(display, obj)),
        Err(RetryError::Api(err)) => {
            let mut failure = describe_apply_error(obj, &err);
            failure.object = display;
            Err(failure)
        }
    }
}

/// Hands the old shared manager's fields to the app's manager: an apply by the old manager
/// with no fields gives up all it owned (the app's manager co-owns every field it sends, so
/// those stay; fields only the old manager held, from manifests no longer sent, go, as any
/// apply would drop them). Returns the report's note.
async fn release_legacy(
    api: &Api<DynamicObject>,
    obj: &ManifestObject,
    body: &Value,
    budget: &RetryBudget,
    cancel: &CancellationToken,
    display: &str,
    manager: &str,
) -> String {
    let mut empty = serde_json::json!({
        "apiVersion": body.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": body.get("kind").cloned().unwrap_or(Value::Null),
        "metadata": {"name": obj.name},
    });
    if let Some(ns) = body.pointer("/metadata/namespace").cloned() {
        empty["metadata"]["namespace"] = ns;
    }
    let params = PatchParams::apply(LEGACY_FIELD_MANAGER);
    let patch = Patch::Apply(&empty);
    match retry_kube(
        "release old field manager",
        budget,
        Cancel::Write(cancel),
        || api.patch(&obj.name, &params, &patch),
    )
    .await
    {
        Ok(_) => format!(
            "{display}: took over the fields of the old shared field manager \"{LEGACY_FIELD_MANAGER}\" for \"{manager}\" (once; rollguard now applies with one field manager per app)"
        ),
        Err(e) => format!(
            "{display}: could not hand the fields of the old shared field manager \"{LEGACY_FIELD_MANAGER}\" to \"{manager}\" ({e}); the next deploy tries again"
        ),
    }
}

/// Requests in flight per target within an apply phase (and the preflight's, the diff's),
/// at most. Far below a real API server's max-in-flight (400 reads, 200 writes, shared by
/// priority and fairness); the apply is latency-bound, and 8 left the cores a third idle on
/// one target (BENCHMARKS.md, `apply` and `preflight`, 2026-12-02).
pub const MAX_IN_FLIGHT: usize = 32;
/// The window of each of `targets` targets that run at once: its share, within one bound of
/// [`FLEET_IN_FLIGHT`] that all of them share (made once per run, cloned per target).
pub fn fleet_window(targets: usize) -> Window {
    Window {
        limit: in_flight_per_target(targets),
        shared: Some(std::sync::Arc::new(tokio::sync::Semaphore::new(
            FLEET_IN_FLIGHT,
        ))),
    }
}

/// Requests in flight per target, at least, however many targets run at once.
pub const MIN_IN_FLIGHT: usize = 4;
/// Requests in flight across the fleet: each holds its request and answer in memory, so 32
/// per target for 50 targets of 100 objects took the peak from 85 to 110 MiB.
pub const FLEET_IN_FLIGHT: usize = 256;

/// Requests in flight per target when `targets` run at once: their share of
/// [`FLEET_IN_FLIGHT`], between [`MIN_IN_FLIGHT`] and [`MAX_IN_FLIGHT`].
pub fn in_flight_per_target(targets: usize) -> usize {
    (FLEET_IN_FLIGHT / targets.max(1)).clamp(MIN_IN_FLIGHT, MAX_IN_FLIGHT)
}

/// The headline already names the object, so the message says only what to do.
const UNSERVED_KIND_HINT: &str =
    "the cluster does not serve this kind; install its CRD or fix the apiVersion/kind";

/// Apply errors as report failures.
pub fn apply_failures(err: &ApplyError, server: &str) -> Vec<Failure> {
    let plain = |object: &str, reason: &str, message: String| Failure {
        object: object.to_string(),
        reason: reason.to_string(),
        message,
        ..Default::default()
    };
    match err {
        ApplyError::UnservedKinds(kinds) => kinds
            .iter()
            .map(|k| plain(k, "KindNotServed", UNSERVED_KIND_HINT.to_string()))
            .collect(),
        ApplyError::Objects(failures) => failures
            .iter()
            .map(|f| {
                plain(
                    &f.object,
                    &f.reason,
                    format!("{} ({})", f.message, f.origin),
                )
            })
            .collect(),
        ApplyError::Discovery(e) => vec![target_failure("cluster", &describe_error(e, server))],
        ApplyError::Namespace { name, source } => {
            let described = describe_error(source, server);
            vec![plain(
                &format!("Namespace {name}"),
                &described.reason,
                described.message,
            )]
        }
        ApplyError::CrdNotEstablished { name, message } => {
            vec![plain(
                &format!("CustomResourceDefinition {name}"),
                "NotEstablished",
                message.clone(),
            )]
        }
        ApplyError::Cancelled => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::Origin;
    use serde_json::json;

    #[test]
    fn targets_at_once_share_the_fleets_requests_in_flight() {
        // (targets at once, requests in flight per target)
        for (targets, want) in [
            (0, 32),
            (1, 32),
            (8, 32),
            (9, 28),
            (50, 5),
            (64, 4),
            (1000, 4),
        ] {
            assert_eq!(in_flight_per_target(targets), want, "{targets} targets");
        }
    }

    fn object(
        api_version: &str,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
        body: Value,
    ) -> ManifestObject {
        ManifestObject {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(str::to_string),
            origin: Origin {
                file: "k8s/x.yaml".into(),
                line: 3,
            },
            body,
            source: None,
        }
    }

    #[test]
    fn kept_response_drops_healthy_objects() {
        let cm = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let deploy = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "shop", "uid": "u", "managedFields": [{}]},
            "data": {"big": "x".repeat(1000)}});
        let template = json!({"spec": {"containers": [{"name": "web", "image": "web:2"}]}});
        let rolling = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2, "managedFields": [{}]},
            "spec": {"replicas": 2, "template": template}, "status": {"observedGeneration": 1}});
        let cases = [
            // Healthy: nothing to watch, nothing kept.
            (config_map, &cm, false, None),
            // Not healthy, but a dry run: no wait follows, nothing kept.
            (rolling.clone(), &deploy, true, None),
            // Not healthy yet: the wait needs it, its pod template only as a digest.
            (
                rolling,
                &deploy,
                false,
                Some(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "generation": 2, "annotations":
                    {crate::cluster::health::TEMPLATE_DIGEST_ANNOTATION:
                        crate::cluster::health::template_digest(&template)}},
                "spec": {"replicas": 2}, "status": {"observedGeneration": 1}})),
            ),
        ];
        for (input, resource, dry_run, want) in cases {
            let returned = serde_json::from_value(input).expect("an object");
            let kept = kept_response(returned, resource, dry_run);
            assert_eq!(kept.as_ref().map(KeptObject::value), want);
        }
    }

    #[test]
    fn body_is_stripped_and_namespaced() {
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "old", "uid": "u", "resourceVersion": "5",
                         "managedFields": [{}], "creationTimestamp": "x", "generation": 2},
            "data": {"a": "b"}, "status": {"x": 1}
        });
        let out = prepare_body(&body, Some("shop"));
        assert_eq!(
            out,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}, "data": {"a": "b"}})
        );
        let cluster = prepare_body(&body, None);
        assert!(cluster["metadata"].get("namespace").is_none());
    }

    #[test]
    fn namespace_defaulting() {
        let own = object("v1", "ConfigMap", "c", Some("mine"), json!({}));
        let none = object("v1", "ConfigMap", "c", None, json!({}));
        let table = [
            (&own, true, Some("mine")),
            (&none, true, Some("shop")),
            (&own, false, None),
            (&none, false, None),
        ];
        for (obj, namespaced, want) in table {
            assert_eq!(
                effective_namespace(obj, namespaced, "shop").as_deref(),
                want
            );
        }
    }

    #[test]
    fn crd_kinds_and_groups() {
        let crd = object(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "widgets.example.com",
            None,
            json!({"spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}}}),
        );
        let deploy = object("apps/v1", "Deployment", "web", None, json!({}));
        let cm = object("v1", "ConfigMap", "c", None, json!({}));
        let kinds = crd_provided_kinds(&[crd.clone(), deploy.clone()]);
        assert!(kinds.contains(&("example.com".to_string(), "Widget".to_string())));
        assert_eq!(
            needed_groups(&[crd, deploy, cm]),
            vec!["", "apiextensions.k8s.io", "apps"]
        );
    }

    #[test]
    fn undeclared_fields_table() {
        let cases: [(&str, &[&str]); 5] = [
            (
                "failed to create typed patch object (rec-x/web; apps/v1, Kind=Deployment): .spec.bogusField: field not declared in schema",
                &[".spec.bogusField"],
            ),
            (
                "failed to create typed patch object (w1; example.com/v1, Kind=Widget): .spec.items[0].x: field not declared in schema",
                &[".spec.items[0].x"],
            ),
            (
                "failed to create typed patch object (rec-x/web; apps/v1, Kind=Deployment): errors:\n  .spec.a: field not declared in schema\n  .spec.b: field not declared in schema",
                &[".spec.a", ".spec.b"],
            ),
            ("etcdserver: request timed out", &[]),
            ("field not declared in schema", &[]),
        ];
        for (message, want) in cases {
            assert_eq!(undeclared_fields(message), want, "{message}");
        }
        // The rest compares with what a real API server answered.
        let Some(shared) = crate::util::shared::shared_for_test("undeclared_fields_table") else {
            return;
        };
        let shared = shared.join("apiserver-recordings");
        let recorded = |name: &str| -> kube::core::Status {
            let text = std::fs::read_to_string(shared.join(name))
                .unwrap_or_else(|e| panic!("recording {name}: {e}"));
            serde_json::from_str(&text).expect("recording parses")
        };
        let widget = object("example.com/v1", "Widget", "w1", Some("rec-crd"), json!({}));
        let deploy = object("apps/v1", "Deployment", "web", Some("rec-x"), json!({}));
        let ingress = object(
            "networking.k8s.io/v1",
            "Ingress",
            "web",
            Some("rec-x"),
            json!({}),
        );
        let mut two = recorded("05-error-500-ssa-unknown-field-deployment.json");
        two.message = "failed to create typed patch object (rec-x/web; networking.k8s.io/v1, Kind=Ingress): errors:\n  .spec.a: field not declared in schema\n  .spec.b: field not declared in schema".into();
        for (status, obj, want) in [
            (
                recorded("06-cr-ssa-unknown-field-500-response.json"),
                &widget,
                ".spec.extra is not a field of example.com/v1 Widget: fix its name or indentation, or add it to the CRD's schema",
            ),
            (
                recorded("05-error-500-ssa-unknown-field-deployment.json"),
                &deploy,
                ".spec.bogusField is not a field of apps/v1 Deployment: fix its name or indentation",
            ),
            (
                two,
                &ingress,
                ".spec.a, .spec.b are not fields of networking.k8s.io/v1 Ingress: fix their names or indentation",
            ),
        ] {
            let failure = describe_apply_error(obj, &kube::Error::Api(Box::new(status)));
            assert_eq!(failure.reason, "FieldNotDeclared");
            assert_eq!(failure.message, want);
        }
    }

    #[test]
    fn managers_in_words() {
        let cases = [
            (
                "\"rollguard-web\"",
                "app web (field manager \"rollguard-web\")",
            ),
            ("rollguard-web", "app web (field manager \"rollguard-web\")"),
            ("\"kubectl\"", "\"kubectl\""),
            ("\"rollguard\"", "\"rollguard\""),
        ];
        for (manager, want) in cases {
            assert_eq!(describe_manager(manager), want);
        }
        assert_eq!(field_manager("shop"), "rollguard-shop");
    }

    #[test]
    fn typed_patch_and_rate_limit_failures_name_the_field() {
        let obj = object("apps/v1", "Deployment", "web", Some("shop"), json!({}));
        let typed = kube::Error::Api(Box::new(kube::core::Status {
            code: 500,
            message: "failed to create typed patch object (shop/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string".into(),
            ..Default::default()
        }));
        let f = describe_apply_error(&obj, &typed);
        assert_eq!(f.reason, "InvalidField");
        assert!(
            f.message.starts_with(
                ".spec.replicas: expected numeric (int or float), got string in apps/v1 Deployment"
            ),
            "{}",
            f.message
        );
        assert_eq!(f.origin, "k8s/x.yaml:3");
    }

    #[test]
    fn conflicts_with_the_old_manager_only_are_taken_over() {
        let conflict = |owners: &[&str]| {
            let causes: Vec<Value> = owners
                .iter()
                .map(|o| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{o}\""), "field": ".data.x"}))
                .collect();
            kube::Error::Api(Box::new(
                serde_json::from_value(json!({"code": 409, "reason": "Conflict", "message": "Apply failed", "details": {"causes": causes}}))
                    .expect("status"),
            ))
        };
        assert!(conflicts_only_with_legacy(&conflict(&["rollguard"])));
        assert!(conflicts_only_with_legacy(&conflict(&[
            "rollguard",
            "rollguard"
        ])));
        assert!(!conflicts_only_with_legacy(&conflict(&[
            "rollguard",
            "kubectl"
        ])));
        assert!(!conflicts_only_with_legacy(&conflict(&["rollguard-other"])));
        assert!(!conflicts_only_with_legacy(&conflict(&[])));
    }

    #[test]
    fn a_refused_field_is_named_at_its_own_line() {
        let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: sidecar
          image: busybox
        - name: web
          image: nginx
          imagePullPolicyy: Always
";
        let objs =
            crate::manifests::parse(text, std::path::Path::new("k8s/web.yaml")).expect("parses");
        let status: kube::core::Status = serde_json::from_value(json!({
            "code": 500, "reason": "InternalError",
            "message": "failed to create typed patch object (shop/web; apps/v1, Kind=Deployment): .spec.template.spec.containers[name=\"web\"].imagePullPolicyy: field not declared in schema",
        }))
        .expect("status");
        let failure = describe_apply_error(&objs[0], &kube::Error::Api(Box::new(status)));
        assert_eq!(failure.reason, "FieldNotDeclared");
        assert_eq!(failure.origin, "k8s/web.yaml:13");
        // Without the source (a stored release), the object's first line.
        let stored = ManifestObject {
            source: None,
            ..objs[0].clone()
        };
        let status: kube::core::Status = serde_json::from_value(json!({
            "code": 500, "reason": "InternalError",
            "message": ".spec.template.spec.containers[name=\"web\"].imagePullPolicyy: field not declared in schema",
        }))
        .expect("status");
        let failure = describe_apply_error(&stored, &kube::Error::Api(Box::new(status)));
        assert_eq!(failure.origin, "k8s/web.yaml:1");
    }

    #[test]
    fn conflicts_name_fields_and_owner() {
        // The recorded answer when shared/ is there, else the same answer written out.
        let text = std::fs::read_to_string(crate::util::shared::shared_path(
            "apiserver-recordings/05-error-409-ssa-conflict-two-fields.json",
        ));
        let status: kube::core::Status = match text {
            Ok(t) => serde_json::from_str(&t).expect("recording parses"),
            Err(_) => serde_json::from_value(json!({
                "code": 409, "reason": "Conflict", "message": "Apply failed",
                "details": {"causes": [
                    {"reason": "FieldManagerConflict", "message": "conflict with \"rollguard\"", "field": ".spec.replicas"},
                    {"reason": "FieldManagerConflict", "message": "conflict with \"rollguard\"", "field": ".spec.template.spec.containers[name=\"web\"].image"}
                ]}
            }))
            .expect("status"),
        };
        assert_eq!(
            conflict_fields(&status),
            vec![
                ".spec.replicas (owned by \"rollguard\")".to_string(),
                ".spec.template.spec.containers[name=\"web\"].image (owned by \"rollguard\")"
                    .to_string()
            ]
        );
        let obj = object("apps/v1", "Deployment", "web", Some("shop"), json!({}));
        let failure = describe_apply_error(&obj, &kube::Error::Api(Box::new(status)));
        assert_eq!(failure.reason, "Conflict");
        assert!(
            failure.message.contains("--force-conflicts"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn apply_errors_become_failures() {
        let unserved =
            ApplyError::UnservedKinds(vec!["example.com/v1 Widget (k8s/w.yaml:1)".into()]);
        let f = apply_failures(&unserved, "https://x");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].reason, "KindNotServed");
        let objects = ApplyError::Objects(vec![ObjectFailure {
            object: "Deployment shop/web".into(),
            origin: "k8s/web.yaml:3".into(),
            reason: "Conflict".into(),
            message: "fields owned by another field manager: .spec.replicas".into(),
        }]);
        let f = apply_failures(&objects, "https://x");
        assert_eq!(f[0].object, "Deployment shop/web");
        assert!(f[0].message.ends_with("(k8s/web.yaml:3)"));
        assert!(apply_failures(&ApplyError::Cancelled, "https://x").is_empty());
    }
}
