//! How a request reaches its backend: the caller's budget, the caller's connection,
//! the relay of what happens during the call, a Modern backend's `input_required`
//! completed for a Legacy caller, and the client's view of a failure.

use std::sync::Arc;

use rmcp::model::{ErrorCode, RequestParamsMeta};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use vmcp_layers::McpRevision;

use super::forward::{Cancelled, drive, wants};
use super::mrtr::{self, MaybeInputRequired, Retried};
use super::observe::ObservedCall;
use super::{VmcpHandler, caller_key, is_modern, session_id};
use crate::backend::relay::Relay;
use crate::backend::{BackendClient, BackendError, CallBudget, Received};
use crate::router::Routed;

impl VmcpHandler {
    /// The backend's call timeout, on behalf of the caller of `ctx`, timed from when
    /// the gateway received the request.
    pub(super) fn budget(&self, backend: &str, ctx: &RequestContext<RoleServer>) -> CallBudget {
        let timeout = self.aggregator.config().call_timeout(backend);
        let received = ctx
            .extensions
            .get::<http::request::Parts>()
            .map(|parts| Received::of(&parts.extensions));
        let budget = CallBudget::for_caller(timeout, Some(caller_key::caller_key(ctx)));
        match received {
            Some(received) => budget.since(received),
            None => budget,
        }
    }

    /// `send` on the connection `ctx`'s caller uses for `client`'s backend, within
    /// the caller's budget for it: the half every forwarded request shares.
    pub(super) async fn forward<P, T, F, Fut>(
        &self,
        ctx: &RequestContext<RoleServer>,
        client: &Arc<BackendClient>,
        params: P,
        send: F,
    ) -> Result<T, BackendError>
    where
        P: Clone,
        F: Fn(Arc<BackendClient>, P, CallBudget) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let budget = self.budget(client.name(), ctx);
        self.on_backend(client, ctx, |c| send(c, params.clone(), budget))
            .await
    }

    /// A call whose progress and logs reach the caller while it runs (`tools/call`,
    /// `prompts/get`): the caller's capabilities on a Modern backend hop, its
    /// telemetry span, the relay, the caller's cancellation, a Modern backend's
    /// `input_required` completed for a Legacy caller (see `mrtr`), and the client's
    /// view of a failure.
    pub(super) async fn relayed<P, T, F, Fut>(
        &self,
        ctx: &RequestContext<RoleServer>,
        routed: Routed<P>,
        method: &'static str,
        name: &str,
        send: F,
    ) -> Result<T, ErrorData>
    where
        P: RequestParamsMeta + Retried + Clone,
        T: MaybeInputRequired,
        F: Fn(Arc<BackendClient>, P, CallBudget, Option<Relay>) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let Routed {
            backend,
            mut params,
        } = routed;
        let client = self.backend(&backend)?;
        if client.revision() == Some(McpRevision::Modern) {
            mrtr::declare(params.meta_mut(), ctx);
        }
        let call = ObservedCall::start(ctx, &backend, method, Some(name), params.meta_mut());
        let wants = wants(ctx, &self.log_levels, || session_id(&ctx.extensions));
        let budget = self.budget(&backend, ctx);
        let (client, send) = (&client, &send);
        let response = drive(ctx, wants, |relay| async move {
            let once = |params: P, budget: CallBudget| {
                let relay = relay.clone();
                self.on_backend(client, ctx, move |c| {
                    send(c, params.clone(), budget, relay.clone())
                })
            };
            let first = once(params.clone(), budget).await;
            if is_modern(ctx)
                || first
                    .as_ref()
                    .map_or(true, |r| r.input_required().is_none())
            {
                return Ok(first);
            }
            // Boxed: only calls a Legacy caller must answer take this path.
            Box::pin(mrtr::complete_for_legacy(
                ctx,
                budget,
                first,
                |retry, budget| once(params.clone().retried(retry), budget),
            ))
            .await
        })
        .await;
        let response = match response {
            Ok(Ok(response)) => response,
            Ok(Err(unbridged)) => {
                call.failed(&unbridged.to_string());
                return Err(unbridged.into());
            }
            Err(cancelled) => {
                Cancelled::log(ctx, method, name, &backend);
                call.cancelled();
                return Err(cancelled.into());
            }
        };
        call.end(&response);
        response.map_err(|e| client_error(e, is_modern(ctx)))
    }
}

/// Map a backend failure to what the client sees. Transport details (URLs, socket
/// errors) are logged, not returned.
pub(crate) fn client_error(error: BackendError, modern: bool) -> ErrorData {
    match error {
        BackendError::Mcp { mut error, .. } => {
            // -32002 (resource not found) is retired on 2026-07-28.
            if modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            error
        }
        BackendError::Timeout { backend, timeout } => ErrorData::internal_error(
            format!("backend {backend:?} did not answer within {timeout:?}"),
            None,
        ),
        BackendError::CircuitOpen { backend } => ErrorData::internal_error(
            format!("backend {backend:?} is failing; calls are paused"),
            None,
        ),
        // The reason is words without tokens or secrets (at most an OAuth error code).
        BackendError::Credentials { backend, source } => ErrorData::internal_error(
            format!("backend {backend:?}: no credentials for this caller: {source}"),
            None,
        ),
        BackendError::Unreachable { ref backend, .. }
        | BackendError::Transport { ref backend, .. } => {
            tracing::warn!(%backend, "backend call failed: {error}");
            ErrorData::internal_error(format!("backend {backend:?} is unavailable"), None)
        }
    }
}
