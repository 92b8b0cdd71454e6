//! [`VmcpService`]: the MCP endpoint as a tower `Service`, deciding per request
//! between the session binding, the bare door checks, the fast path and rmcp.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::aggregator::Aggregator;
use crate::handler::VmcpHandler;
use crate::listen;
use crate::session_binding::SessionBindings;
use crate::sessions::Sessions;

mod restore;

/// The aggregating MCP endpoint as a tower `Service<http::Request<B>>`: mount it in
/// axum with `nest_service`/`route_service`, or serve it with hyper directly.
///
/// ```no_run
/// # async fn run(gateway: vmcp_service::Vmcp) -> std::io::Result<()> {
/// let mcp: vmcp_service::VmcpService = gateway.service();
/// let app = axum::Router::new().nest_service("/mcp", mcp);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await
/// # }
/// ```
#[derive(Clone)]
pub struct VmcpService {
    /// One `Arc`: tower and axum clone the service for every request, and cloning
    /// rmcp's service copies its settings (host and origin lists): about 15 k
    /// instructions per request, twice, before this was shared.
    shared: Arc<Shared>,
}

#[derive(Clone)]
pub(super) struct Shared {
    pub(super) inner: StreamableHttpService<VmcpHandler, LocalSessionManager>,
    /// The door checks made when no layer stack is in front (`bare`).
    pub(super) bare: crate::bare::BareChecks,
    /// Who created each Legacy session, and its lifetime.
    pub(super) bindings: Arc<SessionBindings>,
    /// rmcp's sessions, to close those over the cap or past their lifetime.
    pub(super) manager: Arc<LocalSessionManager>,
    /// The configuration the session limits are read from, and the composite step
    /// check (`composite::gate`).
    pub(super) aggregator: Arc<Aggregator>,
    pub(super) sessions: Arc<Sessions>,
    /// Open Modern listen streams per caller (`operational.listenStreams`).
    pub(super) listen_caps: Arc<crate::caller_caps::CallerCaps>,
    /// The fast path for plain requests; `None` sends everything to rmcp.
    pub(super) edge: Option<crate::edge::Edge>,
    /// Legacy sessions shared with other replicas (`sessionStorage: redis`).
    pub(super) replicas: Option<Arc<crate::shared_sessions::SharedSessions>>,
}

impl VmcpService {
    pub(super) fn new(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }

    /// This service with every request answered by rmcp's server: no fast path
    /// (see the `edge` module). For comparisons; the answers are the same.
    pub fn without_fast_path(mut self) -> Self {
        Arc::make_mut(&mut self.shared).edge = None;
        self
    }

    /// How many requests the fast path of this service (and its clones) answered.
    pub fn fast_path_answers(&self) -> u64 {
        self.shared
            .edge
            .as_ref()
            .map_or(0, crate::edge::Edge::served)
    }
}

impl std::fmt::Debug for VmcpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmcpService").finish_non_exhaustive()
    }
}

/// The response body type of [`VmcpService`].
pub type VmcpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A 403 carrying the gate's denial body.
fn denied_response(body: Vec<u8>) -> http::Response<VmcpBody> {
    use http_body_util::BodyExt;
    let mut response = http::Response::new(http_body_util::Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = http::StatusCode::FORBIDDEN;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

impl<B> tower::Service<http::Request<B>> for VmcpService
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = http::Response<VmcpBody>;
    type Error = Infallible;
    /// The request's future, boxed, inside [`Rewake`](crate::Rewake): boxed first, so
    /// wrapping it moves a pointer, not the future (several KiB).
    type Future = crate::Rewake<BoxFuture<'static, Result<Self::Response, Infallible>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        use crate::session_binding::{
            Admit, Use, Verdict, created_by, identity_of, redirect_to_nowhere,
        };
        // Backend deadlines are timed from here (see `CallBudget::since`).
        req.extensions_mut()
            .insert(crate::backend::Received(tokio::time::Instant::now()));
        let shared = self.shared.clone();
        let identity = identity_of(&req);
        let session = crate::session_binding::session_of(&req);
        // A session another replica created: restored (or refused) first, then the
        // request goes on as any other (see `restore`).
        if let (Some(replicas), Some(id)) = (&self.shared.replicas, &session)
            && req.extensions().get::<restore::Looked>().is_none()
            && !self.shared.bindings.contains(id)
        {
            let (mut this, replicas, id) = (self.clone(), replicas.clone(), id.clone());
            return crate::Rewake::new(Box::pin(async move {
                if let Some(answer) =
                    restore::prepare(&this.shared, &replicas, &mut req, &id, identity.as_deref())
                        .await
                {
                    return Ok(answer);
                }
                tower::Service::call(&mut this, req).await
            }));
        }
        // Only a request without a session may create one (and be capped by address).
        let peer = session
            .is_none()
            .then(|| {
                req.extensions()
                    .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                    .map(|info| info.0.ip())
            })
            .flatten();
        let limits = crate::session_lifetime::limits(&shared.aggregator);
        let delete = req.method() == http::Method::DELETE;
        let mut in_use = None;
        if let Some(session) = &session {
            match shared
                .bindings
                .verdict(session, identity.as_deref(), &limits)
            {
                Verdict::Owner => {
                    let kind = match *req.method() {
                        http::Method::POST => Use::Call,
                        http::Method::GET => Use::Stream,
                        _ => Use::Touch,
                    };
                    in_use = Some(shared.bindings.enter(session, kind));
                    if let Some(replicas) = &shared.replicas {
                        replicas.touch(session);
                        restore::fresh_stream(&mut req);
                    }
                }
                Verdict::Stranger => {
                    tracing::debug!("a request for a session bound to another caller or retired");
                    redirect_to_nowhere(&mut req);
                }
            }
        }
        if let Some(body) = crate::composite::gate::denial(
            &shared.aggregator.workflows(),
            &shared.aggregator.catalog(),
            req.extensions(),
        ) {
            return crate::Rewake::new(Box::pin(futures::future::ready(Ok(denied_response(body)))));
        }
        let deleting = in_use.is_some() && delete;
        let bare = !crate::bare::behind_stack(&req);
        // Behind the stack the parse layer's request is the one parse; when bare, the
        // bare checks' parse is.
        let stacked = req
            .extensions()
            .get::<Arc<vmcp_layers::ParsedMcpRequest>>()
            .cloned();
        let creator = restore::creator(&shared, session.is_none(), stacked.as_deref(), &req);
        // The session the fast path may answer for: bound to this caller and held.
        let owned = session.clone().filter(|_| matches!(in_use, Some(Some(_))));
        // An owner's answer to a server→client request: maybe another replica asked.
        if let (Some(replicas), Some(session), Some(answer)) = (
            &shared.replicas,
            session.as_ref().filter(|_| in_use.is_some()),
            stacked.as_deref().and_then(restore::answer),
        ) {
            let (replicas, session) = (replicas.clone(), session.clone());
            tokio::spawn(async move { replicas.publish_answer(&session, answer).await });
        }
        // rmcp's `handle` and the session close are boxed where they are awaited: the
        // fast path's requests need neither, and this future is moved once per
        // request (8 KiB with them inline).
        crate::Rewake::new(Box::pin(async move {
            let (inner, edge) = (&shared.inner, &shared.edge);
            // Whom a listen stream counts against (keyed as the Legacy session caps).
            let caller = || shared.bindings.caller(identity.as_deref(), peer);
            let mut response = if bare {
                let allowed = |origin: &str| {
                    let config = shared.aggregator.config();
                    config.allowed_origins.iter().any(|o| o == origin)
                };
                match crate::bare::check(&shared.bare, allowed, req).await {
                    Ok((req, parsed)) if parsed.as_ref().is_some_and(listen::is_listen) => {
                        let id = parsed.as_ref().and_then(|p| p.id.as_ref());
                        let Some(permit) =
                            listen::admit(&shared.listen_caps, caller(), &shared.aggregator)
                        else {
                            return Ok(listen::refusal(id));
                        };
                        let req =
                            listen::prepare(req, &shared.aggregator, &shared.sessions, permit);
                        Box::pin(inner.handle(Box::pin(req).await)).await
                    }
                    Ok((req, parsed)) => {
                        // Only with the optimizer on: awaiting the rewrite moved the
                        // request and its parse in and out of its future on every call.
                        let config = shared.aggregator.config();
                        let (req, parsed) = if config.optimizer.is_some() {
                            Box::pin(crate::optimizer::rewrite::bare(&config, req, parsed)).await
                        } else {
                            (req, parsed)
                        };
                        drop(config);
                        if let Some(refused) =
                            rate_limited(&shared.aggregator, req.extensions(), parsed.as_ref())
                                .await
                        {
                            return Ok(held(refused, in_use));
                        }
                        if let Some((edge, admitted)) =
                            fast(edge, &req, parsed.map(Arc::new), owned)
                            && let Some(response) = edge.serve(admitted).await
                        {
                            return Ok(held(response, in_use));
                        }
                        Box::pin(inner.handle(req)).await
                    }
                    Err(refused) => return Ok(refused),
                }
            } else if stacked.as_deref().is_some_and(listen::is_listen) {
                let id = stacked.as_deref().and_then(|p| p.id.as_ref());
                let Some(permit) = listen::admit(&shared.listen_caps, caller(), &shared.aggregator)
                else {
                    return Ok(listen::refusal(id));
                };
                let req = listen::prepare(req, &shared.aggregator, &shared.sessions, permit);
                Box::pin(inner.handle(Box::pin(req).await)).await
            } else {
                if let Some(refused) =
                    rate_limited(&shared.aggregator, req.extensions(), stacked.as_deref()).await
                {
                    return Ok(held(refused, in_use));
                }
                // Behind an auditing stack, a session call the handler runs is noted
                // for the session's `notifications/cancelled` (see `edge::session`).
                let noted = match (edge, &owned, &stacked) {
                    (Some(edge), Some(session), Some(parsed)) => req
                        .extensions()
                        .get::<vmcp_layers::context::AuditNote>()
                        .cloned()
                        .map(|note| (edge, session.clone(), parsed.clone(), note)),
                    _ => None,
                };
                if let Some((edge, admitted)) = fast(edge, &req, stacked, owned)
                    && let Some(response) = edge.serve(admitted).await
                {
                    return Ok(held(response, in_use));
                }
                let noted = noted.and_then(|(edge, session, parsed, note)| {
                    edge.note_session_call(&session, &parsed, note)
                });
                let response = Box::pin(inner.handle(req)).await;
                match noted {
                    Some(noted) => crate::session_lifetime::hold_while_open(response, noted),
                    None => response,
                }
            };
            // rmcp answers a session DELETE with 202, which clients (the Python SDK
            // among them) take as failure: they expect 200 or 204 (or 405).
            if delete && response.status() == http::StatusCode::ACCEPTED {
                *response.status_mut() = http::StatusCode::NO_CONTENT;
            }
            match &session {
                None => {
                    if let Some(created) = created_by(&response) {
                        match shared
                            .bindings
                            .bind(&created, identity.as_deref(), peer, &limits)
                        {
                            Admit::Bound { evicted: None } => {}
                            Admit::Bound {
                                evicted: Some(evicted),
                            } if shared.replicas.is_some() => {
                                return Ok(
                                    Box::pin(restore::no_room(&shared, &evicted, &created)).await
                                );
                            }
                            Admit::Bound {
                                evicted: Some(evicted),
                            } => {
                                tracing::debug!(
                                    "closed an idle Legacy session of the caller holding the most to make room"
                                );
                                if let Some(replicas) = &shared.replicas {
                                    replicas.deleted(&evicted).await;
                                }
                                Box::pin(crate::session_lifetime::close(
                                    &shared.manager,
                                    &shared.bindings,
                                    &shared.sessions,
                                    &evicted,
                                ))
                                .await;
                            }
                            Admit::Full { retry_after } => {
                                tracing::warn!(
                                    "refused a new Legacy session: operational.sessions caps reached, no idle session to close"
                                );
                                Box::pin(crate::session_lifetime::close(
                                    &shared.manager,
                                    &shared.bindings,
                                    &shared.sessions,
                                    &created,
                                ))
                                .await;
                                return Ok(crate::session_lifetime::over_cap(retry_after));
                            }
                        }
                        if let Some(replicas) = &shared.replicas
                            && let Some(refused) = Box::pin(restore::created(
                                &shared,
                                replicas,
                                &created,
                                identity.clone(),
                                peer,
                                &limits,
                                creator,
                            ))
                            .await
                        {
                            return Ok(refused);
                        }
                    }
                }
                Some(session) if deleting && response.status().is_success() => {
                    shared.bindings.unbind(session);
                    shared.sessions.remove_legacy(session);
                }
                Some(_) => {}
            }
            Ok(held(response, in_use))
        }))
    }
}

/// The fast path's decision for `req` (see `edge`); a session's other messages are
/// shown to the edge too (a `notifications/cancelled` may name a call it runs).
fn fast<'e, B: http_body::Body>(
    edge: &'e Option<crate::edge::Edge>,
    req: &http::Request<B>,
    parsed: Option<Arc<vmcp_layers::ParsedMcpRequest>>,
    session: Option<String>,
) -> Option<(&'e crate::edge::Edge, crate::edge::Admitted)> {
    let (edge, parsed) = (edge.as_ref()?, parsed?);
    let admitted = edge.admit(req, &parsed, session.as_deref());
    if let (None, Some(session)) = (&admitted, &session) {
        edge.session_message(session, &parsed);
    }
    admitted.map(|admitted| (edge, admitted))
}

/// The service's rate-limit admission seam ([`crate::rate_limit`]): the refusal of `parsed` (a client's message, with
/// `extensions` its HTTP request's), or `None` to serve it.
async fn rate_limited(
    aggregator: &crate::aggregator::Aggregator,
    extensions: &http::Extensions,
    parsed: Option<&vmcp_layers::ParsedMcpRequest>,
) -> Option<http::Response<VmcpBody>> {
    let parsed = parsed?;
    let limiter = aggregator.limiter();
    let caller = || {
        crate::rate_limit::caller(
            extensions.get::<Arc<vmcp_layers::Identity>>().map(|i| &**i),
            extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|info| info.0.ip()),
        )
    };
    let refusal = limiter
        .admit(
            parsed,
            || aggregator.catalog(),
            caller,
            extensions.get::<vmcp_layers::context::BackendCalls>(),
        )
        .await?;
    Some(crate::rate_limit::response(parsed, &refusal))
}

/// `response`, keeping its session in use until its body ends.
fn held(
    response: http::Response<VmcpBody>,
    in_use: Option<Option<crate::session_binding::InUse>>,
) -> http::Response<VmcpBody> {
    match in_use.flatten() {
        Some(guard) => crate::session_lifetime::hold_while_open(response, guard),
        None => response,
    }
}
