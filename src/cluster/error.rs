//! The typed reason a target could not be reached or used, as it goes into the report
//! (below connect and exec_auth, which both make them).

/// Why a target could not be reached, as it goes into the report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct TargetError {
    /// A short machine-friendly reason: Kubeconfig, ContextNotFound, ConnectionRefused, DNS,
    /// TLS, Unauthorized, Forbidden, Timeout, Unreachable, ApiError.
    pub reason: String,
    pub message: String,
}

impl TargetError {
    pub(crate) fn new(reason: &str, message: impl Into<String>) -> Self {
        TargetError {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}
