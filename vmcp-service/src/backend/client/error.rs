//! How a backend operation fails, and how rmcp's errors are read.

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, ServiceError};

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
    /// The TLS handshake failed (an untrusted or expired certificate, a wrong host
    /// name, a server that is not TLS).
    #[error("backend {backend:?} is unreachable: {reason}")]
    Tls {
        /// Backend name.
        backend: Arc<str>,
        /// What went wrong, in words (no URL, no certificate contents).
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
            BackendError::Unreachable { .. } => "unreachable".into(),
            BackendError::Tls { reason, .. } => reason.clone(),
            BackendError::Mcp { error, .. } => format!("error {}", error.code.0),
            BackendError::Timeout { timeout, .. } => format!("timeout after {timeout:?}"),
            BackendError::Transport { .. } => "connection failed".into(),
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
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(e) = e.downcast_ref::<reqwest::Error>()
            && (e.is_connect() || e.is_timeout())
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(super) struct OpenFailure {
    /// The full error text (for logs; may contain the URL).
    pub(super) reason: String,
    /// The backend refused our credentials (401/403).
    pub(super) refused: bool,
    /// The TLS failure in words, when that is what failed.
    pub(super) tls: Option<String>,
}

impl OpenFailure {
    pub(super) fn other(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            refused: false,
            tls: None,
        }
    }

    pub(super) fn into_error(self, backend: Arc<str>) -> BackendError {
        match self.tls {
            Some(reason) => BackendError::Tls { backend, reason },
            None => BackendError::Unreachable {
                backend,
                reason: self.reason,
            },
        }
    }
}

/// The transport's own error inside a failed handshake: rmcp keeps it in fields that
/// `source()` does not expose, and the TLS cause is only found below it.
fn transport_cause(error: &ClientInitializeError) -> Option<&(dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match error {
        ClientInitializeError::TransportError { error, .. } => {
            let inner: &(dyn std::error::Error + 'static) = &*error.error;
            match inner.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::Client(e)) => Some(e),
                _ => Some(inner),
            }
        }
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => transport_cause(fallback),
        _ => None,
    }
}

pub(super) fn describe_init_error(error: ClientInitializeError) -> OpenFailure {
    let refused = error.is_authorization_required() || error.auth_challenge().is_some();
    OpenFailure {
        tls: transport_cause(&error).and_then(vmcp_layers::tls::describe),
        reason: error.to_string(),
        refused,
    }
}
