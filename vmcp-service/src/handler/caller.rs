//! Which backend connection a request uses: the backend's shared one, or from the
//! backend's `CallerPool` the one for the caller's credentials (a backend whose
//! credentials depend on the caller: `token_exchange`, `passthroughHeaders`) and
//! client capabilities (a Legacy backend, for callers that declare some).

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use vmcp_layers::context::{Identity, SubjectToken};

use super::VmcpHandler;
use super::admission::extension;
use crate::backend::{BackendClient, BackendError, Caller, ClientCaps};

/// The capabilities a call's backend connection declares: the caller's bridgeable
/// ones (its session's `initialize` on 2025-11-25, the request's `_meta` on
/// 2026-07-28) on a Legacy streamable-HTTP backend; none elsewhere (a Modern backend
/// learns them per request, stdio and HTTP+SSE backends cannot tie a request to a
/// call).
pub(super) fn bridged_caps(
    ctx: &RequestContext<RoleServer>,
    backend: &BackendClient,
) -> ClientCaps {
    if backend.revision() != Some(vmcp_layers::McpRevision::Legacy)
        || backend.config().transport() != crate::config::Transport::StreamableHttp
    {
        return ClientCaps::default();
    }
    let declared = if super::is_modern(ctx) {
        ctx.meta.client_capabilities()
    } else {
        ctx.peer.peer_info().map(|info| info.capabilities.clone())
    };
    declared.as_ref().map(ClientCaps::of).unwrap_or_default()
}

impl VmcpHandler {
    /// Run `op` on the connection `ctx`'s caller uses for `shared`'s backend (a
    /// pool's: see `CallerPool::call` for the retry and health rules).
    pub(super) async fn on_backend<T, F, Fut>(
        &self,
        shared: &Arc<BackendClient>,
        ctx: &RequestContext<RoleServer>,
        op: F,
    ) -> Result<T, BackendError>
    where
        F: Fn(Arc<BackendClient>) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        self.on_backend_as(shared, ctx, ClientCaps::default(), op)
            .await
    }

    /// [`Self::on_backend`] on a connection declaring the caller's capabilities
    /// `caps` (see [`bridged_caps`]).
    pub(super) async fn on_backend_as<T, F, Fut>(
        &self,
        shared: &Arc<BackendClient>,
        ctx: &RequestContext<RoleServer>,
        caps: ClientCaps,
        op: F,
    ) -> Result<T, BackendError>
    where
        F: Fn(Arc<BackendClient>) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        // `rateLimiting.backends[].maxConcurrent`: held for the whole call (retry
        // included); a call that gets no slot within the call timeout times out
        // without reaching the backend (and without counting against its health).
        let _slot = self
            .aggregator
            .limiter()
            .slot(shared.name(), || {
                self.aggregator.config().call_timeout(shared.name())
            })
            .await
            .map_err(|timeout| BackendError::Timeout {
                backend: shared.name().clone(),
                timeout,
            })?;
        let registry = self.aggregator.registry();
        let pool = registry
            .pool(shared.name())
            .filter(|p| p.per_caller() || !caps.is_empty());
        let Some(pool) = pool else {
            return op(shared.clone()).await;
        };
        let headers = ctx
            .extensions
            .get::<http::request::Parts>()
            .map(|p| &p.headers);
        let caller = Caller::new(
            extension::<Arc<Identity>>(ctx).map(|i| &**i),
            extension::<SubjectToken>(ctx).cloned(),
            headers.unwrap_or(&http::HeaderMap::new()),
            &registry.passthrough(),
        );
        pool.call(
            shared,
            &caller,
            caps,
            super::caller_key::caller_key(ctx),
            op,
        )
        .await
    }
}
