//! A request for a Legacy session this replica does not hold, with sessions shared
//! through Redis (`shared_sessions`): the caller is checked against the session's
//! record before anything is restored. The owner's session is adopted here and
//! rmcp rebuilds it from the record; anyone else's request (or one for a session
//! Redis does not have, or cannot answer for in time) is pointed at a session that
//! cannot exist, so it gets exactly the unknown-session answer and learns nothing.

use std::net::IpAddr;
use std::sync::Arc;

use vmcp_layers::Identity;

use super::{Shared, VmcpBody};
use crate::config::SessionLimits;
use crate::session_binding::redirect_to_nowhere;
use crate::shared_sessions::{Created, SharedSessions};

/// Marks a request whose session was looked up in Redis already.
#[derive(Debug, Clone, Copy)]
pub(super) struct Looked;

/// How soon a caller refused for its cap across replicas may try again: its other
/// sessions end by DELETE or their idle TTL, which no replica can foresee.
const RETRY_AFTER_FULL: std::time::Duration = std::time::Duration::from_secs(5);

/// Adopt the session `req` names if its caller owns it (then the request goes on as
/// an owner's), or answer a DELETE of it here (rmcp does not restore for DELETE).
pub(super) async fn prepare<B>(
    shared: &Shared,
    replicas: &SharedSessions,
    req: &mut http::Request<B>,
    session: &str,
    identity: Option<&Identity>,
) -> Option<http::Response<VmcpBody>> {
    let limits = crate::session_lifetime::limits(&shared.aggregator);
    req.extensions_mut().insert(Looked);
    if !replicas.adopt(session, identity, &limits).await {
        redirect_to_nowhere(req);
        return None;
    }
    if req.method() == http::Method::DELETE {
        replicas.deleted(session).await;
        let mut response = http::Response::new(VmcpBody::default());
        *response.status_mut() = http::StatusCode::NO_CONTENT;
        return Some(response);
    }
    shared.bindings.adopt(session, identity);
    None
}

/// A new session bound here: record it for the other replicas. Over its caller's
/// cap across replicas it is closed unused, and the answer is the 503 to send.
pub(super) async fn created(
    shared: &Shared,
    replicas: &SharedSessions,
    session: &str,
    identity: Option<Arc<Identity>>,
    address: Option<IpAddr>,
    limits: &SessionLimits,
    creator: Option<http::request::Parts>,
) -> Option<http::Response<VmcpBody>> {
    match replicas.created(session, identity, address, limits).await {
        Created::Shared | Created::LocalOnly => {
            if let Some(creator) = creator {
                initialized_here(shared, session, creator).await;
            }
            None
        }
        Created::Full => {
            tracing::warn!(
                "refused a new Legacy session: its caller is at its operational.sessions cap across replicas"
            );
            crate::session_lifetime::close(
                &shared.manager,
                &shared.bindings,
                &shared.sessions,
                session,
            )
            .await;
            Some(crate::session_lifetime::over_cap(RETRY_AFTER_FULL))
        }
    }
}

/// With shared sessions no replica closes a session to make room: one idle here
/// may have its stream or its calls on another replica. The session `bind` chose
/// stays, and the new one is refused as over the cap.
pub(super) async fn no_room(
    shared: &Shared,
    chosen: &str,
    created: &str,
) -> http::Response<VmcpBody> {
    shared.bindings.spare(chosen);
    tracing::warn!(
        "refused a new Legacy session: operational.sessions caps reached (shared sessions are never closed to make room)"
    );
    crate::session_lifetime::close(&shared.manager, &shared.bindings, &shared.sessions, created)
        .await;
    crate::session_lifetime::over_cap(RETRY_AFTER_FULL)
}

/// A Legacy GET stream reconnecting with `Last-Event-ID`: the id counts the events
/// of the replica that served the stream before, maybe another one. Resumed here
/// it would replay the wrong events or, past this replica's cache, get rmcp's
/// empty stream, and the client would reconnect to it forever. So the stream is
/// opened afresh: the client gets what this replica kept for the session (a
/// notification twice at worst, none lost). A POST's stream (`<n>/<request>`)
/// is left alone.
pub(super) fn fresh_stream<B>(req: &mut http::Request<B>) {
    let standalone = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|id| !id.contains('/'));
    if req.method() == http::Method::GET && standalone {
        req.headers_mut().remove("last-event-id");
    }
}

/// What a request that may create a session carries (its headers and its
/// caller's extensions), kept with shared sessions for [`initialized_here`]. Only
/// an `initialize` (or, unparsed, any sessionless POST): Modern requests are
/// sessionless too, and their path pays nothing for this.
pub(super) fn creator<B>(
    shared: &Shared,
    sessionless: bool,
    parsed: Option<&vmcp_layers::ParsedMcpRequest>,
    req: &http::Request<B>,
) -> Option<http::request::Parts> {
    if shared.replicas.is_none()
        || !sessionless
        || req.method() != http::Method::POST
        || parsed.is_some_and(|p| p.method != "initialize")
    {
        return None;
    }
    let mut copy = http::Request::new(());
    *copy.uri_mut() = req.uri().clone();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy.into_parts().0)
}

/// A session created here: behind a balancer its client's
/// `notifications/initialized` may reach another replica, and this one would never
/// register the session for notifications (its GET stream may come back here
/// later, and subscriptions taken elsewhere are applied to registered sessions
/// only). So the creating replica is told `initialized` itself, as the caller
/// (a second one from the client is a no-op).
async fn initialized_here(shared: &Shared, session: &str, mut creator: http::request::Parts) {
    use rmcp::model::{
        ClientJsonRpcMessage, ClientNotification, GetExtensions as _, InitializedNotification,
    };
    use rmcp::transport::streamable_http_server::session::SessionManager as _;
    let Ok(value) = http::HeaderValue::from_str(session) else {
        return;
    };
    creator.headers.insert("mcp-session-id", value);
    let mut notification =
        ClientNotification::InitializedNotification(InitializedNotification::default());
    notification.extensions_mut().insert(creator);
    let message = ClientJsonRpcMessage::notification(notification);
    if let Err(e) = shared
        .manager
        .accept_message(&session.into(), message)
        .await
    {
        tracing::debug!(error = %e, "a new shared session was not registered here");
    }
}

/// The JSON-RPC response a client POSTed (an answer to a server→client request),
/// rebuilt from the parse, to hand to the other replicas (`shared_sessions`).
pub(super) fn answer(parsed: &vmcp_layers::ParsedMcpRequest) -> Option<serde_json::Value> {
    if !parsed.method.is_empty() {
        return None;
    }
    let id = parsed.id.clone()?;
    let (key, value) = ["result", "error"]
        .into_iter()
        .find_map(|key| parsed.rest.get(key).map(|v| (key, v.clone())))?;
    Some(serde_json::json!({"jsonrpc": "2.0", "id": id, key: value}))
}
