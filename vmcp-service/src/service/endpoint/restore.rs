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
) -> Option<http::Response<VmcpBody>> {
    match replicas.created(session, identity, address, limits).await {
        Created::Shared | Created::LocalOnly => None,
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
