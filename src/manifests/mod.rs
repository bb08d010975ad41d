//! Manifests: load (files, folders, globs, or a render command), parse (multi-document YAML
//! and JSON, `*List` flattened), validate before any cluster is touched (collecting every
//! problem), and order for applying.

use crate::config::{Config, ManifestSource};
use crate::util::yaml::{self, Node, Tree};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
pub struct ApplyPhase {
    /// "namespaces-and-crds", "config-storage-rbac", "bindings", "services", "workloads", "other".
    pub name: String,
    pub objects: Vec<ManifestObject>,
    /// The phase holds CRDs: wait until they are Established and rediscover before the next.
    pub wait_for_crds: bool,
}

const PHASE_NAMES: [&str; 6] = [
    "namespaces-and-crds",
    "config-storage-rbac",
    "bindings",
    "services",
    "workloads",
    "other",
];

/// The apply order of a kind: Namespaces and CRDs; then what workloads consume (service
/// accounts, config, secrets, storage, roles); then bindings (after their roles, or RBAC's
/// escalation check refuses them); then Services (so pods get their env links); then
/// workloads; then everything else (HPAs, PDBs, Ingresses, custom resources, webhooks).
pub fn apply_rank(group: &str, kind: &str) -> usize {
    match (group, kind) {
        ("", "Namespace") | ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        ("", "ServiceAccount" | "ConfigMap" | "Secret" | "PersistentVolume")
        | ("", "PersistentVolumeClaim" | "LimitRange" | "ResourceQuota")
        | ("storage.k8s.io", "StorageClass")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => 1,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => 2,
        ("", "Service") => 3,
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job" | "CronJob")
        | ("", "Pod" | "ReplicationController") => 4,
        _ => 5,
    }
}

/// Kinds known to be cluster-scoped (discovery is the authority; this is for messages and
/// duplicate detection before any cluster is asked).
pub fn is_cluster_scoped_kind(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Namespace" | "Node" | "PersistentVolume")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "storage.k8s.io",
                "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | (
                "rbac.authorization.k8s.io",
                "ClusterRole" | "ClusterRoleBinding"
            )
            | (
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            )
            | ("apiregistration.k8s.io", "APIService")
            | ("networking.k8s.io", "IngressClass")
            | ("node.k8s.io", "RuntimeClass")
    )
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
    pub fn phases(&self) -> Vec<ApplyPhase> {
        let mut phases: Vec<ApplyPhase> = Vec::new();
        for obj in &self.objects {
            let rank = obj.apply_rank();
            let name = PHASE_NAMES[rank];
            match phases.last_mut() {
                Some(phase) if phase.name == name => phase.objects.push(obj.clone()),
                _ => phases.push(ApplyPhase {
                    name: name.to_string(),
                    objects: vec![obj.clone()],
                    wait_for_crds: false,
                }),
            }
        }
        for phase in &mut phases {
            phase.wait_for_crds = phase.objects.iter().any(|o| {
                o.kind == "CustomResourceDefinition" && o.group() == "apiextensions.k8s.io"
            });
        }
        phases
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

    /// sha256 of `to_yaml()`, lowercase hex.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.to_yaml().as_bytes()))
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

/// Loads, validates and orders the manifests of `config`.
pub fn load(config: &Config) -> Result<ManifestSet, ManifestError> {
    let (objects, issues, what) = match &config.manifests {
        ManifestSource::Paths(entries) => {
            let (files, mut issues) = resolve_paths(&config.base_dir, entries, &config.source);
            // Files are named as the user would type them: relative to where rollguard runs
            // (the repository root in CI) when they are below it.
            let cwd = std::env::current_dir().ok();
            let shown = |file: &Path| match cwd.as_deref().map(|c| file.strip_prefix(c)) {
                Some(Ok(relative)) => relative.to_path_buf(),
                _ => file.to_path_buf(),
            };
            let mut objects = Vec::new();
            for file in &files {
                match std::fs::read_to_string(file) {
                    Ok(text) => match parse(&text, &shown(file)) {
                        Ok(mut objs) => objects.append(&mut objs),
                        Err(e) => issues.extend(e.issues().iter().cloned()),
                    },
                    Err(e) => issues.push(ManifestIssue {
                        origin: Origin {
                            file: shown(file),
                            line: 0,
                        },
                        message: format!("cannot read: {e}"),
                    }),
                }
            }
            (objects, issues, format!("manifests {}", entries.join(", ")))
        }
        ManifestSource::Render { command } => {
            let text = render(command, &config.base_dir)?;
            let (objects, issues) = match parse(&text, Path::new(RENDER_ORIGIN)) {
                Ok(objs) => (objs, Vec::new()),
                Err(e) => (Vec::new(), e.issues().to_vec()),
            };
            (objects, issues, format!("the output of `{command}`"))
        }
    };
    // Duplicates among what did parse are reported together with the per-file problems.
    let mut issues = issues;
    issues.extend(duplicates(&objects, config.namespace.as_deref()));
    if !issues.is_empty() {
        return Err(ManifestError::Invalid(issues));
    }
    if objects.is_empty() {
        return Err(ManifestError::Empty(what));
    }
    ManifestSet::new(objects, config.namespace.as_deref())
}

/// The origin file name of objects read from a render command's output.
pub const RENDER_ORIGIN: &str = "<render>";

/// How long a render command may run (kustomize and helm template finish in seconds).
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `command` with `sh -c` in `dir`; its stdout is the manifests.
pub fn render(command: &str, dir: &Path) -> Result<String, ManifestError> {
    render_with_timeout(command, dir, RENDER_TIMEOUT)
}

/// `render` with a deadline: past it the command's whole process group is killed.
pub fn render_with_timeout(
    command: &str,
    dir: &Path,
    timeout: Duration,
) -> Result<String, ManifestError> {
    let fail = |status: String, stderr: String| ManifestError::Render {
        command: command.to_string(),
        status,
        stderr,
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a timeout also stops what the shell started.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("could not start sh: {e}"), String::new()))?;
    // Pipes are drained on threads so a chatty command never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() >= timeout => {
                kill_group(&mut child);
                let _ = child.wait();
                break Err(format!(
                    "did not finish within {}",
                    crate::util::duration::format_duration(timeout)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(format!("could not wait for it: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    // The end of stderr is where the reason usually is.
    let tail = {
        let lines: Vec<&str> = stderr.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    let status = status.map_err(|why| fail(why, tail.clone()))?;
    if !status.success() {
        return Err(fail(status.to_string(), tail));
    }
    String::from_utf8(stdout)
        .map_err(|_| fail("its output is not UTF-8".to_string(), String::new()))
}

fn kill_group(child: &mut std::process::Child) {
    #[cfg(unix)]
    {
        // The group id is the child's pid (process_group(0) above).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .stderr(Stdio::null())
            .status();
    }
    let _ = child.kill();
}

/// Files named by the `manifests` entries: files as given, folders recursively (*.yaml,
/// *.yml, *.json, sorted, hidden entries skipped), globs expanded and sorted. Each file once.
fn resolve_paths(
    base_dir: &Path,
    entries: &[String],
    config_file: &Path,
) -> (Vec<PathBuf>, Vec<ManifestIssue>) {
    let mut files = Vec::new();
    let mut issues = Vec::new();
    let mut seen = HashSet::new();
    // `manifests: [.]` must not pick up rollguard.yaml itself.
    let config_file = std::fs::canonicalize(config_file).ok();
    let mut add = |path: PathBuf, files: &mut Vec<PathBuf>| {
        let canonical = std::fs::canonicalize(&path).ok();
        if canonical.is_some() && canonical == config_file {
            return;
        }
        // One file reached by several paths (symlinks, overlapping entries) counts once.
        if seen.insert(canonical.unwrap_or_else(|| path.clone())) {
            files.push(path);
        }
    };
    for entry in entries {
        let joined = clean_path(&base_dir.join(entry));
        let problem = |message: String| ManifestIssue {
            origin: Origin {
                file: joined.clone(),
                line: 0,
            },
            message,
        };
        if entry.contains(['*', '?', '[']) {
            // Only the entry is a pattern: the config's folder may contain `[` or `*`.
            let pattern = if Path::new(entry).is_absolute() {
                entry.clone()
            } else {
                let base = glob::Pattern::escape(&base_dir.to_string_lossy());
                format!("{}/{entry}", base.trim_end_matches('/'))
            };
            match glob::glob(&pattern) {
                Ok(paths) => {
                    let mut matched: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
                    matched.sort();
                    if matched.is_empty() {
                        issues.push(problem(format!(
                            "manifests entry {entry:?} matches no files"
                        )));
                    }
                    for path in matched {
                        if path.is_dir() {
                            for f in walk_dir(&path) {
                                add(f, &mut files);
                            }
                        } else {
                            add(path, &mut files);
                        }
                    }
                }
                Err(e) => issues.push(problem(format!(
                    "manifests entry {entry:?} is not a valid glob: {e}"
                ))),
            }
        } else if joined.is_dir() {
            let found = walk_dir(&joined);
            if found.is_empty() {
                issues.push(problem(format!(
                    "manifests entry {entry:?} is a folder without *.yaml, *.yml or *.json files"
                )));
            }
            for f in found {
                add(f, &mut files);
            }
        } else if joined.is_file() {
            add(joined.clone(), &mut files);
        } else {
            issues.push(problem(format!(
                "manifests entry {entry:?}: no such file or folder (paths are relative to the config file's folder)"
            )));
        }
    }
    (files, issues)
}

fn walk_dir(dir: &Path) -> Vec<PathBuf> {
    walk_dir_depth(dir, 0)
}

/// Symlinked folders are followed (shared manifests often are), to a depth that a symlink
/// loop cannot exceed for long.
const MAX_FOLDER_DEPTH: usize = 32;

fn walk_dir_depth(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if depth > MAX_FOLDER_DEPTH {
        return out;
    }
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut entries: Vec<PathBuf> = read.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            out.extend(walk_dir_depth(&path, depth + 1));
        } else if path
            .extension()
            .is_some_and(|e| matches!(e.to_str(), Some("yaml" | "yml" | "json")))
        {
            out.push(path);
        }
    }
    out
}

/// Drops `./` components so messages read `k8s/web.yaml:3`.
fn clean_path(path: &Path) -> PathBuf {
    let cleaned: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if cleaned.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        cleaned
    }
}

/// Parses one file's text: multi-document YAML, or JSON (one value or a stream) for *.json.
/// All problems of the file are returned together.
pub fn parse(text: &str, file: &Path) -> Result<Vec<ManifestObject>, ManifestError> {
    let mut objects = Vec::new();
    let mut issues = Vec::new();
    let issue = |line: usize, message: String| ManifestIssue {
        origin: Origin {
            file: file.to_path_buf(),
            line,
        },
        message,
    };

    if is_kustomization_file(file) {
        return Err(ManifestError::Invalid(vec![issue(
            1,
            KUSTOMIZE_MESSAGE.to_string(),
        )]));
    }

    let is_json = file.extension().is_some_and(|e| e == "json");
    if is_json {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        loop {
            let start_line = line_of_offset(text, skip_ws(text, stream.byte_offset()));
            match stream.next() {
                None => break,
                Some(Ok(value)) => {
                    collect(&value, start_line, None, file, &mut objects, &mut issues)
                }
                Some(Err(e)) => {
                    issues.push(issue(e.line(), format!("not valid JSON: {e}")));
                    break;
                }
            }
        }
    } else {
        for doc in yaml::split_documents(text) {
            match yaml::parse_document(&doc) {
                Ok(node) => {
                    if matches!(node.value, Tree::Null) {
                        continue;
                    }
                    let value = node.to_json();
                    collect(
                        &value,
                        node.line,
                        Some(&node),
                        file,
                        &mut objects,
                        &mut issues,
                    );
                }
                Err(e) => issues.push(issue(e.line, format!("not valid YAML: {}", e.message))),
            }
        }
    }
    if issues.is_empty() {
        Ok(objects)
    } else {
        Err(ManifestError::Invalid(issues))
    }
}

const KUSTOMIZE_MESSAGE: &str = "is a kustomize input, not a manifest: use `render: kustomize build <dir>` in rollguard.yaml instead of listing it";

fn is_kustomization_file(file: &Path) -> bool {
    matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("kustomization.yaml" | "kustomization.yml" | "Kustomization")
    )
}

fn skip_ws(text: &str, offset: usize) -> usize {
    let rest = &text[offset.min(text.len())..];
    offset + (rest.len() - rest.trim_start().len())
}

fn line_of_offset(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Validates one document (flattening `*List` objects) into `objects`, or explains in `issues`.
fn collect(
    value: &Value,
    line: usize,
    node: Option<&Node>,
    file: &Path,
    objects: &mut Vec<ManifestObject>,
    issues: &mut Vec<ManifestIssue>,
) {
    let mut problem = |message: String| {
        issues.push(ManifestIssue {
            origin: Origin {
                file: file.to_path_buf(),
                line,
            },
            message,
        })
    };
    let Some(map) = value.as_object() else {
        let what = match value {
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            _ => "null",
        };
        problem(format!(
            "this document is {what}, not a Kubernetes object (a mapping with apiVersion, kind and metadata.name)"
        ));
        return;
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.starts_with("kustomize.config.k8s.io/") {
        problem(format!("{kind} {KUSTOMIZE_MESSAGE}"));
        return;
    }
    // `kind: List` (and `DeploymentList` etc.): flatten its items, nested lists too.
    if kind.ends_with("List")
        && let Some(items) = map.get("items").and_then(Value::as_array)
    {
        let item_nodes = node.and_then(|n| match &n.get("items")?.value {
            Tree::Seq(nodes) => Some(nodes),
            _ => None,
        });
        for (i, item) in items.iter().enumerate() {
            let item_node = item_nodes.and_then(|nodes| nodes.get(i));
            let item_line = item_node.map_or(line, |n| n.line);
            collect(item, item_line, item_node, file, objects, issues);
        }
        return;
    }
    let mut missing = Vec::new();
    if api_version.is_empty() {
        missing.push("apiVersion");
    }
    if kind.is_empty() {
        missing.push("kind");
    }
    let metadata = map.get("metadata").and_then(Value::as_object);
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let generate_name = metadata
        .and_then(|m| m.get("generateName"))
        .and_then(Value::as_str);
    let label = if kind.is_empty() {
        "object".to_string()
    } else {
        kind.to_string()
    };
    if name.is_empty() {
        if let Some(prefix) = generate_name {
            problem(format!(
                "{label} with generateName {prefix:?} cannot be applied: server-side apply needs metadata.name; give it a fixed name"
            ));
            return;
        }
        missing.push("metadata.name");
    }
    if !missing.is_empty() {
        let named = if name.is_empty() {
            String::new()
        } else {
            format!(" {name:?}")
        };
        problem(format!("{label}{named} is missing {}", missing.join(", ")));
        return;
    }
    let namespace = match metadata.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) if !ns.is_empty() => Some(ns.clone()),
        Some(other) => {
            problem(format!(
                "{kind} {name:?}: metadata.namespace must be a non-empty string, not {other}"
            ));
            return;
        }
    };
    let mut body = value.clone();
    // Exported objects (`kubectl get -o yaml`) carry managedFields, which apply refuses.
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    objects.push(ManifestObject {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace,
        origin: Origin {
            file: file.to_path_buf(),
            line,
        },
        body,
    });
}

/// Objects that name the same thing twice (group, kind, namespace, name), both places named.
fn duplicates(objects: &[ManifestObject], default_namespace: Option<&str>) -> Vec<ManifestIssue> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, Overrides};
    use crate::util::shared::shared_path;

    fn parse_str(text: &str) -> Result<Vec<ManifestObject>, Vec<String>> {
        parse(text, Path::new("k8s/app.yaml"))
            .map_err(|e| e.issues().iter().map(|i| i.to_string()).collect())
    }

    #[test]
    fn multi_document_with_comments_crlf_and_empty_docs() {
        let text = "# header\r\n---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: a\r\ndata: {k: v}\r\n---\r\n---\r\n# only a comment\r\n---\r\napiVersion: apps/v1\r\nkind: Deployment\r\nmetadata: {name: web, namespace: shop}\r\n";
        let objs = parse_str(text).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].origin.to_string(), "k8s/app.yaml:3");
        assert_eq!(objs[0].body["data"]["k"], "v");
        assert_eq!(objs[1].display_name(), "Deployment shop/web");
        assert_eq!(objs[1].origin.line, 12);
        assert_eq!(objs[1].group(), "apps");
        assert_eq!(objs[1].version(), "v1");
        assert_eq!(objs[0].group(), "");
        assert_eq!(objs[0].version(), "v1");
    }

    #[test]
    fn lists_are_flattened_with_item_lines() {
        let text = "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: a}\n  - apiVersion: v1\n    kind: ConfigMapList\n    items:\n      - apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: b}\n";
        let objs = parse_str(text).unwrap();
        let names: Vec<(&str, usize)> = objs
            .iter()
            .map(|o| (o.name.as_str(), o.origin.line))
            .collect();
        assert_eq!(names, vec![("a", 4), ("b", 10)]);
    }

    #[test]
    fn json_files_single_and_stream() {
        let text = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"s\"}}]}\n\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}\n";
        let objs = parse(text, Path::new("x.json")).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].origin.line, 3);
        let err = parse("{\"a\": ", Path::new("x.json")).unwrap_err();
        assert!(
            err.to_string().starts_with("x.json:1: not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn validation_error_table() {
        let cases = [
            (
                "kind: ConfigMap\nmetadata: {name: a}\n",
                "k8s/app.yaml:1: ConfigMap \"a\" is missing apiVersion",
            ),
            (
                "apiVersion: v1\nmetadata: {name: a}\n",
                "k8s/app.yaml:1: object \"a\" is missing kind",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\n",
                "k8s/app.yaml:1: ConfigMap is missing metadata.name",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n",
                "k8s/app.yaml:1: ConfigMap is missing metadata.name",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: migrate-}\n",
                "k8s/app.yaml:1: Job with generateName \"migrate-\" cannot be applied: server-side apply needs metadata.name",
            ),
            (
                "- a\n- b\n",
                "k8s/app.yaml:1: this document is a list, not a Kubernetes object",
            ),
            (
                "just a string\n",
                "k8s/app.yaml:1: this document is a string, not a Kubernetes object",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n",
                "k8s/app.yaml:",
            ),
            (
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
                "k8s/app.yaml:1: Kustomization is a kustomize input, not a manifest: use `render: kustomize build <dir>`",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: 5}\n",
                "k8s/app.yaml:1: ConfigMap \"a\": metadata.namespace must be a non-empty string",
            ),
        ];
        for (text, want) in cases {
            let errs = parse_str(text).unwrap_err();
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "want {want:?}, got {errs:#?}"
            );
        }
    }

    #[test]
    fn all_problems_of_a_file_are_reported() {
        let text = "apiVersion: v1\nkind: ConfigMap\n---\nkey: [unclosed\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: Secret\nmetadata: {name: s}\n";
        let errs = parse_str(text).unwrap_err();
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(errs[0].starts_with("k8s/app.yaml:1:"), "{errs:#?}");
        assert!(
            errs[1].starts_with("k8s/app.yaml:4: not valid YAML"),
            "{errs:#?}"
        );
        assert!(errs[2].starts_with("k8s/app.yaml:10:"), "{errs:#?}");
    }

    #[test]
    fn in_namespace_fills_only_missing() {
        let objs = parse_str("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: x}\n").unwrap();
        let a = objs[0].in_namespace("shop");
        assert_eq!(a.display_name(), "ConfigMap shop/a");
        assert_eq!(a.body["metadata"]["namespace"], "shop");
        let b = objs[1].in_namespace("shop");
        assert_eq!(b.display_name(), "ConfigMap x/b");
        assert_eq!(b.body["metadata"]["namespace"], "x");
    }

    #[test]
    fn managed_fields_are_stripped() {
        let objs = parse_str("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  managedFields: [{manager: kubectl}]\n").unwrap();
        assert!(objs[0].body["metadata"].get("managedFields").is_none());
    }

    fn obj(
        api_version: &str,
        kind: &str,
        name: &str,
        ns: Option<&str>,
        line: usize,
    ) -> ManifestObject {
        let mut body = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        if let Some(ns) = ns {
            body["metadata"]["namespace"] = ns.into();
        }
        ManifestObject {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(str::to_string),
            origin: Origin {
                file: "a.yaml".into(),
                line,
            },
            body,
        }
    }

    #[test]
    fn duplicates_name_both_places() {
        let objs = vec![
            obj("apps/v1", "Deployment", "web", Some("shop"), 1),
            obj("apps/v1", "Deployment", "web", None, 20),
            obj("apps/v1", "Deployment", "web", Some("other"), 30),
            obj("v1", "Namespace", "shop", None, 40),
            obj("v1", "Namespace", "shop", Some("ignored"), 50),
            obj("extensions/v1beta1", "Deployment", "web", Some("shop"), 60),
        ];
        let err = ManifestSet::new(objs, Some("shop")).unwrap_err();
        let msgs: Vec<String> = err.issues().iter().map(|i| i.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "a.yaml:20: duplicate object Deployment shop/web: also defined at a.yaml:1",
                "a.yaml:50: duplicate object Namespace ignored/shop: also defined at a.yaml:40",
            ]
        );
    }

    #[test]
    fn apply_order_and_phases() {
        let objs = vec![
            obj("autoscaling/v2", "HorizontalPodAutoscaler", "web", None, 1),
            obj("apps/v1", "Deployment", "web", None, 2),
            obj("v1", "Service", "web", None, 3),
            obj("rbac.authorization.k8s.io/v1", "RoleBinding", "rb", None, 4),
            obj("example.com/v1", "Widget", "w", None, 5),
            obj("rbac.authorization.k8s.io/v1", "Role", "r", None, 6),
            obj("v1", "ConfigMap", "cfg", None, 7),
            obj(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "widgets.example.com",
                None,
                8,
            ),
            obj("v1", "ServiceAccount", "sa", None, 9),
            obj("v1", "Namespace", "shop", None, 10),
            obj("batch/v1", "Job", "migrate", None, 11),
            obj("apps/v1", "StatefulSet", "db", None, 12),
        ];
        let set = ManifestSet::new(objs, None).unwrap();
        let order: Vec<&str> = set.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            order,
            vec![
                "widgets.example.com",
                "shop",
                "r",
                "cfg",
                "sa",
                "rb",
                "web",
                "web",
                "migrate",
                "db",
                "web",
                "w"
            ]
        );
        let phases = set.phases();
        let summary: Vec<(&str, usize, bool)> = phases
            .iter()
            .map(|p| (p.name.as_str(), p.objects.len(), p.wait_for_crds))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("namespaces-and-crds", 2, true),
                ("config-storage-rbac", 3, false),
                ("bindings", 1, false),
                ("services", 1, false),
                ("workloads", 3, false),
                ("other", 2, false),
            ]
        );
        let no_crd = ManifestSet::new(vec![obj("v1", "Namespace", "shop", None, 1)], None).unwrap();
        assert!(!no_crd.phases()[0].wait_for_crds);
    }

    #[test]
    fn yaml_round_trip_and_digest() {
        let text = std::fs::read_to_string(
            corpus().join("microservices-demo/release/kubernetes-manifests.yaml"),
        )
        .unwrap();
        let mut objs = parse(&text, Path::new("m.yaml")).unwrap();
        // Values that YAML would retype if written carelessly.
        objs.push(ManifestObject {
            body: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tricky"},
                "data": {"a": "5", "b": "true", "c": "null", "d": "0x1F", "e": "", "f": "line1\nline2\n", "g": "- x", "h": "#no", "i": "1e3", "j": "~", "k": "yes", "l": "010"}}),
            ..obj("v1", "ConfigMap", "tricky", None, 1)
        });
        let set = ManifestSet::new(objs, None).unwrap();
        let yaml_text = set.to_yaml();
        let back =
            ManifestSet::new(parse(&yaml_text, Path::new("record.yaml")).unwrap(), None).unwrap();
        let bodies = |s: &ManifestSet| s.objects.iter().map(|o| o.body.clone()).collect::<Vec<_>>();
        assert_eq!(bodies(&back), bodies(&set));
        assert_eq!(back.digest(), set.digest());
        assert_eq!(set.digest().len(), 64);
        let mut changed = set.clone();
        changed.objects[0].body["metadata"]["labels"] = serde_json::json!({"x": "y"});
        assert_ne!(changed.digest(), set.digest());
    }

    fn corpus() -> PathBuf {
        shared_path("corpus")
    }

    #[test]
    fn every_corpus_file_loads_or_is_refused_clearly() {
        let files = walk_dir(&corpus());
        assert_eq!(files.len(), 23, "{files:#?}");
        let mut kinds: HashMap<String, usize> = HashMap::new();
        let mut refused = Vec::new();
        let mut loaded_docs = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            match parse(&text, file) {
                Ok(objs) => {
                    assert!(!objs.is_empty(), "{}", file.display());
                    loaded_docs += objs.len();
                    for o in objs {
                        assert!(o.origin.line >= 1);
                        *kinds
                            .entry(format!("{}/{}", o.api_version, o.kind))
                            .or_default() += 1;
                    }
                }
                Err(e) => refused.push((file.clone(), e.to_string())),
            }
        }
        assert_eq!(refused.len(), 1, "{refused:#?}");
        assert!(
            refused[0]
                .0
                .ends_with("podinfo/kustomize/kustomization.yaml")
        );
        assert!(
            refused[0].1.contains(
                ":1: is a kustomize input, not a manifest: use `render: kustomize build <dir>`"
            ),
            "{}",
            refused[0].1
        );
        assert_eq!(loaded_docs, 58);
        let want = [
            ("apps/v1/Deployment", 20),
            ("v1/Service", 19),
            ("v1/ServiceAccount", 13),
            ("autoscaling/v2/HorizontalPodAutoscaler", 3),
            ("rbac.authorization.k8s.io/v1/Role", 1),
            ("rbac.authorization.k8s.io/v1/RoleBinding", 1),
            ("v1/Namespace", 1),
        ];
        assert_eq!(kinds.len(), want.len(), "{kinds:#?}");
        for (k, n) in want {
            assert_eq!(kinds.get(k), Some(&n), "{k}");
        }
    }

    /// The corpus INDEX.md lists, per file, each document's `apiVersion / kind`: the objects
    /// parsed from every file must be exactly those, in order.
    #[test]
    fn corpus_matches_its_index() {
        let index = std::fs::read_to_string(corpus().join("INDEX.md")).unwrap();
        let mut expected: Vec<(String, Vec<String>)> = Vec::new();
        for line in index.lines() {
            if let Some(rest) = line.strip_prefix("- `") {
                let path = rest.split('`').next().unwrap().to_string();
                expected.push((path, Vec::new()));
            } else if let Some(doc) = line.strip_prefix("  - ") {
                let last = expected.last_mut().expect("document before file");
                if doc != "(empty document)" {
                    last.1.push(doc.to_string());
                }
            }
        }
        assert_eq!(expected.len(), 23);
        for (rel, docs) in expected {
            let path = corpus().join(&rel);
            let text = std::fs::read_to_string(&path).unwrap();
            match parse(&text, &path) {
                Ok(objs) => {
                    let got: Vec<String> = objs
                        .iter()
                        .map(|o| format!("{} / {}", o.api_version, o.kind))
                        .collect();
                    assert_eq!(got, docs, "{rel}");
                }
                Err(e) => {
                    assert_eq!(
                        docs,
                        vec!["kustomize.config.k8s.io/v1beta1 / Kustomization"],
                        "{rel}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn microservices_demo_loads_in_phases() {
        let dir = tempfile::tempdir().unwrap();
        let demo = corpus().join("microservices-demo/release");
        let body = format!(
            "app: shop\nnamespace: shop\nmanifests: [{}]\ntargets: [{{name: eu, context: c}}]\n",
            demo.display()
        );
        let set = load(&config_for(dir.path(), &body)).unwrap();
        assert_eq!(set.len(), 35);
        let phases: Vec<(String, usize)> = set
            .phases()
            .into_iter()
            .map(|p| (p.name, p.objects.len()))
            .collect();
        assert_eq!(
            phases,
            vec![
                ("config-storage-rbac".to_string(), 11),
                ("services".to_string(), 12),
                ("workloads".to_string(), 12),
            ]
        );
        assert!(set.objects.iter().all(|o| o.origin.line > 0));
    }

    fn config_for(dir: &Path, body: &str) -> config::Config {
        let path = dir.join("rollguard.yaml");
        std::fs::write(&path, body).unwrap();
        config::load(&path, &Overrides::default(), &|_| None).unwrap()
    }

    #[test]
    fn load_folder_glob_and_file_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let k8s = dir.path().join("k8s");
        std::fs::create_dir_all(k8s.join("sub")).unwrap();
        std::fs::create_dir_all(k8s.join(".hidden")).unwrap();
        std::fs::write(
            k8s.join("b.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
        )
        .unwrap();
        std::fs::write(
            k8s.join("a.yml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
        )
        .unwrap();
        std::fs::write(
            k8s.join("sub/c.json"),
            "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"cfg\"}}",
        )
        .unwrap();
        std::fs::write(k8s.join("README.md"), "not yaml").unwrap();
        std::fs::write(k8s.join(".hidden/x.yaml"), "garbage: [").unwrap();
        std::fs::write(
            dir.path().join("extra.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
        )
        .unwrap();

        let c = config_for(
            dir.path(),
            "app: shop\nnamespace: shop\nmanifests: [k8s/, \"extra*.yaml\", k8s/b.yaml]\ntargets: [{name: eu, context: c}]\n",
        );
        let set = load(&c).unwrap();
        let names: Vec<String> = set.objects.iter().map(|o| o.display_name()).collect();
        assert_eq!(
            names,
            vec![
                "Namespace shop",
                "ConfigMap cfg",
                "Service web",
                "Deployment web"
            ]
        );
    }

    #[test]
    fn load_skips_the_config_file_and_reports_bad_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
        )
        .unwrap();
        let c = config_for(
            dir.path(),
            "app: shop\nmanifests: [.]\ntargets: [{name: eu, context: c}]\n",
        );
        let set = load(&c).unwrap();
        assert_eq!(set.len(), 1);

        let c = config_for(
            dir.path(),
            "app: shop\nmanifests: [nope/, \"*.json\", cm.yaml]\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err().to_string();
        assert!(
            err.contains("manifests entry \"nope/\": no such file or folder"),
            "{err}"
        );
        assert!(
            err.contains("manifests entry \"*.json\" matches no files"),
            "{err}"
        );

        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        std::fs::write(empty.join("blank.yaml"), "# nothing here\n---\n").unwrap();
        let c = config_for(
            dir.path(),
            "app: shop\nmanifests: [empty/]\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err();
        assert!(matches!(err, ManifestError::Empty(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "no Kubernetes objects found in manifests empty/"
        );
    }

    #[test]
    fn load_collects_problems_of_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let k8s = dir.path().join("k8s");
        std::fs::create_dir(&k8s).unwrap();
        std::fs::write(
            k8s.join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n",
        )
        .unwrap();
        std::fs::write(
            k8s.join("b.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n",
        )
        .unwrap();
        std::fs::write(
            k8s.join("c.yaml"),
            "\n\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n",
        )
        .unwrap();
        let c = config_for(
            dir.path(),
            "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err().to_string();
        assert!(
            err.contains("b.yaml:1: ConfigMap with generateName"),
            "{err}"
        );
        let a = k8s.join("a.yaml");
        assert!(
            err.ends_with(&format!(
                "c.yaml:3: duplicate object ConfigMap dup: also defined at {}:1",
                a.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn globs_under_a_folder_with_pattern_characters_and_symlink_loops() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("team [a]*");
        std::fs::create_dir_all(base.join("k8s")).unwrap();
        std::fs::write(
            base.join("k8s/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
        )
        .unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(base.join("k8s"), base.join("k8s/loop")).unwrap();
        let c = config_for(
            &base,
            "app: shop\nmanifests: [\"k8s/*.yaml\"]\ntargets: [{name: eu, context: c}]\n",
        );
        assert_eq!(load(&c).unwrap().len(), 1);
        // The folder walk follows the loop only so far, and the file counts once.
        let c = config_for(
            &base,
            "app: shop\nmanifests: [k8s, k8s/cm.yaml]\ntargets: [{name: eu, context: c}]\n",
        );
        assert_eq!(load(&c).unwrap().len(), 1);
    }

    #[test]
    fn render_command_output_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("in.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-render}\n",
        )
        .unwrap();
        let c = config_for(
            dir.path(),
            "app: shop\nrender: \"cat in.yaml; echo '---'; echo 'apiVersion: v1'\"\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err().to_string();
        assert!(
            err.starts_with("<render>:5: object is missing kind, metadata.name"),
            "{err}"
        );

        let c = config_for(
            dir.path(),
            "app: shop\nrender: cat in.yaml\ntargets: [{name: eu, context: c}]\n",
        );
        let set = load(&c).unwrap();
        assert_eq!(set.objects[0].name, "from-render");
        assert_eq!(set.objects[0].origin.to_string(), "<render>:1");

        let c = config_for(
            dir.path(),
            "app: shop\nrender: \"echo building >&2; echo 'kustomize: no such dir' >&2; exit 3\"\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err().to_string();
        assert!(err.starts_with("render command `echo building >&2; echo 'kustomize: no such dir' >&2; exit 3` failed (exit status: 3):\nbuilding\nkustomize: no such dir"), "{err}");
    }

    #[test]
    fn render_timeout_kills_the_command_and_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let err = render_with_timeout(
            "echo starting >&2; sleep 30 & sleep 30",
            dir.path(),
            Duration::from_millis(300),
        )
        .unwrap_err()
        .to_string();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(err.contains("did not finish within 300ms"), "{err}");
        assert!(err.contains("starting"), "{err}");
        // Large output does not deadlock on a full pipe.
        let out = render("yes 'a: b' | head -c 2000000", dir.path()).unwrap();
        assert_eq!(out.len(), 2_000_000);
    }

    #[test]
    fn hostile_yaml_is_refused_quickly() {
        let mut bomb = String::from(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        );
        for i in 1..15 {
            bomb.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                vec![format!("*a{}", i - 1); 10].join(", ")
            ));
        }
        let deep = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {}{}\n",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        // How fast they are refused is the benchmark's business; here: refused, not hung or panicked.
        for text in [bomb, deep] {
            let err = parse(&text, Path::new("evil.yaml"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("evil.yaml:"), "{err}");
        }
    }

    #[test]
    fn truncated_and_mangled_files_never_panic() {
        for rel in [
            "corpus/microservices-demo/release/kubernetes-manifests.yaml",
            "corpus/podinfo/deploy/webapp/common/reconciler-rbac.yaml",
            "apiserver-recordings/02-deployment-final-get.json",
        ] {
            let path = shared_path(rel);
            let text = std::fs::read_to_string(&path).unwrap();
            let mut cut = 0;
            while cut < text.len() {
                if text.is_char_boundary(cut) {
                    let _ = parse(&text[..cut], &path);
                    let mangled = format!("{}\t: - [{}", &text[..cut], &text[cut..]);
                    let _ = parse(&mangled, &path);
                }
                cut += 613;
            }
        }
    }

    #[test]
    fn large_sets_parse_fast() {
        let mut text = String::new();
        for i in 0..500 {
            text.push_str(&format!("---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  labels: {{app: app-{i}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: app-{i}}}}}\n  template:\n    metadata: {{labels: {{app: app-{i}}}}}\n    spec:\n      containers:\n        - name: c\n          image: nginx:1.27\n          ports: [{{containerPort: 80}}]\n"));
        }
        let objs = parse(&text, Path::new("big.yaml")).unwrap();
        assert_eq!(objs.len(), 500);
        assert_eq!(objs[499].origin.line, 499 * 16 + 2);
        let set = ManifestSet::new(objs, Some("shop")).unwrap();
        let _ = set.digest();
    }
}
