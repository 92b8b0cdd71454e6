//! 2025-11-25 session requests on the fast path: when a session's state allows a
//! plain JSON answer, and the session's `notifications/cancelled` reaching a call
//! the fast path is running.
//!
//! rmcp runs a session request inside the session's worker: it checks that the
//! session exists (404 otherwise), that `MCP-Protocol-Version`, when sent, is a
//! version it knows (the SEP-2243 header checks start at 2026-07-28), then
//! dispatches to the handler with the session's peer. The fast path takes a session
//! request only when none of that can matter:
//!
//! - the session is bound to this caller (`session_binding` said so and holds it
//!   in use) and registered by `on_initialized` with a live transport: rmcp knows
//!   it, and its handshake is complete;
//! - the header is absent or a known version before 2026-07-28, and the request has
//!   no `_meta` (no `progressToken`, nothing to pass on);
//! - nothing may have to reach the client during the call: the session set no log
//!   level, and its client declared no elicitation, sampling, roots or tasks, so no
//!   backend request or task handle can be bridged to it (those calls keep the
//!   handler, which talks over the session).
//!
//! The answer is `application/json` where rmcp would open an event stream for the
//! one message (both are allowed for a POSTed request), shaped for a Legacy peer as
//! rmcp shapes it (`resultType: complete` and non-object tool output removed). A
//! backend that answers `input_required` anyway gets the call back from the handler,
//! which bridges it over the session (`handler::mrtr`).

use std::sync::Arc;

use dashmap::DashMap;
use http::HeaderMap;
use rmcp::model::{ClientCapabilities, ProtocolVersion, ServerResult};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use vmcp_layers::context::{AuditNote, ParsedMcpRequest};

use crate::handler::LogLevels;
use crate::sessions::Sessions;

/// The Legacy sessions the fast path may answer for, and its calls in flight.
pub(super) struct SessionState {
    sessions: Arc<Sessions>,
    log_levels: Arc<LogLevels>,
    /// Calls the fast path runs for a session, by session and JSON-RPC id, so that
    /// the session's `notifications/cancelled` drops them as it drops the handler's.
    inflight: DashMap<(Arc<str>, String), CancellationToken>,
    /// Calls the handler runs for a session behind an auditing stack, by session
    /// and JSON-RPC id: rmcp ends such a call's event stream as soon as the
    /// session's `notifications/cancelled` arrives, before the handler sees it, so
    /// the notification marks the call's audit line here.
    noted: DashMap<(Arc<str>, String), AuditNote>,
}

/// A handler call registered for its audit note; unregisters itself when dropped
/// (held until the call's stream ends).
pub(crate) struct Noted {
    state: Arc<SessionState>,
    key: (Arc<str>, String),
}

impl Drop for Noted {
    fn drop(&mut self) {
        self.state.noted.remove(&self.key);
    }
}

/// A call registered as in flight; unregisters itself when the call ends.
pub(super) struct InFlight<'a> {
    state: &'a SessionState,
    key: (Arc<str>, String),
    pub(super) token: CancellationToken,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.state.inflight.remove(&self.key);
    }
}

impl SessionState {
    pub(super) fn new(sessions: Arc<Sessions>, log_levels: Arc<LogLevels>) -> Self {
        Self {
            sessions,
            log_levels,
            inflight: DashMap::new(),
            noted: DashMap::new(),
        }
    }

    /// Whether the session `session` (bound to this caller) allows a plain JSON
    /// answer to `parsed`, sent with `headers` (see the module docs).
    pub(super) fn plain(
        &self,
        session: &str,
        headers: &HeaderMap,
        parsed: &ParsedMcpRequest,
    ) -> bool {
        if parsed.meta.is_some() || !legacy_version_header(headers) {
            return false;
        }
        if self.log_levels.is_set(session) {
            return false;
        }
        let Some(peer) = self.sessions.legacy_peer(session) else {
            return false;
        };
        !peer.is_transport_closed()
            && peer.peer_info().is_some_and(|info| {
                info.protocol_version.as_str() < ProtocolVersion::V_2026_07_28.as_str()
                    && asks_nothing(&info.capabilities)
            })
    }

    /// Register a call of `session` with JSON-RPC `id`.
    pub(super) fn start(&self, session: &Arc<str>, id: &Value) -> InFlight<'_> {
        let key = (session.clone(), id.to_string());
        let token = CancellationToken::new();
        self.inflight.insert(key.clone(), token.clone());
        InFlight {
            state: self,
            key,
            token,
        }
    }

    /// A session's `notifications/cancelled`: cancel the named call if the fast path
    /// runs it (rmcp, which never saw that id, ignores the notification).
    pub(super) fn cancelled(&self, session: &str, parsed: &ParsedMcpRequest) {
        if parsed.method != "notifications/cancelled" || parsed.id.is_some() {
            return;
        }
        let Some(id) = parsed.params_rest.get("requestId") else {
            return;
        };
        let key = (Arc::from(session), id.to_string());
        if let Some((_, token)) = self.inflight.remove(&key) {
            token.cancel();
        }
        if let Some((_, note)) = self.noted.remove(&key) {
            note.cancel();
        }
    }

    /// Register a handler call of `session` with JSON-RPC `id` and its audit note.
    pub(super) fn note(self: &Arc<Self>, session: &str, id: &Value, note: AuditNote) -> Noted {
        let key = (Arc::from(session), id.to_string());
        self.noted.insert(key.clone(), note);
        Noted {
            state: self.clone(),
            key,
        }
    }
}

/// A result shaped for a pre-2026-07-28 peer, as rmcp's server shapes it:
/// `resultType: complete` and non-object tool output removed. (An input-required
/// result never gets here: the edge hands that call back to the handler.)
pub(super) fn for_legacy_peer(mut result: ServerResult) -> ServerResult {
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    result
}

/// `MCP-Protocol-Version` absent, or sent once with a version rmcp knows from before
/// 2026-07-28 (a later one would need per-request `_meta`).
fn legacy_version_header(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(super::checks::MCP_PROTOCOL_VERSION).iter();
    let Some(first) = values.next() else {
        return true;
    };
    values.next().is_none()
        && first.to_str().is_ok_and(|version| {
            version < ProtocolVersion::V_2026_07_28.as_str()
                && ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .any(|known| known.as_str() == version)
        })
}

/// A client that cannot be asked anything mid-call and takes no task handles.
fn asks_nothing(capabilities: &ClientCapabilities) -> bool {
    capabilities.elicitation.is_none()
        && capabilities.sampling.is_none()
        && capabilities.roots.is_none()
        && !capabilities.supports_tasks()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-protocol-version", value.parse().unwrap());
        headers
    }

    #[test]
    fn only_known_legacy_versions_pass() {
        assert!(legacy_version_header(&HeaderMap::new()));
        assert!(legacy_version_header(&header("2025-11-25")));
        assert!(legacy_version_header(&header("2025-06-18")));
        assert!(!legacy_version_header(&header("2026-07-28")));
        assert!(!legacy_version_header(&header("2025-13-01")));
        let mut twice = header("2025-11-25");
        twice.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        assert!(!legacy_version_header(&twice));
    }

    #[test]
    #[allow(deprecated)] // Sampling and roots are deprecated by SEP-2577, still declared.
    fn clients_that_can_be_asked_keep_the_handler() {
        assert!(asks_nothing(&ClientCapabilities::default()));
        assert!(!asks_nothing(
            &ClientCapabilities::builder().enable_elicitation().build()
        ));
        assert!(!asks_nothing(
            &ClientCapabilities::builder().enable_sampling().build()
        ));
        assert!(!asks_nothing(
            &ClientCapabilities::builder().enable_roots().build()
        ));
        assert!(!asks_nothing(
            &ClientCapabilities::builder().enable_tasks().build()
        ));
    }
}
