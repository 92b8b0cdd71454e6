//! Why a backend could not be reached, in words a person reads in the log and in
//! `/status`: no Rust type names, no debug dumps, no URLs (they may carry
//! credentials).
//!
//! Every transport error goes through [`FailureReason::of`], the one place that
//! reads the error chains of reqwest, hyper, rmcp and the SSE client.

use std::error::Error;
use std::fmt;
use std::io::ErrorKind;

use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use super::sse::SseTransportError;

/// A backend failure reduced to what an operator needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureReason {
    /// Nothing listens on the backend's port.
    ConnectionRefused,
    /// The backend's host name does not resolve.
    Dns,
    /// The backend's TLS certificate is not trusted (detail from the TLS library).
    TlsUntrusted(String),
    /// The TLS handshake failed, in words from `vmcp_layers::tls::describe`
    /// ("certificate not trusted: unknown issuer", "… not valid for this host name").
    Tls(String),
    /// The connection or the answer took too long.
    Timeout,
    /// The connection was reset or closed by the backend.
    ConnectionReset,
    /// The backend answered with an unexpected HTTP status.
    HttpStatus(u16),
    /// The backend asked for credentials (401) or refused them (403).
    AuthRequired,
    /// The gateway itself is out of file descriptors or socket buffers: no
    /// connection could be opened to any backend, so it says nothing about this one.
    LocalResources,
    /// Anything else, as the innermost error says it.
    Other(String),
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionRefused => f.write_str("connection refused"),
            Self::Dns => f.write_str("DNS lookup failed (unknown host)"),
            Self::TlsUntrusted(detail) => write!(f, "certificate not trusted: {detail}"),
            Self::Tls(words) => f.write_str(words),
            Self::Timeout => f.write_str("timed out"),
            Self::ConnectionReset => f.write_str("connection reset by the backend"),
            Self::HttpStatus(status) => write!(f, "HTTP status {status}"),
            Self::AuthRequired => f.write_str("authentication required (HTTP 401/403)"),
            Self::LocalResources => {
                f.write_str("the gateway is out of file descriptors (too many open files)")
            }
            Self::Other(text) => f.write_str(text),
        }
    }
}

impl FailureReason {
    /// Read `error` and its sources, outermost first, for the first thing that
    /// names the cause.
    pub fn of(error: &(dyn Error + 'static)) -> Self {
        let mut innermost = error;
        let mut source = Some(error);
        while let Some(e) = source {
            if let Some(reason) = Self::known(e) {
                return reason;
            }
            innermost = e;
            source = Self::next(e);
        }
        Self::Other(innermost.to_string())
    }

    /// The error under `e`. Two rmcp errors hold theirs without declaring it a
    /// source, so `source()` would end the chain there.
    fn next<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
        if let Some(ClientInitializeError::TransportError { error, .. }) =
            e.downcast_ref::<ClientInitializeError>()
        {
            return Some(error);
        }
        if let Some(StreamableHttpError::Client(inner)) =
            e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return Some(inner);
        }
        e.source()
    }

    /// Whether the backend was never reached (nothing worth a second attempt).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Self::ConnectionRefused
                | Self::Dns
                | Self::TlsUntrusted(_)
                | Self::Tls(_)
                | Self::Timeout
        )
    }

    fn known(e: &(dyn Error + 'static)) -> Option<Self> {
        // rustls's typed error, wrapped in io::Errors: the precise words.
        if let Some(words) = vmcp_layers::tls::describe(e) {
            return Some(Self::Tls(words));
        }
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            if e.raw_os_error().is_some_and(local_exhaustion) {
                return Some(Self::LocalResources);
            }
            match e.kind() {
                ErrorKind::ConnectionRefused => return Some(Self::ConnectionRefused),
                ErrorKind::TimedOut => return Some(Self::Timeout),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                    return Some(Self::ConnectionReset);
                }
                // rustls reports through io::Error, whose text is rustls's own:
                // read below.
                _ => {}
            }
        }
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            if e.is_timeout() {
                return Some(Self::Timeout);
            }
            if let Some(status) = e.status() {
                return Some(Self::status(status.as_u16()));
            }
            return None;
        }
        if let Some(e) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return match e {
                StreamableHttpError::AuthRequired(_)
                | StreamableHttpError::InsufficientScope(_) => Some(Self::AuthRequired),
                StreamableHttpError::HttpStatus(e) => Some(Self::status(e.status)),
                // rmcp words it "HTTP 404 Not Found: <body>".
                StreamableHttpError::UnexpectedServerResponse(text) => text
                    .strip_prefix("HTTP ")
                    .and_then(|rest| rest.get(..3))
                    .and_then(|code| code.parse().ok())
                    .map(Self::status),
                _ => None,
            };
        }
        if let Some(e) = e.downcast_ref::<SseTransportError>() {
            return match e {
                SseTransportError::ConnectStatus { status, .. } => {
                    Some(Self::status(status.as_u16()))
                }
                SseTransportError::ConnectTimeout { .. } => Some(Self::Timeout),
                _ => None,
            };
        }
        // hyper-util's resolver error is private; its message is the stable
        // "dns error" (https://docs.rs/hyper-util, `connect::dns`).
        let text = e.to_string();
        if text == "dns error" {
            return Some(Self::Dns);
        }
        // An io::Error that reached us as text only (the OS's words for EMFILE).
        if text.contains("Too many open files") {
            return Some(Self::LocalResources);
        }
        // rustls: "invalid peer certificate: UnknownIssuer" and its siblings.
        if let Some(detail) = text.strip_prefix("invalid peer certificate: ") {
            return Some(Self::TlsUntrusted(detail.to_owned()));
        }
        None
    }

    fn status(status: u16) -> Self {
        match status {
            401 | 403 => Self::AuthRequired,
            _ => Self::HttpStatus(status),
        }
    }
}

/// Whether OS error `code` says the gateway ran out of descriptors (its own limit,
/// EMFILE, or the system's, ENFILE) or socket buffers (ENOBUFS).
fn local_exhaustion(code: i32) -> bool {
    #[cfg(unix)]
    {
        use nix::errno::Errno;
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS].contains(&Errno::from_raw(code))
    }
    #[cfg(not(unix))]
    {
        let _ = code;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn reads_the_io_kind_under_wrappers() {
        let refused = Outer(std::io::Error::from(ErrorKind::ConnectionRefused));
        assert_eq!(
            FailureReason::of(&refused),
            FailureReason::ConnectionRefused
        );
        assert_eq!(
            FailureReason::of(&refused).to_string(),
            "connection refused"
        );
    }

    #[test]
    fn tls_and_unknown_errors_are_words() {
        let tls = Outer(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        assert_eq!(
            FailureReason::of(&tls).to_string(),
            "certificate not trusted: UnknownIssuer"
        );
        let other = Outer(std::io::Error::other("broken pipe-ish"));
        assert_eq!(FailureReason::of(&other).to_string(), "broken pipe-ish");
    }

    #[cfg(unix)]
    #[test]
    fn running_out_of_descriptors_is_the_gateways_own_exhaustion() {
        let emfile = Outer(std::io::Error::from_raw_os_error(
            nix::errno::Errno::EMFILE as i32,
        ));
        assert_eq!(FailureReason::of(&emfile), FailureReason::LocalResources);
        let enfile = Outer(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENFILE as i32,
        ));
        assert_eq!(FailureReason::of(&enfile), FailureReason::LocalResources);
        let text = Outer(std::io::Error::other("Too many open files (os error 24)"));
        assert_eq!(FailureReason::of(&text), FailureReason::LocalResources);
        assert!(!FailureReason::LocalResources.is_unreachable());
    }
}
