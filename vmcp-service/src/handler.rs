//! The client edge: the rmcp `ServerHandler` that serves the aggregated catalog.
//!
//! rmcp's streamable HTTP server does the wire work for both revisions (Legacy
//! sessions and Modern stateless requests, `server/discover`, `resultType`); this
//! handler answers lists from the current catalog with gateway-side pagination and
//! forwards calls through the router to the owning backend.

mod admission;
mod ask;
mod bridge;
mod caller;
mod caller_key;
mod code_mode;
mod dispatch;
mod elicit;
mod forward;
mod mrtr;
mod observe;
mod optimizer;
mod restored;
mod workflow;
mod workflow_state;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CompletionInfo,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::model::{SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use vmcp_layers::McpRevision;
use vmcp_layers::context::ListKind;

use admission::{admitted_prompts, admitted_resources, admitted_templates};
pub(crate) use bridge::{Parked, Remote};
pub(crate) use dispatch::client_error;
pub(crate) use forward::LogLevels;
use observe::ObservedCall;

use crate::aggregator::Aggregator;
use crate::catalog::{CacheHint, Catalog};
use crate::pagination::page;
use crate::router::{self, Routed};
use crate::sessions::{ListenGuard, Sessions};

/// The gateway's MCP server handler. Cloning is an `Arc` clone, so rmcp's
/// per-request factory stays cheap.
#[derive(Clone)]
pub(crate) struct VmcpHandler {
    aggregator: Arc<Aggregator>,
    sessions: Arc<Sessions>,
    info: Arc<ServerConfig>,
    /// Legacy sessions' `logging/setLevel` choices.
    log_levels: Arc<LogLevels>,
    /// Seals state the gateway hands to Modern clients (`input_required` requestState).
    sealer: Arc<crate::seal::Sealer>,
    /// Legacy backend calls waiting for a Modern caller's input (`handler::bridge`).
    parked: Arc<bridge::Parked>,
    /// Reaches the replica holding a call parked elsewhere (shared Redis only).
    remote: Option<Arc<bridge::Remote>>,
    /// The optimizer's index of the current catalog (used when `optimizer` is set).
    optimizer: Arc<crate::optimizer::Optimizer>,
    /// Sessions shared by replicas (`sessionStorage: redis`), see `restored`.
    replicas: Option<Arc<crate::shared_sessions::SharedSessions>>,
}

impl std::fmt::Debug for VmcpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmcpHandler").finish_non_exhaustive()
    }
}

/// The cache hint of one list page for this caller: the merged sources' hint, made
/// private when the caller's admission filtered the list (it is this caller's view).
fn list_hint(ctx: &RequestContext<RoleServer>, catalog: &Catalog, kind: ListKind) -> CacheHint {
    let mut hint = catalog.hint(kind);
    if admission::filtered(ctx) {
        hint.public = false;
    }
    hint
}

impl VmcpHandler {
    /// A handler serving `aggregator`'s catalog.
    #[allow(deprecated)] // `logging` is deprecated by SEP-2577 but still served.
    pub(crate) fn new(aggregator: Arc<Aggregator>, sessions: Arc<Sessions>) -> Self {
        let name = aggregator
            .config()
            .name
            .clone()
            .unwrap_or_else(|| "vmcp".to_owned());
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .enable_logging()
            .build();
        let info = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(name, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "vmcp aggregates several MCP servers; tool and prompt names carry the backend they belong to.",
            );
        Self {
            aggregator,
            sessions,
            info: Arc::new(info),
            log_levels: Arc::default(),
            sealer: Arc::default(),
            parked: Arc::default(),
            remote: None,
            optimizer: Arc::default(),
            replicas: None,
        }
    }

    /// This handler with the gateway's sealing key, parked calls and their routing
    /// between replicas (shared by every service of one gateway).
    pub(crate) fn with_replica(
        mut self,
        sealer: Arc<crate::seal::Sealer>,
        parked: Arc<Parked>,
        remote: Option<Arc<Remote>>,
    ) -> Self {
        self.sealer = sealer;
        self.parked = parked;
        self.remote = remote;
        self
    }

    /// This handler recording Legacy session state in `replicas`.
    pub(crate) fn with_replicas(
        mut self,
        replicas: Option<Arc<crate::shared_sessions::SharedSessions>>,
    ) -> Self {
        self.replicas = replicas;
        self
    }

    /// The Legacy sessions' log levels (the fast path leaves sessions that set one
    /// to this handler).
    pub(crate) fn log_levels(&self) -> Arc<LogLevels> {
        self.log_levels.clone()
    }

    fn page_size(&self) -> usize {
        self.aggregator.config().page_size()
    }

    fn backend(&self, name: &str) -> Result<Arc<crate::backend::BackendClient>, ErrorData> {
        self.aggregator.registry().get(name).ok_or_else(|| {
            ErrorData::internal_error(format!("backend {name:?} is no longer configured"), None)
        })
    }

    /// The Legacy session of `ctx`, registered now if this request overtook
    /// `notifications/initialized`: rmcp runs `on_initialized` on a task of its own,
    /// and MCP lets a client send requests without awaiting that notification's 202.
    /// The session is live: rmcp has answered unknown ones (404), and session binding
    /// sends strangers there.
    fn live_session(&self, ctx: &RequestContext<RoleServer>) -> Option<String> {
        let session = session_id(&ctx.extensions)?;
        self.sessions
            .add_legacy(Some(session.clone()), ctx.peer.clone(), || {
                admission::visibility(&ctx.extensions, &self.aggregator.catalog())
            });
        Some(session)
    }
}

/// The Legacy session a request or notification belongs to.
fn session_id(extensions: &rmcp::model::Extensions) -> Option<String> {
    extensions
        .get::<http::request::Parts>()?
        .headers
        .get("mcp-session-id")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta.protocol_version().is_some()
}

fn cursor(params: &Option<PaginatedRequestParams>) -> Option<&str> {
    params.as_ref().and_then(|p| p.cursor.as_deref())
}

impl ServerHandler for VmcpHandler {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        // rmcp hands a request here when its params did not read as its method's:
        // -32602 for a method it has a type for, "method not found" otherwise (so
        // the methods 2026-07-28 removed stay 404 / -32601).
        Err(
            crate::params::invalid(&request.method, request.params.as_ref()).unwrap_or_else(|| {
                ErrorData::new(
                    rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                    request.method,
                    None,
                )
            }),
        )
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        let session = session_id(&ctx.extensions);
        self.sessions.add_legacy(session.clone(), ctx.peer, || {
            admission::visibility(&ctx.extensions, &self.aggregator.catalog())
        });
        restored::reapply(self, &ctx.extensions, session.as_deref()).await;
    }

    #[allow(deprecated)] // resources/subscribe is the Legacy mechanism.
    async fn subscribe(
        &self,
        params: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if self
            .aggregator
            .catalog()
            .resource_owner(&params.uri)
            .is_none()
        {
            return Err(router::unknown("resource", &params.uri));
        }
        let session = self.live_session(&ctx).ok_or_else(|| {
            ErrorData::invalid_request("resources/subscribe needs a session", None)
        })?;
        if self.sessions.subscribe(&session, &params.uri) {
            restored::record_subscription(self, &session, &params.uri, true).await;
            // Subscribe the owning backend (only it: another, stalled one must not
            // hold this answer) before acknowledging, so an update the backend
            // sends after this answer is not missed.
            // Boxed: this chain (down to opening a backend listen stream) is the
            // largest of the handler's futures, and rmcp moves the whole handler
            // future into a task for every request, so inline it would cost every
            // call a copy of its size.
            if let Some(owner) = self.aggregator.catalog().resource_owner(&params.uri) {
                Box::pin(crate::propagation::sync_backend(
                    &self.aggregator,
                    &self.sessions,
                    owner,
                ))
                .await;
            }
            Ok(())
        } else {
            Err(ErrorData::invalid_request("unknown session", None))
        }
    }

    #[allow(deprecated)] // logging/setLevel is the Legacy mechanism.
    async fn set_level(
        &self,
        params: rmcp::model::SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let session = self
            .live_session(&ctx)
            .ok_or_else(|| ErrorData::invalid_request("logging/setLevel needs a session", None))?;
        if !self.sessions.has_legacy(&session) {
            return Err(ErrorData::invalid_request("unknown session", None));
        }
        restored::record_level(self, &session, params.level).await;
        self.log_levels.set(&self.sessions, session, params.level);
        Ok(())
    }

    #[allow(deprecated)] // resources/unsubscribe is the Legacy mechanism.
    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let session = session_id(&ctx.extensions).ok_or_else(|| {
            ErrorData::invalid_request("resources/unsubscribe needs a session", None)
        })?;
        // rmcp has already answered unknown sessions (404) and session binding sends
        // strangers there. A live session not registered yet (rmcp runs
        // `on_initialized` on its own task, so a fast client's next request can
        // overtake it) has nothing subscribed: there is nothing to remove.
        if self.sessions.unsubscribe(&session, &params.uri) {
            restored::record_subscription(self, &session, &params.uri, false).await;
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Everything the gateway can push is honoured: the three list changes and
        // updates of any URI (a URI may be served later, when its backend joins).
        let mut offered = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        offered.resource_subscriptions = requested.resource_subscriptions.clone();
        Some(requested.intersection(&offered))
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        // Registered as the request came in (`crate::listen`), so nothing between
        // rmcp's acknowledgment and this call is missed.
        let prepared = admission::extension::<ListenGuard>(ctx.request_context()).cloned();
        let _registered = match prepared {
            Some(guard) => {
                self.sessions.attach(&guard, ctx.sink().clone());
                guard
            }
            None => {
                let visibility = admission::visibility(
                    &ctx.request_context().extensions,
                    &self.aggregator.catalog(),
                );
                self.sessions.add_modern(ctx.sink().clone(), visibility)
            }
        };
        ctx.cancelled().await;
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if name == crate::code_mode::EXECUTE_TOOL_SCRIPT
            && crate::code_mode::enabled(&self.aggregator.config()).is_some()
        {
            return Some(crate::code_mode::tool());
        }
        if let Some(meta) = self.optimizer_tool(name) {
            return Some(meta);
        }
        let catalog = self.aggregator.catalog();
        catalog
            .tool(name)
            .map(|e| e.tool.clone())
            .or_else(|| catalog.local_tool(name).cloned())
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.aggregator.catalog();
        let tools = self.advertised_tools(&ctx, &catalog);
        // Code mode adds its tool (handler::code_mode).
        let tools = match crate::code_mode::enabled(&self.aggregator.config()) {
            Some(_) => self.with_script_tool(tools)?,
            None => tools,
        };
        let (items, next) = page(
            &tools,
            |t| t.name.as_ref(),
            ListKind::Tools,
            cursor(&params),
            self.page_size(),
        )?;
        let hint = list_hint(&ctx, &catalog, ListKind::Tools);
        let mut result = ListToolsResult::with_all_items(items)
            .with_ttl_ms(hint.ttl_ms)
            .with_cache_scope(hint.scope());
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.aggregator.catalog();
        let (items, next) = page(
            &admitted_prompts(&ctx, &catalog),
            |p| p.name.as_str(),
            ListKind::Prompts,
            cursor(&params),
            self.page_size(),
        )?;
        let hint = list_hint(&ctx, &catalog, ListKind::Prompts);
        let mut result = ListPromptsResult::with_all_items(items)
            .with_ttl_ms(hint.ttl_ms)
            .with_cache_scope(hint.scope());
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.aggregator.catalog();
        let (items, next) = page(
            &admitted_resources(&ctx, &catalog),
            |r| r.uri.as_str(),
            ListKind::Resources,
            cursor(&params),
            self.page_size(),
        )?;
        let hint = list_hint(&ctx, &catalog, ListKind::Resources);
        let mut result = ListResourcesResult::with_all_items(items)
            .with_ttl_ms(hint.ttl_ms)
            .with_cache_scope(hint.scope());
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.aggregator.catalog();
        let (items, next) = page(
            &admitted_templates(&ctx, &catalog),
            |t| t.uri_template.as_str(),
            ListKind::ResourceTemplates,
            cursor(&params),
            self.page_size(),
        )?;
        let hint = list_hint(&ctx, &catalog, ListKind::ResourceTemplates);
        let mut result = ListResourceTemplatesResult::with_all_items(items)
            .with_ttl_ms(hint.ttl_ms)
            .with_cache_scope(hint.scope());
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if params.name == crate::code_mode::EXECUTE_TOOL_SCRIPT
            && let Some(code_mode) = crate::code_mode::enabled(&self.aggregator.config())
        {
            // Boxed: see below.
            return Box::pin(self.call_script(&code_mode.clone(), params, &ctx)).await;
        }
        if self.optimizer_tool(&params.name).is_some() {
            // Boxed: see below.
            return Box::pin(self.call_optimizer(params, &ctx)).await;
        }
        if let Some(workflow) = self.aggregator.workflows().get(&params.name)
            && self.aggregator.catalog().local_tool(&params.name).is_some()
        {
            // Boxed: see below.
            return Box::pin(self.call_composite(workflow.clone(), params, &ctx)).await;
        }
        let name = params.name.clone();
        let routed = router::route_tool(&self.aggregator.catalog(), params)?;
        let client = self.backend(&routed.backend)?;
        let caps = caller::bridged_caps(&ctx, &client);
        let resumes =
            routed.params.request_state.is_some() && client.revision() == Some(McpRevision::Legacy);
        let response = if !caps.is_empty() || resumes {
            // A Legacy backend that may ask this caller (handler::bridge). Boxed: rmcp
            // moves the whole handler future per request, and plain calls should not
            // pay for the size of the bridged ones.
            Box::pin(self.call_tool_asking(&ctx, &client, routed, &name, caps)).await?
        } else {
            // Boxed, as in `get_prompt`: rmcp awaits `initialize` inside each Legacy
            // session's task, so that task is as large as this handler's largest
            // request future for the session's whole life.
            Box::pin(self.relayed(
                &ctx,
                routed,
                "tools/call",
                &name,
                |c, params, budget, relay| async move {
                    c.call_tool_relayed(params, budget, relay).await
                },
            ))
            .await?
        };
        Ok(match response {
            // Reserved `_meta` is stripped by the backend client (`backend::meta`).
            CallToolResponse::Complete(mut result) => {
                // A Legacy backend sends no resultType; a Modern client requires one
                // (rmcp removes it again for Legacy clients).
                result.result_type = Some(ResultType::COMPLETE);
                CallToolResponse::Complete(result)
            }
            other => other,
        })
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = params.name.clone();
        let routed = router::route_prompt(&self.aggregator.catalog(), params)?;
        // Boxed: see `call_tool`.
        let response =
            Box::pin(self.relayed(
                &ctx,
                routed,
                "prompts/get",
                &name,
                |c, params, budget, relay| async move {
                    c.get_prompt_relayed(params, budget, relay).await
                },
            ))
            .await?;
        Ok(match response {
            GetPromptResponse::Complete(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                GetPromptResponse::Complete(result)
            }
            other => other,
        })
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let Routed {
            backend,
            mut params,
        } = router::route_resource(&self.aggregator.catalog(), params)?;
        let client = self.backend(&backend)?;
        let uri = params.uri.clone();
        let call = ObservedCall::start(
            &ctx,
            &backend,
            "resources/read",
            Some(&uri),
            &mut params.meta,
        );
        // Boxed: see `call_tool`.
        let response = Box::pin(self.forward(
            &ctx,
            &client,
            params,
            |c, params, budget| async move { c.read_resource(params, budget).await },
        ))
        .await;
        call.end(&response);
        let response = response.map_err(|e| client_error(e, is_modern(&ctx)))?;
        Ok(match response {
            ReadResourceResponse::Complete(mut result) => {
                // The backend's hints stand (none: 0/private), except that a read the
                // caller's admission decided on is this caller's, so private.
                let mut hint = CacheHint::new(result.ttl_ms, result.cache_scope);
                if admission::filtered(&ctx) {
                    hint.public = false;
                }
                result.ttl_ms = Some(hint.ttl_ms);
                result.cache_scope = Some(hint.scope());
                result.result_type = Some(ResultType::COMPLETE);
                ReadResourceResponse::Complete(result)
            }
            other => other,
        })
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let Some(Routed { backend, params }) =
            router::route_completion(&self.aggregator.catalog(), params)?
        else {
            return Ok(CompleteResult::new(CompletionInfo::default()));
        };
        let client = self.backend(&backend)?;
        // Boxed: see `call_tool`.
        let mut result = Box::pin(self.forward(
            &ctx,
            &client,
            params,
            |c, params, budget| async move { c.complete(params, budget).await },
        ))
        .await
        .map_err(|e| client_error(e, is_modern(&ctx)))?;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result)
    }
}

#[cfg(test)]
mod tests;
