//! GitHub Deployments (`github.deployments: true`): one deployment per target, in the
//! environment `<app>/<target>` (or the target's `environment:`), with the statuses
//! `in_progress` at the start and `success` or `failure` at the end, each linking the run's log.

use super::api::{Client, GithubError, Op, Reply, Transport};
use super::context::Repo;
use crate::report::{TargetOutcome, TargetReport, clip};

/// GitHub refuses a status description over 140 characters.
const DESCRIPTION_CHARS: usize = 140;

pub use super::api::DeploymentState as State;

/// One target's deployment to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub target: String,
    pub environment: String,
}

/// The environment of a target: its own `environment:`, else `<app>/<target>`.
pub fn environment(app: &str, target: &str, own: Option<&str>) -> String {
    own.map(str::to_string)
        .unwrap_or_else(|| format!("{app}/{target}"))
}

/// The final state and description of a target's deployment: a rolled-back target failed, and
/// the description says what it went back to.
pub fn final_status(t: &TargetReport) -> (State, String) {
    let state = if t.outcome == TargetOutcome::Deployed {
        State::Success
    } else {
        State::Failure
    };
    let back = t
        .rollback
        .as_ref()
        .and_then(|rb| rb.to_revision)
        .map(|rev| match t.outcome {
            TargetOutcome::RolledBack => format!("rolled back to v{rev}"),
            _ => format!("rollback to v{rev} failed"),
        });
    let description = match (t.outcome, back) {
        (TargetOutcome::Deployed, _) => match t.revision {
            Some(rev) => format!("deployed as v{rev}"),
            None => "deployed".to_string(),
        },
        (_, Some(back)) => match t.failures.first() {
            Some(f) => format!("{back}; failed: {}", f.headline()),
            None => format!(
                "{back}; {}",
                t.reason().unwrap_or_else(|| t.outcome.to_string())
            ),
        },
        (outcome, None) => match t.reason() {
            Some(r) => format!("{outcome}: {r}"),
            None => outcome.to_string(),
        },
    };
    (
        state,
        clip(&description.replace(['\r', '\n'], " "), DESCRIPTION_CHARS),
    )
}

/// Creates a deployment of `sha` and returns its id.
pub async fn create<T: Transport>(
    client: &Client<T>,
    repo: &Repo,
    sha: &str,
    planned: &Planned,
) -> Result<u64, GithubError> {
    let what = format!(
        "create the deployment of {} in {repo} (environment {})",
        planned.target, planned.environment
    );
    let op = Op::CreateDeployment {
        repo: repo.clone(),
        sha: sha.to_string(),
        environment: planned.environment.clone(),
        description: format!("rollguard deploy to {}", planned.target),
    };
    match client.call(&what, op).await? {
        Reply::Created(id) => Ok(id),
        _ => Err(GithubError::BadResponse {
            what,
            reason: "the answer has no deployment id".into(),
        }),
    }
}

/// Posts a status of deployment `id`.
pub async fn set_status<T: Transport>(
    client: &Client<T>,
    repo: &Repo,
    id: u64,
    planned: &Planned,
    state: State,
    description: &str,
    log_url: Option<&str>,
) -> Result<(), GithubError> {
    let what = format!(
        "set the deployment status of {} in {repo} to {}",
        planned.target,
        state.as_str()
    );
    let op = Op::SetDeploymentStatus {
        repo: repo.clone(),
        id,
        state,
        environment: planned.environment.clone(),
        description: description.to_string(),
        log_url: log_url.map(str::to_string),
    };
    client.call(&what, op).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RollbackReport;
    use crate::report::tests::{image_failure, target};

    #[test]
    fn environment_table() {
        assert_eq!(environment("shop", "eu", None), "shop/eu");
        assert_eq!(
            environment("shop", "eu", Some("production-eu")),
            "production-eu"
        );
    }

    #[test]
    fn final_status_table() {
        let mut deployed = target("eu", TargetOutcome::Deployed);
        deployed.revision = Some(4);
        let mut rolled = target("us", TargetOutcome::RolledBack);
        rolled.failures.push(image_failure());
        rolled.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: Some(3),
            outcome: TargetOutcome::RolledBack,
            left_in_place: vec![],
            message: None,
        });
        let mut policy = target("ap", TargetOutcome::RolledBack);
        policy.message = Some("rolled back because us failed".into());
        policy.rollback = rolled.rollback.clone();
        let mut broken = target("sa", TargetOutcome::RollbackFailed);
        broken.rollback = Some(RollbackReport {
            started_at: None,
            why: None,
            to_commit: None,
            as_revision: None,
            to_revision: Some(2),
            outcome: TargetOutcome::RollbackFailed,
            left_in_place: vec![],
            message: Some("connection refused".into()),
        });
        let mut first = target("af", TargetOutcome::Failed);
        first.message = Some("connection refused".into());
        let cases = [
            (deployed, State::Success, "deployed as v4"),
            (
                rolled,
                State::Failure,
                "rolled back to v3; failed: Deployment shop/web: pod web-7d9f-x container web: ImagePullBackOff: Back-off pulling image \"nginx:doesnotexist\"",
            ),
            (
                policy,
                State::Failure,
                "rolled back to v3; rolled back because us failed",
            ),
            (
                broken,
                State::Failure,
                "rollback to v2 failed; connection refused",
            ),
            (first, State::Failure, "failed: connection refused"),
        ];
        for (t, state, want) in cases {
            let (s, d) = final_status(&t);
            assert_eq!(s, state, "{}", t.name);
            assert_eq!(d, clip(want, DESCRIPTION_CHARS), "{}", t.name);
            assert!(d.chars().count() <= DESCRIPTION_CHARS);
        }
    }
}
