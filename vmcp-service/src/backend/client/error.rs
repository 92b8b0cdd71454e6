//! How a backend operation fails, and how rmcp's errors are read.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use rmcp::service::{ClientInitializeError, ServiceError};

use crate::backend::reason::FailureReason;
use crate::backend::sse::SseTransportError;
use crate::backend::stdio::SpawnError;

/// Why a backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The connection could not be opened.
    #[error("backend {backend:?} is unreachable: {source}")]
    Unreachable {
        /// Backend name.
        backend: Arc<str>,
        /// What went wrong.
        source: OpenError,
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
    #[error("backend {backend:?} connection failed: {}", FailureReason::of(.source))]
    Transport {
        /// Backend name.
        backend: Arc<str>,
        /// What went wrong.
        source: ServiceError,
    },
    /// No credentials for the backend could be had (token exchange failed): the
    /// call was not attempted.
    #[error("backend {backend:?}: no credentials: {source}")]
    Credentials {
        /// Backend name.
        backend: Arc<str>,
        /// Why (in words; never a token or secret).
        source: crate::backend::exchange::ExchangeError,
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

    /// Whether the gateway itself ran out of file descriptors (or socket buffers)
    /// on the way to the backend: a failure of this process, not of the backend.
    pub(super) fn is_local_exhaustion(&self) -> bool {
        let reason = match self {
            BackendError::Unreachable { source, .. } => source.reason(),
            BackendError::Transport { source, .. } => Some(FailureReason::of(source)),
            _ => None,
        };
        reason == Some(FailureReason::LocalResources)
    }

    /// A description for status reporting: no URLs, no tokens.
    pub fn summary(&self) -> String {
        match self {
            // The reasons are words from `FailureReason`: no URLs, no type names.
            BackendError::Unreachable { source, .. } => source.to_string(),
            BackendError::Mcp { error, .. } => format!("error {}", error.code.0),
            BackendError::Timeout { timeout, .. } => format!("timeout after {timeout:?}"),
            BackendError::Transport { source, .. } => {
                format!("connection failed: {}", FailureReason::of(source))
            }
            BackendError::CircuitOpen { .. } => "circuit open".into(),
            BackendError::Credentials { source, .. } => format!("no credentials: {source}"),
        }
    }

    /// Whether the backend refused our credentials (HTTP 401 or 403): the request
    /// was not run.
    pub fn credentials_refused(&self) -> bool {
        match self {
            BackendError::Unreachable { source, .. } => source.credentials_refused(),
            BackendError::Transport { source, .. } => {
                FailureReason::of(source) == FailureReason::AuthRequired
                    || source_chain(source).any(|e| {
                        matches!(e.downcast_ref::<super::direct::DirectError>(),
                            Some(super::direct::DirectError::Status(s))
                                if *s == StatusCode::UNAUTHORIZED || *s == StatusCode::FORBIDDEN)
                    })
            }
            _ => false,
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

/// Why a backend connection could not be opened. Its text is the cause in words
/// ([`FailureReason`]): no URLs (they may carry credentials), no type names.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The legacy HTTP+SSE event stream could not be opened.
    #[error("{}", FailureReason::of(.0))]
    Sse(#[from] SseTransportError),
    /// The MCP handshake (`server/discover` or `initialize`) failed. Boxed: rmcp's
    /// error is ~500 bytes and would make every `Result` carrying this enum as large.
    #[error("{}", FailureReason::of(&**.0))]
    Handshake(Box<ClientInitializeError>),
    /// A `stdio` backend's process could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A `stdio` backend without its process supervisor.
    #[error("no process supervisor")]
    NoSupervisor,
    /// The handshake completed without the server's information.
    #[error("backend sent no server info")]
    NoServerInfo,
}

impl From<ClientInitializeError> for OpenError {
    fn from(error: ClientInitializeError) -> Self {
        OpenError::Handshake(Box::new(error))
    }
}

impl OpenError {
    /// The cause in words, for the variants that wrap a transport or OS error.
    fn reason(&self) -> Option<FailureReason> {
        match self {
            OpenError::Sse(e) => Some(FailureReason::of(e)),
            OpenError::Handshake(e) => Some(FailureReason::of(&**e)),
            OpenError::Spawn(e) => Some(FailureReason::of(e)),
            OpenError::NoSupervisor | OpenError::NoServerInfo => None,
        }
    }

    /// Whether the backend refused our credentials (HTTP 401 or 403), read from the
    /// status the transport received.
    pub fn credentials_refused(&self) -> bool {
        match self {
            OpenError::Sse(e) => FailureReason::of(e) == FailureReason::AuthRequired,
            OpenError::Handshake(e) => {
                let e: &ClientInitializeError = e;
                e.is_authorization_required()
                    || e.auth_challenge().is_some()
                    || FailureReason::of(e) == FailureReason::AuthRequired
                    || source_chain(e).any(|s| s.downcast_ref().is_some_and(refused_status))
            }
            OpenError::Spawn(_) | OpenError::NoSupervisor | OpenError::NoServerInfo => false,
        }
    }
}

fn refused_status(error: &SseTransportError) -> bool {
    let status = match error {
        SseTransportError::ConnectStatus { status, .. }
        | SseTransportError::PostStatus { status, .. } => *status,
        _ => return false,
    };
    status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN
}

fn source_chain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sse::{SseClientConfig, SseClientTransport};

    /// An SSE backend whose GET answers `status`.
    async fn refusing(status: StatusCode) -> String {
        let app =
            axum::Router::new().route("/sse", axum::routing::get(move || async move { status }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sse", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    async fn open_error(status: StatusCode) -> OpenError {
        let url = refusing(status).await;
        let error = SseClientTransport::connect(reqwest::Client::new(), SseClientConfig::new(&url))
            .await
            .expect_err("the GET is refused");
        OpenError::from(error)
    }

    #[tokio::test]
    async fn refused_credentials_are_read_from_the_status() {
        assert!(
            open_error(StatusCode::UNAUTHORIZED)
                .await
                .credentials_refused()
        );
        assert!(
            open_error(StatusCode::FORBIDDEN)
                .await
                .credentials_refused()
        );
        let other = open_error(StatusCode::INTERNAL_SERVER_ERROR).await;
        assert!(!other.credentials_refused(), "{other}");
        assert!(!OpenError::NoServerInfo.credentials_refused());
    }
}
