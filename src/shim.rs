//! TEMPORARY stand-ins for rg-core's modules (config, manifest, health, report), following
//! RG-CONTRACT.md, so that the engine builds before rg-core lands. Removed at the merge.
#![allow(dead_code)]

pub mod config {
    use std::path::PathBuf;
    use std::time::Duration;

    #[derive(Debug, Clone)]
    pub enum ManifestSource {
        Paths(Vec<String>),
        Render { command: String },
    }
    #[derive(Debug, Clone)]
    pub struct TargetConfig {
        pub name: String,
        pub context: Option<String>,
        pub kubeconfig: Option<PathBuf>,
        pub kubeconfig_env: Option<String>,
        pub namespace: Option<String>,
    }
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum UnschedulablePolicy {
        Warn,
        Fail,
    }
    #[derive(Debug, Clone)]
    pub struct FailFastConfig {
        pub reasons: Vec<String>,
        pub err_image_pull_grace: Duration,
        pub crash_loop_restarts: i32,
        pub unschedulable: UnschedulablePolicy,
        pub unschedulable_grace: Duration,
    }
    impl Default for FailFastConfig {
        fn default() -> Self {
            FailFastConfig {
                reasons: vec![],
                err_image_pull_grace: Duration::from_secs(10),
                crash_loop_restarts: 2,
                unschedulable: UnschedulablePolicy::Warn,
                unschedulable_grace: Duration::from_secs(60),
            }
        }
    }
    #[derive(Debug, Clone)]
    pub struct WaitConfig {
        pub timeout: Duration,
        pub fail_fast: FailFastConfig,
    }
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FailurePolicy {
        RollbackAll,
        RollbackFailed,
        RollbackIfAllFail,
        None,
    }
    #[derive(Debug, Clone)]
    pub struct Config {
        pub app: String,
        pub namespace: Option<String>,
        pub manifests: ManifestSource,
        pub targets: Vec<TargetConfig>,
        pub wait: WaitConfig,
        pub concurrency: usize,
        pub on_failure: FailurePolicy,
        pub base_dir: PathBuf,
        pub source: PathBuf,
    }
    #[derive(Debug, Clone, Default)]
    pub struct Overrides {
        pub kubeconfig: Option<PathBuf>,
        pub contexts: Vec<String>,
        pub timeout: Option<Duration>,
        pub on_failure: Option<FailurePolicy>,
        pub concurrency: Option<usize>,
    }
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    pub struct ConfigError(pub String);
    pub fn load(
        _path: &std::path::Path,
        _overrides: &Overrides,
        _env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Err(ConfigError("config shim".into()))
    }
    pub fn parse_failure_policy(s: &str) -> Option<FailurePolicy> {
        match s {
            "rollback-all" => Some(FailurePolicy::RollbackAll),
            "none" => Some(FailurePolicy::None),
            _ => None,
        }
    }
    pub fn json_schema() -> serde_json::Value {
        serde_json::json!({})
    }
}

pub mod manifest {
    use super::config::Config;
    use std::path::PathBuf;

    #[derive(Debug, Clone)]
    pub struct Origin {
        pub file: PathBuf,
        pub line: usize,
    }
    impl std::fmt::Display for Origin {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}:{}", self.file.display(), self.line)
        }
    }
    #[derive(Debug, Clone)]
    pub struct ManifestObject {
        pub api_version: String,
        pub kind: String,
        pub name: String,
        pub namespace: Option<String>,
        pub origin: Origin,
        pub body: serde_json::Value,
    }
    impl ManifestObject {
        pub fn group(&self) -> &str {
            self.api_version
                .rsplit_once('/')
                .map(|(g, _)| g)
                .unwrap_or("")
        }
        pub fn version(&self) -> &str {
            self.api_version
                .rsplit_once('/')
                .map(|(_, v)| v)
                .unwrap_or(&self.api_version)
        }
        pub fn display_name(&self) -> String {
            match &self.namespace {
                Some(ns) => format!("{} {}/{}", self.kind, ns, self.name),
                None => format!("{} {}", self.kind, self.name),
            }
        }
    }
    #[derive(Debug, Clone)]
    pub struct ApplyPhase {
        pub name: String,
        pub objects: Vec<ManifestObject>,
    }
    #[derive(Debug, Clone, Default)]
    pub struct ManifestSet {
        pub objects: Vec<ManifestObject>,
    }
    impl ManifestSet {
        pub fn phases(&self) -> Vec<ApplyPhase> {
            vec![ApplyPhase {
                name: "all".into(),
                objects: self.objects.clone(),
            }]
        }
    }
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    pub struct ManifestError(pub String);
    pub fn load(_config: &Config) -> Result<ManifestSet, ManifestError> {
        Err(ManifestError("manifest shim".into()))
    }
}

pub mod health {
    use super::config::FailFastConfig;
    use serde_json::Value;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Status {
        Current,
        InProgress,
        Failed,
        Terminating,
        NotFound,
        Unknown,
    }
    #[derive(Debug, Clone)]
    pub struct Assessment {
        pub status: Status,
        pub message: String,
    }
    pub fn assess(_obj: &Value) -> Assessment {
        Assessment {
            status: Status::Current,
            message: String::new(),
        }
    }
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum RevisionSelector {
        PodTemplateHash(String),
        ControllerRevisionHash(String),
    }
    pub fn new_revision_selector(_workload: &Value, _owned: &[Value]) -> Option<RevisionSelector> {
        None
    }
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Severity {
        Fatal,
        Transient,
        Warning,
    }
    #[derive(Debug, Clone)]
    pub struct PodProblem {
        pub pod: String,
        pub container: Option<String>,
        pub reason: String,
        pub message: String,
        pub severity: Severity,
    }
    pub fn pod_problems(_pod: &Value, _policy: &FailFastConfig) -> Vec<PodProblem> {
        vec![]
    }
}

pub mod report {
    use jiff::Timestamp;
    use serde::Serialize;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum TargetOutcome {
        Deployed,
        Failed,
        RolledBack,
        RollbackFailed,
        Skipped,
        Cancelled,
    }
    impl TargetOutcome {
        pub fn as_str(self) -> &'static str {
            match self {
                TargetOutcome::Deployed => "deployed",
                TargetOutcome::Failed => "failed",
                TargetOutcome::RolledBack => "rolled-back",
                TargetOutcome::RollbackFailed => "rollback-failed",
                TargetOutcome::Skipped => "skipped",
                TargetOutcome::Cancelled => "cancelled",
            }
        }
    }
    #[derive(Debug, Clone, Serialize)]
    pub struct CommitInfo {
        pub sha: String,
        pub r#ref: Option<String>,
        pub message: Option<String>,
    }
    #[derive(Debug, Clone, Serialize)]
    pub struct PhaseTiming {
        pub name: String,
        pub seconds: f64,
    }
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct Failure {
        pub object: String,
        pub pod: Option<String>,
        pub container: Option<String>,
        pub reason: String,
        pub message: String,
        pub events: Vec<String>,
    }
    impl Failure {
        pub fn headline(&self) -> String {
            let mut line = self.object.clone();
            if let Some(pod) = &self.pod {
                line.push_str(": pod ");
                line.push_str(pod);
                if let Some(container) = &self.container {
                    line.push_str(" container ");
                    line.push_str(container);
                }
            }
            line.push_str(": ");
            line.push_str(&self.reason);
            line.push_str(": ");
            line.push_str(&self.message);
            line
        }
    }
    #[derive(Debug, Clone, Serialize)]
    pub struct RollbackReport {
        pub to_revision: Option<u64>,
        pub outcome: TargetOutcome,
        pub left_in_place: Vec<String>,
        pub message: Option<String>,
    }
    #[derive(Debug, Clone, Serialize)]
    pub struct TargetReport {
        pub name: String,
        pub outcome: TargetOutcome,
        pub revision: Option<u64>,
        pub started_at: Timestamp,
        pub finished_at: Timestamp,
        pub phases: Vec<PhaseTiming>,
        pub failures: Vec<Failure>,
        pub warnings: Vec<String>,
        pub message: Option<String>,
        pub rollback: Option<RollbackReport>,
    }
    impl TargetReport {
        pub fn new(name: impl Into<String>, outcome: TargetOutcome, at: Timestamp) -> Self {
            TargetReport {
                name: name.into(),
                outcome,
                revision: None,
                started_at: at,
                finished_at: at,
                phases: vec![],
                failures: vec![],
                warnings: vec![],
                message: None,
                rollback: None,
            }
        }
    }
    #[derive(Debug, Clone, Serialize)]
    pub struct Report {
        pub version: u32,
        pub app: String,
        pub commit: Option<CommitInfo>,
        pub outcome: TargetOutcome,
        pub summary: String,
        pub started_at: Timestamp,
        pub finished_at: Timestamp,
        pub targets: Vec<TargetReport>,
        pub dry_run: bool,
    }
    impl Report {
        pub fn new(
            app: impl Into<String>,
            commit: Option<CommitInfo>,
            started_at: Timestamp,
            finished_at: Timestamp,
            targets: Vec<TargetReport>,
        ) -> Self {
            let mut r = Report {
                version: 1,
                app: app.into(),
                commit,
                outcome: overall_outcome(&targets),
                summary: String::new(),
                started_at,
                finished_at,
                targets,
                dry_run: false,
            };
            r.summary = summary_line(&r);
            r
        }
    }
    pub fn overall_outcome(targets: &[TargetReport]) -> TargetOutcome {
        if targets.iter().all(|t| t.outcome == TargetOutcome::Deployed) {
            TargetOutcome::Deployed
        } else if targets
            .iter()
            .any(|t| t.outcome == TargetOutcome::Cancelled)
        {
            TargetOutcome::Cancelled
        } else {
            TargetOutcome::Failed
        }
    }
    pub fn summary_line(report: &Report) -> String {
        format!("{} targets", report.targets.len())
    }
    pub fn exit_code(report: &Report) -> i32 {
        match report.outcome {
            TargetOutcome::Deployed => 0,
            TargetOutcome::Cancelled => 130,
            TargetOutcome::RollbackFailed => 3,
            _ => 1,
        }
    }
    pub fn to_json(report: &Report) -> String {
        serde_json::to_string_pretty(report).unwrap_or_default()
    }
    pub fn to_table(report: &Report, _color: bool) -> String {
        report
            .targets
            .iter()
            .map(|t| format!("{} {}\n", t.name, t.outcome.as_str()))
            .collect()
    }
}
