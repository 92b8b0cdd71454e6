//! How long Legacy sessions live, and how many may.
//!
//! rmcp's own idle keep-alive is turned off (it counts only session events, would
//! end a session in the middle of a long call, and leaves a zombie entry behind);
//! instead this module's sweeper closes, through rmcp's session manager, every
//! session that `operational.sessions` retires: idle for `ttl` (no request, no call
//! in flight, no GET stream open) or older than `maxLifetime` (once no call is in
//! flight; it takes no new requests meanwhile). A closed session releases its
//! listener, and with it its backend subscriptions, at once.
//!
//! The caps are checked when rmcp has created a session for an `initialize`
//! (`SessionBindings::bind`): over the caller's own cap (per identity, or per
//! address for anonymous callers) its least recently used idle session is closed
//! to make room, over the total cap that of the caller holding the most sessions.
//! With no idle session to close, the new session is closed unused and the client
//! gets HTTP 503 with `Retry-After`: 1 s when a call in flight holds the sessions
//! in the way, 60 s when open GET streams do (or their end of life, if sooner).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::aggregator::Aggregator;
use crate::config::SessionLimits;
use crate::session_binding::SessionBindings;
use crate::sessions::Sessions;

/// The service's response body (`VmcpBody`), named here so the two modules do not
/// import each other.
type VmcpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// The longest pause between two sweeps.
const SWEEP_AT_MOST_EVERY: Duration = Duration::from_secs(30);
/// The shortest, so a test's one-second TTL is honoured without a busy loop.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_millis(100);
/// How long a session rmcp created may stay unbound (its `initialize` never
/// answered): past rmcp's 60 s init timeout its worker is gone, its entry is not.
const UNBOUND_GRACE: Duration = Duration::from_secs(90);

/// The session limits now in force (a reload changes them for the next check).
pub(crate) fn limits(aggregator: &Aggregator) -> SessionLimits {
    aggregator.config().operational.sessions.limits()
}

/// Close `session` in rmcp and forget it here (its listener and subscriptions too).
pub(crate) async fn close(
    manager: &LocalSessionManager,
    bindings: &SessionBindings,
    sessions: &Sessions,
    session: &str,
) {
    if let Err(e) = manager.close_session(&Arc::from(session)).await {
        tracing::debug!("closing a retired session: {e}");
    }
    bindings.unbind(session);
    sessions.remove_legacy(session);
}

/// The weak handles the sweeper works through: it ends when the service is gone.
pub(crate) struct Sweep {
    pub(crate) manager: Weak<LocalSessionManager>,
    pub(crate) bindings: Weak<SessionBindings>,
    pub(crate) sessions: Weak<Sessions>,
    pub(crate) aggregator: Weak<Aggregator>,
}

impl Sweep {
    /// Retire expired sessions and forget the ones rmcp no longer has, until `stop`
    /// or until the service is gone.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut unbound: HashMap<String, Instant> = HashMap::new();
        loop {
            let Some(limits) = self.aggregator.upgrade().map(|a| limits(&a)) else {
                return;
            };
            let every = (limits.ttl.min(limits.max_lifetime.unwrap_or(limits.ttl)) / 4)
                .clamp(SWEEP_AT_LEAST_EVERY, SWEEP_AT_MOST_EVERY);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let (Some(manager), Some(bindings), Some(sessions)) = (
                self.manager.upgrade(),
                self.bindings.upgrade(),
                self.sessions.upgrade(),
            ) else {
                return;
            };
            for session in bindings.retire(&limits) {
                tracing::debug!("closing a Legacy session past its idle TTL or lifetime");
                close(&manager, &bindings, &sessions, &session).await;
            }
            let live: HashSet<String> = manager
                .sessions
                .read()
                .await
                .keys()
                .map(|id| id.to_string())
                .collect();
            // Only this service's sessions: another mount of the same gateway has its own.
            for session in bindings.retain(|session| live.contains(session)) {
                sessions.remove_legacy(&session);
            }
            let now = Instant::now();
            unbound.retain(|session, _| live.contains(session) && !bindings.contains(session));
            for session in live.iter().filter(|s| !bindings.contains(s)) {
                let since = *unbound.entry(session.clone()).or_insert(now);
                if now.saturating_duration_since(since) >= UNBOUND_GRACE {
                    unbound.remove(session);
                    close(&manager, &bindings, &sessions, session).await;
                }
            }
        }
    }
}

/// The answer to an `initialize` over the session cap: HTTP 503, `Retry-After`
/// (whole seconds until the first session could be retired, at least 1), and a
/// JSON-RPC error (its id is unknown here: the request went to rmcp).
pub(crate) fn over_cap(retry_after: Duration) -> http::Response<VmcpBody> {
    let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": "too many sessions; retry later"},
    });
    let mut response = http::Response::new(
        http_body_util::Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(seconds.max(1)),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Keep `guard` alive as long as `response`'s body is (a call or stream in flight).
pub(crate) fn hold_while_open<G: Send + Sync + 'static>(
    response: http::Response<VmcpBody>,
    guard: G,
) -> http::Response<VmcpBody> {
    response.map(|body| {
        Held {
            body,
            _guard: guard,
        }
        .boxed()
    })
}

pin_project_lite::pin_project! {
    /// A body holding `G` until it is dropped. Unlike a frame-mapping wrapper it
    /// keeps the body's size, so a JSON answer still goes out with its
    /// `Content-Length` instead of chunked.
    struct Held<G> {
        #[pin]
        body: VmcpBody,
        _guard: G,
    }
}

impl<G> http_body::Body for Held<G> {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_binding::Use;

    fn limits(ttl: Duration, max_lifetime: Option<Duration>) -> SessionLimits {
        SessionLimits {
            ttl,
            max_lifetime,
            ..SessionLimits::default()
        }
    }

    fn bind(bindings: &SessionBindings, session: &str) {
        let admit = bindings.bind(session, None, None, &SessionLimits::default());
        assert_eq!(
            admit,
            crate::session_binding::Admit::Bound { evicted: None }
        );
    }

    #[tokio::test]
    async fn a_held_body_keeps_its_size_and_its_guard_until_dropped() {
        use http_body::Body as _;
        let guard = Arc::new(());
        let body = http_body_util::Full::new(Bytes::from_static(b"{}")).boxed();
        let response = hold_while_open(http::Response::new(body), guard.clone());
        assert_eq!(response.body().size_hint().exact(), Some(2));
        assert_eq!(Arc::strong_count(&guard), 2, "held by the body");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{}");
        assert_eq!(Arc::strong_count(&guard), 1, "released with the body");
    }

    #[test]
    fn idle_sessions_retire_unless_in_use() {
        let bindings = Arc::new(SessionBindings::new());
        bind(&bindings, "a");
        bind(&bindings, "b");
        let call = bindings.enter("a", Use::Call);
        let stream = bindings.enter("b", Use::Stream);
        let now = limits(Duration::ZERO, None);
        assert_eq!(bindings.retire(&now), Vec::<String>::new(), "both in use");
        drop(stream);
        assert_eq!(bindings.retire(&now), ["b"]);
        assert_eq!(bindings.retire(&now), Vec::<String>::new(), "once");
        drop(call);
        assert_eq!(bindings.retire(&now), ["a"]);
        // Not idle yet under a real TTL.
        bind(&bindings, "d");
        assert!(
            bindings
                .retire(&limits(Duration::from_secs(60), None))
                .is_empty()
        );
    }

    #[test]
    fn old_sessions_refuse_requests_and_retire_after_their_calls() {
        let bindings = Arc::new(SessionBindings::new());
        bind(&bindings, "a");
        let old = limits(Duration::from_secs(60), Some(Duration::ZERO));
        let call = bindings.enter("a", Use::Call);
        let _stream = bindings.enter("a", Use::Stream);
        assert_eq!(
            bindings.verdict("a", None, &old),
            crate::session_binding::Verdict::Stranger,
            "past its lifetime a session takes no new request"
        );
        assert!(bindings.retire(&old).is_empty(), "a call is in flight");
        drop(call);
        assert_eq!(
            bindings.retire(&old),
            ["a"],
            "an open stream does not keep it"
        );
    }

    #[test]
    fn over_cap_is_503_with_retry_after() {
        let response = over_cap(Duration::from_millis(1500));
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "2");
        assert_eq!(over_cap(Duration::ZERO).headers()["retry-after"], "1");
    }
}
