//! Which backend connection a request uses: the backend's shared one, or for a
//! backend whose credentials depend on the caller (`token_exchange`,
//! `passthroughHeaders`) the caller's own, from the backend's `CallerPool`.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use vmcp_layers::context::{Identity, SubjectToken};

use super::VmcpHandler;
use super::admission::extension;
use crate::backend::{BackendClient, BackendError, Caller};

impl VmcpHandler {
    /// Run `op` on the connection `ctx`'s caller uses for `shared`'s backend.
    ///
    /// On a per-caller connection, a 401/403 from the backend means it refused the
    /// exchanged token without running the request: the token is evicted and the
    /// call retried once with a fresh exchange. The outcome feeds the backend's
    /// health like a call on the shared connection.
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
        let registry = self.aggregator.registry();
        let Some(pool) = registry.caller_pool(shared.name()) else {
            return op(shared.clone()).await;
        };
        shared.admit()?;
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
        let started = std::time::Instant::now();
        let client = pool.client(&caller);
        let mut result = Box::pin(op(client.clone())).await;
        if let Err(e) = &result
            && e.credentials_refused()
            && pool.exchanger().is_some()
        {
            tracing::info!(backend = %shared.name(), "backend refused the caller's exchanged token; exchanging again and retrying once");
            client.refuse_credentials().await;
            result = Box::pin(op(client)).await;
        }
        shared.record_call(
            Some(super::caller_key::caller_key(ctx)),
            &result,
            started.elapsed(),
        );
        result
    }
}
