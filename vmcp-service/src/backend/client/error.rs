//! How a backend operation fails, and how rmcp's errors are read.

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, ServiceError};

use crate::backend::reason::FailureReason;

/// Why a backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The connection could not be opened.
    #[error("backend {backend:?} is unreachable: {reason}")]
    Unreachable {
        /// Backend name.
        backend: Arc<str>,
        /// What went wrong.
        reason: String,
    },
    /// The backend answered with a JSON-RPC error.
    #[error("backend {backend:?} returned an error: {error}")]
    Mcp {
        /// Backend name.
        backend: Arc<str>,
        /// The backend's error, passed through.
        error: rmcp::ErrorData,
    },
    /// The operation did not finish in time.
    #[error("backend {backend:?} did not answer within {timeout:?}")]
    Timeout {
        /// Backend name.
        backend: Arc<str>,
        /// The bound that expired.
        timeout: Duration,
    },
    /// The transport failed mid-operation.
    #[error("backend {backend:?} connection failed: {reason}")]
    Transport {
        /// Backend name.
        backend: Arc<str>,
        /// What went wrong.
        reason: String,
    },
    /// The backend's circuit breaker is open: the call was not attempted.
    #[error("backend {backend:?} is failing; calls are paused (circuit open)")]
    CircuitOpen {
        /// Backend name.
        backend: Arc<str>,
    },
}

impl BackendError {
    /// Whether this failure says the backend is unwell (as opposed to the backend
    /// answering with an error, which proves it is up).
    pub(super) fn is_backend_failure(&self) -> bool {
        !matches!(
            self,
            BackendError::Mcp { .. } | BackendError::CircuitOpen { .. }
        )
    }

    /// A description for status reporting: no URLs, no tokens.
    pub fn summary(&self) -> String {
        match self {
            // The reasons are words from `FailureReason`: no URLs, no type names.
            BackendError::Unreachable { reason, .. } => reason.clone(),
            BackendError::Mcp { error, .. } => format!("error {}", error.code.0),
            BackendError::Timeout { timeout, .. } => format!("timeout after {timeout:?}"),
            BackendError::Transport { reason, .. } => format!("connection failed: {reason}"),
            BackendError::CircuitOpen { .. } => "circuit open".into(),
        }
    }
}

/// Whether the backend refused the request because our session is gone (HTTP 404
/// on a session request): it did not run it.
pub(super) fn is_session_expired(error: &ServiceError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match error {
        ServiceError::TransportSend(e) => matches!(
            e.error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>(),
            Some(StreamableHttpError::SessionExpired)
        ),
        _ => false,
    }
}

/// Whether a failed handshake never reached a server (nothing to retry).
pub(super) fn is_unreachable(error: &ClientInitializeError) -> bool {
    FailureReason::of(error).is_unreachable()
}

/// Why a handshake failed, in words, and whether credentials were refused.
pub(super) fn describe_init_error(error: ClientInitializeError) -> (String, bool) {
    let reason = FailureReason::of(&error);
    let refused = error.is_authorization_required()
        || error.auth_challenge().is_some()
        || reason == FailureReason::AuthRequired;
    (reason.to_string(), refused)
}
