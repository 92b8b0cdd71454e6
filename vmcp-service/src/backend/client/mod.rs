// Over 600 lines: connecting, revision probing and the retry loop share the private Connection; the calls (calls.rs), the connection's rmcp handler (handler.rs), events, errors, direct forwarding and subscriptions are split out; a tenth is tests.
//! One backend: its long-lived MCP connection, revision, and the calls made on it.
//!
//! A [`BackendClient`] holds at most one live rmcp client connection. It is opened on
//! first use (Modern-first: `server/discover`, falling back to a 2025-11-25
//! `initialize` session; SSE backends are always Legacy), reused by every call, and
//! dropped when the transport fails so the next use reconnects and re-probes — which
//! is also how a backend that changed revision is picked up again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResponse, ClientConfig, Implementation, Prompt, ProtocolVersion, Resource,
    ResourceTemplate, ServerCapabilities, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientServiceExt, RoleClient};
use tokio::sync::{Mutex, broadcast};
use vmcp_layers::McpRevision;

use super::bridge::ClientCaps;
use super::credentials::{Credentials, HttpFactory};
pub use super::event::{BackendEvent, BackendEventKind};
use super::health::{BackendHealth, CallerKey, HealthSettings, Source};
use super::http_clients::BackendHttp;
use super::sse::{SseClientConfig, SseClientTransport};
use super::stdio::{ProcessStatus, SpawnError, Supervisor};
use crate::config::{BackendConfig, Transport};
use handler::EventForwarder;

mod budget;
mod calls;
mod direct;
mod error;
mod handler;
mod splice;
mod subscriptions;
mod tap;
mod wire;

pub use budget::CallBudget;
pub(crate) use budget::Received;
use direct::DirectHttp;
pub use error::{BackendError, OpenError};
use error::{is_session_expired, is_unreachable};
pub(crate) use splice::Peer;

/// A `tools/call` (or, with `T` = `GetPromptResponse`, `prompts/get`) answer for
/// the fast path (see [`BackendClient::call_tool_spliced`]).
// Returned once per call, as `CallToolResponse` was; boxing the typed side would
// allocate on every answer that is not spliced.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CallAnswer<T = CallToolResponse> {
    /// A complete result, as the caller's `result` member.
    Spliced(Vec<u8>),
    Typed(T),
}

/// The 2026-07-28 error code for a request in a protocol version the server does not
/// support.
const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;

/// Whether the backend refused a request without running it, so that it may be sent
/// again on a fresh, re-probed connection: our session expired (HTTP 404), or a
/// Modern backend no longer serves 2026-07-28 (it was replaced).
fn refused_unrun(conn: &Connection, error: &ServiceError) -> bool {
    is_session_expired(error)
        || matches!(error, ServiceError::McpError(e)
            if conn.revision == McpRevision::Modern && e.code.0 == UNSUPPORTED_PROTOCOL_VERSION)
}

/// Everything one backend offers, as it reported it.
#[derive(Debug, Clone, Default)]
pub struct BackendCapabilities {
    /// The backend's tools, under their own names.
    pub tools: Vec<Tool>,
    /// Its resources.
    pub resources: Vec<Resource>,
    /// Its resource templates.
    pub templates: Vec<ResourceTemplate>,
    /// Its prompts, under their own names.
    pub prompts: Vec<Prompt>,
    /// Whether it serves `completion/complete`.
    pub completions: bool,
    /// The SEP-2549 cache hints of its lists.
    pub hints: super::hints::ListHints,
}

/// An open connection and what was negotiated on it.
struct Connection {
    service: RunningService<RoleClient, EventForwarder>,
    revision: McpRevision,
    capabilities: ServerCapabilities,
    /// URIs subscribed on this connection (Legacy `resources/subscribe`).
    subscribed: Mutex<BTreeSet<String>>,
    /// The `subscriptions/listen` stream of a Modern connection.
    listen: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How a Modern streamable-HTTP connection forwards calls (see `direct`).
    direct: Option<DirectHttp>,
    /// The credential headers it was opened with (see `with_credentials`).
    credentials: Option<http::HeaderMap>,
    /// Set when a request on it timed out or its transport failed: the next use
    /// replaces it (see `BackendClient::retire`).
    retired: std::sync::atomic::AtomicBool,
}

impl Connection {
    fn retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(task) = self.listen.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

/// A backend and its long-lived client connection.
pub struct BackendClient {
    name: Arc<str>,
    config: BackendConfig,
    http: BackendHttp,
    events: broadcast::Sender<BackendEvent>,
    connection: Mutex<Option<Arc<Connection>>>,
    /// The revision of the last successful connection, for status reporting.
    revision: std::sync::Mutex<Option<McpRevision>>,
    health: BackendHealth,
    /// Set when the last connect attempt was refused with 401/403.
    auth_refused: std::sync::atomic::AtomicBool,
    /// URIs clients are subscribed to on this backend; applied to every connection.
    subscriptions: std::sync::Mutex<BTreeSet<String>>,
    /// Held while a new subscription set is applied (see `set_subscriptions`).
    applying_subscriptions: Mutex<()>,
    /// Set when the last application did not go through entirely (to retry it).
    subscriptions_incomplete: std::sync::atomic::AtomicBool,
    /// The child process of a `stdio` backend.
    stdio: Option<Arc<Supervisor>>,
    /// Credentials that change over time (exchanged or client-credentials tokens):
    /// each connection is opened with a client carrying their current headers, and
    /// a connection whose headers are no longer current is replaced.
    credentials: Option<(Credentials, HttpFactory)>,
    /// The client capabilities this connection declares (its callers' own).
    caps: ClientCaps,
}

impl std::fmt::Debug for BackendClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendClient")
            .field("name", &self.name)
            .field("transport", &self.config.transport())
            .finish_non_exhaustive()
    }
}

impl BackendClient {
    /// A client for `config`; nothing is opened until first use.
    pub(crate) fn new(
        config: BackendConfig,
        http: BackendHttp,
        events: broadcast::Sender<BackendEvent>,
        health: HealthSettings,
    ) -> Self {
        let name: Arc<str> = Arc::from(config.name.as_str());
        let stdio = (config.transport() == Transport::Stdio)
            .then(|| Arc::new(Supervisor::new(name.clone(), events.clone())));
        Self {
            stdio,
            health: BackendHealth::new(name.clone(), health, events.clone()),
            name,
            config,
            http,
            events,
            connection: Mutex::new(None),
            revision: std::sync::Mutex::new(None),
            auth_refused: std::sync::atomic::AtomicBool::new(false),
            subscriptions: std::sync::Mutex::new(BTreeSet::new()),
            applying_subscriptions: Mutex::new(()),
            credentials: None,
            caps: ClientCaps::default(),
            subscriptions_incomplete: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Authenticate with `credentials`, building each connection's HTTP client
    /// with `http` (instead of the client given to `new`).
    pub(crate) fn with_credentials(mut self, credentials: Credentials, http: HttpFactory) -> Self {
        self.credentials = Some((credentials, http));
        self
    }

    /// Declare `caps` to the backend (a connection for callers with exactly these
    /// client capabilities; see `callers.rs`).
    pub(crate) fn with_client_caps(mut self, caps: ClientCaps) -> Self {
        self.caps = caps;
        self
    }

    /// The backend refused the credentials of the current connection (401/403 on a
    /// call): forget the exchanged token and the connection, so the next use
    /// exchanges again and reconnects.
    pub(crate) async fn refuse_credentials(&self) {
        let conn = self.connection.lock().await.clone();
        if let Some((credentials, _)) = &self.credentials {
            // No connection: opening it was refused, so whatever is cached is bad.
            credentials.refused(conn.as_ref().and_then(|c| c.credentials.as_ref()));
        }
        if let Some(conn) = conn {
            self.discard(&conn).await;
        }
    }

    /// The circuit breaker's verdict, for calls made on a per-caller connection of
    /// this backend.
    pub(crate) fn admit(&self) -> Result<(), BackendError> {
        self.health.admit().map_err(|_| BackendError::CircuitOpen {
            backend: self.name.clone(),
        })
    }

    /// Feed the outcome of a call made on a per-caller connection into this
    /// (shared) backend's health.
    pub(crate) fn record_call<T>(
        &self,
        caller: Option<CallerKey>,
        result: &Result<T, BackendError>,
        latency: Duration,
    ) {
        self.record(Source::Call, caller, result, latency);
    }

    /// The backend's health record.
    pub fn health(&self) -> &BackendHealth {
        &self.health
    }

    /// Check the backend now: connect if needed (which probes its revision), else a
    /// cheap request on the open connection. The outcome feeds [`Self::health`].
    pub(crate) async fn health_check(&self, timeout: Duration) {
        let started = std::time::Instant::now();
        let result = self
            .run_unrecorded(timeout, |conn| async move {
                match conn.revision {
                    McpRevision::Legacy => conn
                        .service
                        .send_request(rmcp::model::ClientRequest::PingRequest(Default::default()))
                        .await
                        .map(|_| true),
                    // A Modern backend must still say it serves 2026-07-28; one that
                    // no longer does was replaced and is re-probed.
                    McpRevision::Modern => match conn.service.discover(Default::default()).await {
                        Ok(found) => Ok(found
                            .supported_versions
                            .contains(&ProtocolVersion::V_2026_07_28)),
                        Err(ServiceError::McpError(_)) => Ok(false),
                        Err(other) => Err(other),
                    },
                }
            })
            .await;
        if let Ok(false) = result {
            tracing::info!(backend = %self.name, "backend no longer serves 2026-07-28; re-probing");
            // Take the connection out of the guard first: in `if let`, the guard would
            // live through the block, and `discard` takes the same lock (a deadlock
            // that stopped every later check and call of this backend).
            let current = self.connection.lock().await.clone();
            if let Some(conn) = current {
                self.discard(&conn).await;
            }
        }
        self.record(Source::Check, None, &result, started.elapsed());
    }

    fn record<T>(
        &self,
        source: Source,
        caller: Option<CallerKey>,
        result: &Result<T, BackendError>,
        latency: Duration,
    ) {
        match result {
            Err(e @ BackendError::Timeout { .. }) if source == Source::Call => {
                self.health.record_timeout(caller, &e.summary());
            }
            // One caller's token that cannot be exchanged says nothing about the
            // backend (before the next arm, which would count it); a check that
            // cannot get the gateway's own token does.
            Err(BackendError::Credentials { .. }) if source == Source::Call => {}
            // The gateway out of file descriptors (or memory) cannot open a
            // connection to anyone: not the backend's failure.
            Err(e) if e.is_local_exhaustion() => {
                tracing::warn!(backend = %self.name, "cannot reach backend {:?}: {}; not counted against it", &*self.name, e.summary());
            }
            Err(e) if self.explained_by_exit(e) => {
                self.health.record_reported_failure(source, &e.summary());
            }
            Err(e) if e.is_backend_failure() => {
                let refused = self.auth_refused.load(std::sync::atomic::Ordering::Relaxed);
                self.health.record_failure(source, &e.summary(), refused);
            }
            Err(BackendError::CircuitOpen { .. }) => {}
            _ => self.health.record_success(source, latency),
        }
    }

    /// Whether `error` is what a stdio backend's process exit (or the gateway closing
    /// it) causes until the next process starts: the cut-off connection, the
    /// restart backoff.
    fn explained_by_exit(&self, error: &BackendError) -> bool {
        self.stdio.as_ref().is_some_and(|s| s.explains_failures())
            && matches!(
                error,
                BackendError::Transport { .. }
                    | BackendError::Unreachable {
                        source: OpenError::Spawn(SpawnError::BackingOff(_)),
                        ..
                    }
            )
    }

    /// The backend's name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The backend's configuration.
    pub fn config(&self) -> &BackendConfig {
        &self.config
    }

    /// A `stdio` backend's process (pid, restarts, last exit); `None` for HTTP ones.
    pub fn process(&self) -> Option<ProcessStatus> {
        self.stdio.as_ref().map(|s| s.status())
    }

    /// The revision negotiated on the last successful connection, if any.
    pub fn revision(&self) -> Option<McpRevision> {
        *self.revision.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forwarder(&self) -> EventForwarder {
        let info = ClientConfig::new(
            self.caps.declared(),
            Implementation::new("vmcp", env!("CARGO_PKG_VERSION")),
        );
        EventForwarder {
            backend: self.name.clone(),
            events: self.events.clone(),
            info,
        }
    }

    /// The live connection, opening one if there is none (or the last one closed,
    /// or its credentials are no longer current).
    async fn connection(&self) -> Result<Arc<Connection>, BackendError> {
        let wanted = match &self.credentials {
            None => None,
            Some((credentials, _)) => {
                Some(Box::pin(credentials.headers()).await.map_err(|source| {
                    BackendError::Credentials {
                        backend: self.name.clone(),
                        source,
                    }
                })?)
            }
        };
        let mut slot = self.connection.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.service.is_transport_closed()
            && !conn.retired()
            && conn.credentials == wanted
        {
            return Ok(conn.clone());
        }
        let mut had_connection = slot.is_some();
        if slot.take().is_some_and(|old| old.retired()) {
            // Retired while the slot was busy: announced here, once.
            self.forwarder().emit(BackendEventKind::Disconnected);
            had_connection = false;
        }
        let http = match (&self.credentials, &wanted) {
            (Some((_, factory)), Some(headers)) => factory.build(headers),
            _ => self.http.clone(),
        };
        // Boxed: connecting is rare and its future is large; inline, it would be part
        // of every call's future (see `call_futures_stay_small`).
        match Box::pin(self.open(http, wanted)).await {
            Ok(conn) => {
                self.auth_refused
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                let conn = Arc::new(conn);
                *self.revision.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.revision);
                tracing::info!(backend = %self.name, revision = %conn.revision, "backend connected");
                *slot = Some(conn.clone());
                drop(slot);
                // Within the caller's deadline too. Boxed, as `open` is: a reconnect's
                // work, which every call's future would otherwise carry inline.
                Box::pin(self.apply_subscriptions(&conn, crate::config::DEFAULT_CALL_TIMEOUT))
                    .await;
                self.forwarder().emit(BackendEventKind::Connected);
                Ok(conn)
            }
            Err(source) => {
                self.auth_refused.store(
                    source.credentials_refused(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if had_connection {
                    self.forwarder().emit(BackendEventKind::Disconnected);
                }
                Err(BackendError::Unreachable {
                    backend: self.name.clone(),
                    source,
                })
            }
        }
    }

    /// Open a connection with `http`, which carries `credentials`.
    async fn open(
        &self,
        http: BackendHttp,
        credentials: Option<http::HeaderMap>,
    ) -> Result<Connection, OpenError> {
        let handler = self.forwarder();
        let service = match self.config.transport() {
            Transport::StreamableHttp => {
                // An expired session surfaces as an error rather than a transparent
                // re-initialize, so the backend is re-probed (its revision or tools may
                // have changed); `run` retries the refused request once.
                let transport = || {
                    let config =
                        StreamableHttpClientTransportConfig::with_uri(self.config.url.as_str())
                            .reinit_on_expired_session(false)
                            .max_concurrent_requests(256);
                    StreamableHttpClientTransport::with_client(
                        tap::TapClient(http.reqwest.clone()),
                        config,
                    )
                };
                let auto = rmcp::service::ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                };
                match handler
                    .clone()
                    .serve_with_lifecycle(transport(), auto)
                    .await
                {
                    Ok(service) => service,
                    // A server that refuses the probe in a way rmcp does not read as
                    // "Legacy" (e.g. -32022 listing only older versions) still gets a
                    // plain 2025-11-25 initialize before we give up.
                    Err(probe) if !is_unreachable(&probe) => {
                        tracing::debug!(backend = %self.name, "server/discover probe failed ({probe}); trying initialize");
                        handler
                            .serve_with_lifecycle(
                                transport(),
                                rmcp::service::ClientLifecycleMode::Initialize,
                            )
                            .await?
                    }
                    Err(probe) => return Err(probe.into()),
                }
            }
            Transport::Sse => {
                let transport = SseClientTransport::connect(
                    http.reqwest.clone(),
                    SseClientConfig::new(self.config.url.as_str()),
                )
                .await?;
                rmcp::ServiceExt::serve(handler, transport).await?
            }
            Transport::Stdio => {
                let supervisor = self.stdio.as_ref().ok_or(OpenError::NoSupervisor)?;
                let transport = supervisor.spawn(&self.config)?;
                rmcp::ServiceExt::serve(handler, transport).await?
            }
        };
        let info = service.peer_info().ok_or(OpenError::NoServerInfo)?;
        let revision = McpRevision::from_version(info.protocol_version.as_str());
        let direct = http
            .direct
            .filter(|_| {
                revision == McpRevision::Modern
                    && self.config.transport() == Transport::StreamableHttp
            })
            .and_then(|direct| {
                let forwarder = self.forwarder();
                DirectHttp::new(
                    direct,
                    self.config.url.as_str(),
                    info.protocol_version.clone(),
                    forwarder.info.client_info.clone(),
                    forwarder.info.capabilities.clone(),
                    Box::new(move |message| forwarder.forward(message)),
                )
            });
        Ok(Connection {
            revision,
            capabilities: info.capabilities.clone(),
            service,
            subscribed: Mutex::new(BTreeSet::new()),
            listen: std::sync::Mutex::new(None),
            direct,
            credentials,
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Forget `conn` if it is still the current one, so the next use reconnects.
    async fn discard(&self, conn: &Arc<Connection>) {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
            self.forwarder().emit(BackendEventKind::Disconnected);
        }
    }

    /// Stop using `conn` without waiting: it is marked retired, so no later request
    /// is sent on it, and forgotten now unless the slot is busy (another caller may
    /// be reconnecting to the same stalled backend, for as long as its own deadline
    /// allows); then the slot's next holder replaces it. A timed-out caller's answer
    /// never waits behind another caller. Requests still in flight on it end on
    /// their own.
    fn retire(&self, conn: &Arc<Connection>) {
        conn.retired
            .store(true, std::sync::atomic::Ordering::Release);
        if let Ok(mut slot) = self.connection.try_lock()
            && slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn))
        {
            *slot = None;
            self.forwarder().emit(BackendEventKind::Disconnected);
        }
    }

    /// Close the connection, if any. A `stdio` backend's process group is gone when
    /// this returns.
    pub(crate) async fn close(&self) {
        let conn = self.connection.lock().await.take();
        if let Some(conn) = &conn {
            conn.service.cancellation_token().cancel();
        }
        if let Some(stdio) = &self.stdio {
            stdio.stopped().await;
        }
    }

    /// Map an rmcp error, discarding the connection when the transport broke.
    async fn fail(&self, conn: &Arc<Connection>, error: ServiceError) -> BackendError {
        match error {
            ServiceError::McpError(error) => {
                // A Modern peer never answers with the legacy implementation-defined
                // codes (-32000..-32019); one that does (e.g. "Server not
                // initialized") is Legacy now, and one that refuses 2026-07-28
                // (-32022, unsupported protocol version) was replaced: either way
                // the next use re-probes.
                if conn.revision == McpRevision::Modern
                    && ((-32019..=-32000).contains(&error.code.0)
                        || error.code.0 == UNSUPPORTED_PROTOCOL_VERSION)
                {
                    tracing::info!(backend = %self.name, code = error.code.0, "Modern backend answered like a Legacy one; re-probing");
                    self.retire(conn);
                }
                BackendError::Mcp {
                    backend: self.name.clone(),
                    error,
                }
            }
            ServiceError::Timeout { timeout } => BackendError::Timeout {
                backend: self.name.clone(),
                timeout,
            },
            other => {
                self.retire(conn);
                BackendError::Transport {
                    backend: self.name.clone(),
                    source: other,
                }
            }
        }
    }

    /// Run `op` on the connection within `timeout`.
    ///
    /// A request the backend rejected because our session expired was not executed,
    /// so it is retried once on a fresh (re-probed) connection.
    async fn run<T, F, Fut>(&self, budget: CallBudget, op: F) -> Result<T, BackendError>
    where
        F: Fn(Arc<Connection>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        if self.health.admit().is_err() {
            return Err(BackendError::CircuitOpen {
                backend: self.name.clone(),
            });
        }
        let started = std::time::Instant::now();
        // Boxed: see `call_futures_stay_small`.
        let result = Box::pin(self.run_until(budget.deadline(), budget.timeout, op)).await;
        self.record(Source::Call, budget.caller, &result, started.elapsed());
        result
    }

    /// [`Self::run`] without the circuit breaker or health bookkeeping, for a
    /// request of vmcp's own.
    async fn run_unrecorded<T, F, Fut>(&self, timeout: Duration, op: F) -> Result<T, BackendError>
    where
        F: Fn(Arc<Connection>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        self.run_until(tokio::time::Instant::now() + timeout, timeout, op)
            .await
    }

    /// Run `op` by `deadline`: acquiring the connection (a reconnect included) and
    /// the request share it. `timeout` is what a timeout error names.
    async fn run_until<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        timeout: Duration,
        op: F,
    ) -> Result<T, BackendError>
    where
        F: Fn(Arc<Connection>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let timed_out = || BackendError::Timeout {
            backend: self.name.clone(),
            timeout,
        };
        let mut retried = false;
        loop {
            let conn = tokio::time::timeout_at(deadline, self.connection())
                .await
                .map_err(|_| timed_out())??;
            // Boxed for the same reason: rmcp's request futures are several KiB, and
            // rmcp's server moves the whole handler future each time it spawns one.
            match tokio::time::timeout_at(deadline, Box::pin(op(conn.clone()))).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) if !retried && refused_unrun(&conn, &error) => {
                    tracing::info!(backend = %self.name, "backend refused the request without running it ({error}); reconnecting");
                    self.retire(&conn);
                    retried = true;
                }
                Ok(Err(error)) => return Err(self.fail(&conn, error).await),
                Err(_) => {
                    // No answer in time: the next use reconnects and re-probes. Some
                    // refusals cannot be correlated to the request and look exactly
                    // like this (a Legacy-only server refusing a stateless request, a
                    // restarted server answering an unknown session with 400).
                    // Calls still in flight keep the old connection until they end.
                    self.retire(&conn);
                    return Err(timed_out());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};

    /// A client of a backend nothing listens at (port 9), default health settings.
    fn unreachable_backend(events: broadcast::Sender<BackendEvent>) -> BackendClient {
        BackendClient::new(
            BackendConfig {
                name: "b".into(),
                url: "http://127.0.0.1:9/mcp".into(),
                ..Default::default()
            },
            BackendHttp::plain(),
            events,
            HealthSettings::default(),
        )
    }

    /// rmcp spawns a task per request whose future holds the handler's whole call
    /// chain, and moving a large future costs a memcpy of its size each time (about a
    /// fifth of the gateway's instructions per `tools/call` when this future was
    /// 7.8 KiB). The connect and request futures are boxed to keep it small.
    #[test]
    fn call_futures_stay_small() {
        let (events, _) = broadcast::channel(1);
        let client = unreachable_backend(events);
        let timeout = Duration::from_secs(1);
        let call = client.call_tool(CallToolRequestParams::new("t"), timeout);
        assert!(
            std::mem::size_of_val(&call) <= 2048,
            "{}",
            std::mem::size_of_val(&call)
        );
        let prompt = client.get_prompt(GetPromptRequestParams::new("p"), timeout);
        assert!(std::mem::size_of_val(&prompt) <= 2048);
        let read = client.read_resource(ReadResourceRequestParams::new("x://y"), timeout);
        assert!(std::mem::size_of_val(&read) <= 2048);
        let caps = client.capabilities(timeout);
        assert!(std::mem::size_of_val(&caps) <= 2048);
        // Every call awaits `connection()` and `run_until` inline: a reconnect's work
        // (opening, re-subscribing) stays boxed out of them.
        let connection = client.connection();
        assert!(
            std::mem::size_of_val(&connection) <= 2048,
            "{}",
            std::mem::size_of_val(&connection)
        );
        let run = client.run_until(tokio::time::Instant::now(), timeout, |_| async {
            Ok::<(), ServiceError>(())
        });
        assert!(
            std::mem::size_of_val(&run) <= 2048,
            "{}",
            std::mem::size_of_val(&run)
        );
    }

    /// The gateway out of file descriptors is not the backend's failure; a refused
    /// connection is.
    #[cfg(unix)]
    #[test]
    fn the_gateways_own_exhaustion_does_not_mark_a_backend_unhealthy() {
        use super::super::health::HealthStatus;
        let (events, _) = broadcast::channel(16);
        let client = unreachable_backend(events);
        let unreachable = |os: std::io::Error| -> Result<(), BackendError> {
            Err(BackendError::Unreachable {
                backend: "b".into(),
                source: OpenError::Spawn(super::super::stdio::SpawnError::Spawn {
                    command: "server".into(),
                    source: os,
                }),
            })
        };
        let emfile = || std::io::Error::from_raw_os_error(nix::errno::Errno::EMFILE as i32);
        client.record(Source::Check, None, &Ok(()), Duration::ZERO);
        for source in [Source::Check, Source::Call] {
            for _ in 0..5 {
                client.record(source, None, &unreachable(emfile()), Duration::ZERO);
            }
        }
        let health = client.health().snapshot();
        assert_eq!(health.status, HealthStatus::Healthy, "{health:?}");
        assert_eq!(health.consecutive_failures, 0);
        for _ in 0..3 {
            let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            client.record(Source::Check, None, &unreachable(refused), Duration::ZERO);
        }
        assert_eq!(client.health().status(), HealthStatus::Unhealthy);
    }
}
