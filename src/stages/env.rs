//! The environment of a script: rollguard's own, minus what would reach other clusters, plus
//! the deployment it belongs to (`ROLLGUARD_*`) and its KUBECONFIG, then the stage's `env`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Every variable rollguard sets for a script; inherited ones of these names are dropped, so
/// that one a script does not get is really unset.
pub const VARIABLES: &[&str] = &[
    "ROLLGUARD_APP",
    "ROLLGUARD_TARGET",
    "ROLLGUARD_TARGETS",
    "ROLLGUARD_NAMESPACE",
    "ROLLGUARD_REVISION",
    "ROLLGUARD_COMMIT",
    "ROLLGUARD_PREVIOUS_COMMIT",
    "ROLLGUARD_PREVIOUS_REVISION",
    "ROLLGUARD_STAGE",
    "ROLLGUARD_SCOPE",
    "ROLLGUARD_IS_ROLLBACK",
    "ROLLGUARD_DRY_RUN",
    "ROLLGUARD_FAILED_STAGE",
    "ROLLGUARD_FAILURE",
    "ROLLGUARD_ROLLBACK_REASON",
];

/// Why a target rolls back (ROLLGUARD_ROLLBACK_REASON of its rollback commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackReason {
    /// The target itself failed (a stage, the apply or the rollout).
    Failed,
    /// `on_failure` (another target failed) or `on_cancel` rolled it back.
    Policy,
    /// `rollguard rollback`.
    Manual,
}

impl RollbackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RollbackReason::Failed => "failed",
            RollbackReason::Policy => "policy",
            RollbackReason::Manual => "manual",
        }
    }
}

/// Credentials of the CI runner that a script does not get unless its stage lists them in
/// `pass_env`: `GITHUB_TOKEN`, `ACTIONS_RUNTIME_TOKEN`, `ACTIONS_ID_TOKEN_REQUEST_TOKEN`, and
/// any other variable named `*_TOKEN` (the runner's, or a workflow's own secret).
pub fn is_withheld_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_TOKEN") || upper.ends_with("-TOKEN") || upper == "TOKEN"
}

/// The deployment a script runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    pub app: String,
    /// The target (a `target` script); None for a `fleet` script.
    pub target: Option<String>,
    /// Every target taking part (a `fleet` script).
    pub targets: Vec<String>,
    pub namespace: Option<String>,
    pub revision: Option<u64>,
    pub commit: Option<String>,
    /// Of the last good release.
    pub previous_commit: Option<String>,
    pub previous_revision: Option<u64>,
    pub stage: String,
    /// Where the stage runs: a `target` script, or one run once for several targets.
    pub scope: crate::config::Scope,
    pub is_rollback: bool,
    pub dry_run: bool,
    /// During a rollback: the stage that failed ("apply" for the rollout; only when the
    /// target's own failure is the reason) and why.
    pub failed_stage: Option<String>,
    pub failure: Option<String>,
    /// During a rollback: why it rolls back.
    pub rollback_reason: Option<RollbackReason>,
}

/// What a stage adds to or lets through rollguard's environment.
#[derive(Debug, Clone, Copy)]
pub struct StageEnv<'a> {
    /// Wins over everything.
    pub env: &'a BTreeMap<String, String>,
    /// Withheld credentials ([`is_withheld_credential`]) the stage asks for.
    pub pass_env: &'a [String],
}

/// The complete environment of a script. `inherited`: rollguard's environment; `hidden`:
/// variables that must not reach scripts (the targets' `kubeconfig_env`, which hold other
/// clusters' credentials); the runner's credentials only when `stage.pass_env` names them;
/// `stage.env` wins over everything.
pub fn script_env(
    inherited: &HashMap<String, String>,
    hidden: &[String],
    kubeconfig: &Path,
    deployment: &Deployment,
    stage: StageEnv<'_>,
) -> BTreeMap<String, String> {
    let stage_env = stage.env;
    let mut env: BTreeMap<String, String> = inherited
        .iter()
        .filter(|(k, _)| !hidden.contains(k) && !VARIABLES.contains(&k.as_str()))
        .filter(|(k, _)| !is_withheld_credential(k) || stage.pass_env.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert("KUBECONFIG".into(), kubeconfig.display().to_string());
    let d = deployment;
    let mut set = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            env.insert(key.to_string(), value);
        }
    };
    set("ROLLGUARD_APP", Some(d.app.clone()));
    set("ROLLGUARD_TARGET", d.target.clone());
    set(
        "ROLLGUARD_TARGETS",
        d.scope.is_shared().then(|| d.targets.join(" ")),
    );
    set("ROLLGUARD_NAMESPACE", d.namespace.clone());
    set("ROLLGUARD_REVISION", d.revision.map(|r| r.to_string()));
    set("ROLLGUARD_COMMIT", d.commit.clone());
    set("ROLLGUARD_PREVIOUS_COMMIT", d.previous_commit.clone());
    set(
        "ROLLGUARD_PREVIOUS_REVISION",
        d.previous_revision.map(|r| r.to_string()),
    );
    set("ROLLGUARD_STAGE", Some(d.stage.clone()));
    set("ROLLGUARD_SCOPE", Some(d.scope.as_str().to_string()));
    set("ROLLGUARD_IS_ROLLBACK", Some(d.is_rollback.to_string()));
    set("ROLLGUARD_DRY_RUN", Some(d.dry_run.to_string()));
    if d.is_rollback {
        set("ROLLGUARD_FAILED_STAGE", d.failed_stage.clone());
        set("ROLLGUARD_FAILURE", d.failure.clone());
        set(
            "ROLLGUARD_ROLLBACK_REASON",
            d.rollback_reason.map(|r| r.as_str().to_string()),
        );
    }
    for (k, v) in stage_env {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// The value every target agrees on (a fleet script's revision, previous commit, ...), or
/// None when they differ or none has one.
pub fn common<T: PartialEq + Clone>(values: &[Option<T>]) -> Option<T> {
    let first = values.first()?.clone()?;
    values
        .iter()
        .all(|v| v.as_ref() == Some(&first))
        .then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Deployment {
        Deployment {
            app: "shop".into(),
            target: Some("eu".into()),
            namespace: Some("shop".into()),
            revision: Some(3),
            commit: Some("abc".into()),
            previous_commit: Some("def".into()),
            previous_revision: Some(2),
            stage: "smoke".into(),
            ..Default::default()
        }
    }

    #[test]
    fn deploy_env() {
        let inherited: HashMap<String, String> = [
            ("PATH", "/bin"),
            ("KUBECONFIG", "/home/me/.kube/all"),
            ("KUBECONFIG_US", "secret kubeconfig"),
            ("ROLLGUARD_FAILURE", "stale"),
            ("ROLLGUARD_TIMEOUT", "5m"),
            ("GITHUB_TOKEN", "ghs_runner"),
            ("ACTIONS_RUNTIME_TOKEN", "runtime"),
            ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "oidc"),
            ("NPM_TOKEN", "npm"),
            ("GITHUB_REPOSITORY", "o/r"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let stage_env: BTreeMap<String, String> =
            [("URL".to_string(), "http://x".to_string())].into();
        let env = script_env(
            &inherited,
            &["KUBECONFIG_US".to_string()],
            Path::new("/tmp/kc"),
            &deployment(),
            StageEnv {
                env: &stage_env,
                pass_env: &["NPM_TOKEN".to_string()],
            },
        );
        let get = |k: &str| env.get(k).map(String::as_str);
        let cases = [
            // The runner's credentials only when the stage asks for them.
            ("GITHUB_TOKEN", None),
            ("ACTIONS_RUNTIME_TOKEN", None),
            ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", None),
            ("NPM_TOKEN", Some("npm")),
            ("GITHUB_REPOSITORY", Some("o/r")),
            ("PATH", Some("/bin")),
            ("KUBECONFIG", Some("/tmp/kc")),
            ("KUBECONFIG_US", None),
            ("ROLLGUARD_FAILURE", None),
            ("ROLLGUARD_FAILED_STAGE", None),
            ("ROLLGUARD_ROLLBACK_REASON", None),
            ("ROLLGUARD_TIMEOUT", Some("5m")),
            ("ROLLGUARD_APP", Some("shop")),
            ("ROLLGUARD_TARGET", Some("eu")),
            ("ROLLGUARD_TARGETS", None),
            ("ROLLGUARD_NAMESPACE", Some("shop")),
            ("ROLLGUARD_REVISION", Some("3")),
            ("ROLLGUARD_COMMIT", Some("abc")),
            ("ROLLGUARD_PREVIOUS_COMMIT", Some("def")),
            ("ROLLGUARD_PREVIOUS_REVISION", Some("2")),
            ("ROLLGUARD_STAGE", Some("smoke")),
            ("ROLLGUARD_SCOPE", Some("target")),
            ("ROLLGUARD_IS_ROLLBACK", Some("false")),
            ("ROLLGUARD_DRY_RUN", Some("false")),
            ("URL", Some("http://x")),
        ];
        for (key, want) in cases {
            assert_eq!(get(key), want, "{key}");
        }
    }

    #[test]
    fn withheld_credentials_table() {
        for (name, withheld) in [
            ("GITHUB_TOKEN", true),
            ("ACTIONS_RUNTIME_TOKEN", true),
            ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", true),
            ("INPUT_GITHUB_TOKEN", true),
            ("INPUT_GITHUB-TOKEN", true),
            ("npm_token", true),
            ("GITHUB_TOKENS_URL", false),
            ("ACTIONS_RUNTIME_URL", false),
            ("PATH", false),
        ] {
            assert_eq!(is_withheld_credential(name), withheld, "{name}");
        }
    }

    #[test]
    fn rollback_and_fleet_env() {
        let d = Deployment {
            target: None,
            targets: vec!["eu".into(), "us".into()],
            scope: crate::config::Scope::Fleet,
            is_rollback: true,
            failed_stage: Some("smoke".into()),
            failure: Some("exited with code 1".into()),
            rollback_reason: Some(RollbackReason::Failed),
            ..deployment()
        };
        let overrides: BTreeMap<String, String> =
            [("ROLLGUARD_APP".to_string(), "mine".to_string())].into();
        let stage = StageEnv {
            env: &overrides,
            pass_env: &[],
        };
        let env = script_env(&HashMap::new(), &[], Path::new("/k"), &d, stage);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("ROLLGUARD_TARGETS"), Some("eu us"));
        assert_eq!(get("ROLLGUARD_TARGET"), None);
        assert_eq!(get("ROLLGUARD_SCOPE"), Some("fleet"));
        assert_eq!(get("ROLLGUARD_IS_ROLLBACK"), Some("true"));
        assert_eq!(get("ROLLGUARD_FAILED_STAGE"), Some("smoke"));
        assert_eq!(get("ROLLGUARD_FAILURE"), Some("exited with code 1"));
        assert_eq!(get("ROLLGUARD_ROLLBACK_REASON"), Some("failed"));
        assert_eq!(get("ROLLGUARD_APP"), Some("mine"));
    }

    #[test]
    fn common_table() {
        assert_eq!(common(&[Some(2), Some(2)]), Some(2));
        assert_eq!(common(&[Some(2), Some(3)]), None);
        assert_eq!(common(&[Some(2), None]), None);
        assert_eq!(common::<u64>(&[]), None);
    }
}
