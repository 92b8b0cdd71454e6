//! Forwarding an admitted request to its backend, shaped as the handler shapes it
//! (the same routing, `_meta` handling, result fix-ups and error mapping).

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, CompleteRequestParams,
    CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse,
    ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject, ResultType, ServerResult,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::time::Instant;
use vmcp_layers::context::{Arguments, BackendCallScope, BackendCalls, ParsedMcpRequest};

use super::Edge;
use super::checks::CLIENT_CAPABILITIES;
use crate::backend::meta::{BRIDGED_CAPABILITIES, bridged_capabilities};
use crate::backend::{
    BackendClient, BackendError, CallAnswer, CallBudget, Caller, CallerKey, ClientCaps, Peer,
};
use crate::catalog::CacheHint;
use crate::catalog::Catalog;
use crate::router::{self, Routed};

/// Declare the caller's own client capabilities (admitted requests carry them) on
/// the backend hop, as the handler does (SEP-2322).
fn declare_caller(meta: &mut Option<RequestMetaObject>, parsed: &ParsedMcpRequest) {
    let declared = parsed.meta_value(CLIENT_CAPABILITIES);
    let meta = meta.get_or_insert_default();
    // Declared capabilities with nothing to bridge (what most callers declare) bridge
    // to none: the empty object, without a round trip through rmcp's type.
    if declared.is_none_or(|declared| {
        declared
            .as_object()
            .is_some_and(|d| !d.keys().any(|k| BRIDGED_CAPABILITIES.contains(&k.as_str())))
    }) {
        meta.0
            .0
            .insert(CLIENT_CAPABILITIES.to_owned(), Value::Object(Map::new()));
        return;
    }
    let declared = declared
        .and_then(|v| ClientCapabilities::deserialize(v).ok())
        .unwrap_or_default();
    meta.set_client_capabilities(bridged_capabilities(declared));
}

/// An answer's result: rmcp's, or the caller's result bytes spliced from the
/// backend's.
// Returned once per request, as `ServerResult` was; boxing it would allocate for
// every verb but a spliced `tools/call`.
#[allow(clippy::large_enum_variant)]
pub(super) enum Answer {
    Typed(ServerResult),
    Spliced(Vec<u8>),
}

/// When the gateway received a request, and for whom: its backend call's budget
/// (a caller's request, not one of vmcp's own, as the health model counts it), and
/// whom the backend connection is for when the target backend's credentials depend
/// on the caller (its connection comes from the backend's pool).
pub(super) struct Origin {
    pub(super) received: Instant,
    pub(super) caller: CallerKey,
    pub(super) connection: Option<Caller>,
}

// Not derived: a caller's passed-through headers are not for logs.
impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("received", &self.received)
            .field("caller", &self.caller)
            .field("own_connection", &self.connection.is_some())
            .finish()
    }
}

impl Origin {
    fn budget(&self, timeout: std::time::Duration) -> CallBudget {
        CallBudget::for_caller(timeout, Some(self.caller)).since(self.received)
    }
}

impl Edge {
    fn client(&self, backend: &str) -> Result<Arc<BackendClient>, ErrorData> {
        self.aggregator.registry().get(backend).ok_or_else(|| {
            ErrorData::internal_error(format!("backend {backend:?} is no longer configured"), None)
        })
    }

    /// Run `op` on the connection this request's caller uses for `shared`'s
    /// backend, as the handler's `on_backend` picks it: the shared one, or, for a
    /// backend whose credentials depend on the caller (`token_exchange`,
    /// `passthroughHeaders`), the caller's own from the backend's pool
    /// (`CallerPool::call`: its retry and health rules are the handler's).
    async fn on_connection<T, F, Fut>(
        &self,
        shared: &Arc<BackendClient>,
        origin: &Origin,
        op: F,
    ) -> Result<T, BackendError>
    where
        F: Fn(Arc<BackendClient>) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let Some(pool) = self.aggregator.registry().caller_pool(shared.name()) else {
            return op(shared.clone()).await;
        };
        // Admitted before a reload made this backend's credentials the caller's:
        // no caller was taken, so it goes as nobody's (never on the gateway's own
        // credentials).
        let anonymous;
        let caller = match &origin.connection {
            Some(caller) => caller,
            None => {
                anonymous = Caller::new(None, None, &http::HeaderMap::new(), &[]);
                &anonymous
            }
        };
        // Boxed: the plain call's future stays as small as it was.
        Box::pin(pool.call(shared, caller, ClientCaps::default(), origin.caller, op)).await
    }

    /// A slot under `backend`'s `maxConcurrent` cap, as the handler takes one.
    async fn slot(
        &self,
        backend: &Arc<str>,
        legacy: bool,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ErrorData> {
        self.aggregator
            .limiter()
            .slot(backend, || self.aggregator.config().call_timeout(backend))
            .await
            .map_err(|timeout| {
                client_error(
                    BackendError::Timeout {
                        backend: backend.clone(),
                        timeout,
                    },
                    legacy,
                )
            })
    }

    pub(super) async fn call_tool(
        &self,
        parsed: &ParsedMcpRequest,
        tasks: bool,
        calls: Option<BackendCalls>,
        legacy: bool,
        origin: Origin,
    ) -> Result<Answer, ErrorData> {
        let name = parsed.name.clone().unwrap_or_default();
        // The caller's arguments go to the backend as it wrote them.
        let arguments = parsed.arguments.as_ref().map(Arguments::raw);
        let params = CallToolRequestParams::new(name.clone());
        let Routed {
            backend,
            mut params,
        } = router::route_tool(&self.aggregator.catalog(), params)?;
        let client = self.client(&backend)?;
        let _slot = self.slot(&backend, legacy).await?;
        declare_caller(&mut params.meta, parsed);
        let call = Observed::start(calls, &backend, "tools/call", Some(&name), &mut params.meta);
        let budget = origin.budget(self.aggregator.config().call_timeout(&backend));
        // A complete result is passed on as the backend wrote it, shaped for the
        // caller's revision (`splice`); anything else is read and shaped here.
        let params = &params;
        let peer = peer(legacy);
        let response = self
            .on_connection(&client, &origin, |client| async move {
                client
                    .call_tool_spliced(params, arguments, budget, peer)
                    .await
            })
            .await;
        call.end(&response);
        let response = match response.map_err(|e| client_error(e, legacy))? {
            CallAnswer::Spliced(result) => return Ok(Answer::Spliced(result)),
            CallAnswer::Typed(response) => response,
        };
        let response = match response {
            // Reserved `_meta` is stripped by the backend client (`backend::meta`).
            CallToolResponse::Complete(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                CallToolResponse::Complete(result)
            }
            // As rmcp's server does: no task handle for a client that cannot read one.
            CallToolResponse::Task(_) if !tasks => {
                return Err(ErrorData::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
            other => other,
        };
        Ok(Answer::Typed(ServerResult::from(response)))
    }

    pub(super) async fn get_prompt(
        &self,
        catalog: &Catalog,
        parsed: &ParsedMcpRequest,
        calls: Option<BackendCalls>,
        legacy: bool,
        origin: Origin,
    ) -> Result<Answer, ErrorData> {
        let name = parsed.name.clone().unwrap_or_default();
        let mut params = GetPromptRequestParams::new(name.clone());
        params.arguments = parsed.arguments.as_ref().map(|a| a.map().clone());
        let Routed {
            backend,
            mut params,
        } = router::route_prompt(catalog, params)?;
        let client = self.client(&backend)?;
        let _slot = self.slot(&backend, legacy).await?;
        declare_caller(&mut params.meta, parsed);
        let call = Observed::start(
            calls,
            &backend,
            "prompts/get",
            Some(&name),
            &mut params.meta,
        );
        let budget = origin.budget(self.aggregator.config().call_timeout(&backend));
        let params = &params;
        let peer = peer(legacy);
        let response = self
            .on_connection(&client, &origin, |client| async move {
                client.get_prompt_spliced(params, budget, peer).await
            })
            .await;
        call.end(&response);
        let response = match response.map_err(|e| client_error(e, legacy))? {
            CallAnswer::Spliced(result) => return Ok(Answer::Spliced(result)),
            CallAnswer::Typed(response) => response,
        };
        Ok(Answer::Typed(ServerResult::from(match response {
            GetPromptResponse::Complete(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                GetPromptResponse::Complete(result)
            }
            other => other,
        })))
    }

    pub(super) async fn read_resource(
        &self,
        catalog: &Catalog,
        parsed: &ParsedMcpRequest,
        calls: Option<BackendCalls>,
        filtered: bool,
        legacy: bool,
        origin: Origin,
    ) -> Result<ServerResult, ErrorData> {
        let uri = parsed.uri.clone().unwrap_or_default();
        let Routed {
            backend,
            mut params,
        } = router::route_resource(catalog, ReadResourceRequestParams::new(uri.clone()))?;
        let client = self.client(&backend)?;
        let _slot = self.slot(&backend, legacy).await?;
        let call = Observed::start(
            calls,
            &backend,
            "resources/read",
            Some(&uri),
            &mut params.meta,
        );
        let budget = origin.budget(self.aggregator.config().call_timeout(&backend));
        let params = &params;
        let response = self
            .on_connection(&client, &origin, |client| async move {
                client.read_resource(params.clone(), budget).await
            })
            .await;
        call.end(&response);
        Ok(ServerResult::from(
            match response.map_err(|e| client_error(e, legacy))? {
                ReadResourceResponse::Complete(mut result) => {
                    // The backend's hints stand (none: 0/private), except that a read
                    // the caller's admission decided on is this caller's, so private
                    // (as the handler does).
                    let mut hint = CacheHint::new(result.ttl_ms, result.cache_scope);
                    if filtered {
                        hint.public = false;
                    }
                    result.ttl_ms = Some(hint.ttl_ms);
                    result.cache_scope = Some(hint.scope());
                    result.result_type = Some(ResultType::COMPLETE);
                    ReadResourceResponse::Complete(result)
                }
                other => other,
            },
        ))
    }

    pub(super) async fn complete(
        &self,
        catalog: &Catalog,
        params: Option<Box<CompleteRequestParams>>,
        legacy: bool,
        origin: Origin,
    ) -> Result<ServerResult, ErrorData> {
        // `admit` read the params (a completion is admitted only when they read).
        let params = *params.ok_or_else(|| {
            ErrorData::invalid_params("invalid params for completion/complete", None)
        })?;
        let Some(Routed { backend, params }) = router::route_completion(catalog, params)? else {
            return Ok(ServerResult::CompleteResult(CompleteResult::new(
                CompletionInfo::default(),
            )));
        };
        let client = self.client(&backend)?;
        let _slot = self.slot(&backend, legacy).await?;
        let budget = origin.budget(self.aggregator.config().call_timeout(&backend));
        let params = &params;
        let mut result = self
            .on_connection(&client, &origin, |client| async move {
                client.complete(params.clone(), budget).await
            })
            .await
            .map_err(|e| client_error(e, legacy))?;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(ServerResult::CompleteResult(result))
    }
}

/// Whom a spliced result is shaped for.
fn peer(legacy: bool) -> Peer {
    if legacy { Peer::Legacy } else { Peer::Modern }
}

/// The handler's mapping of backend failures, for a Modern or a Legacy client.
fn client_error(error: BackendError, legacy: bool) -> ErrorData {
    crate::handler::client_error(error, !legacy)
}

/// A backend call as telemetry sees it (the handler's `ObservedCall`, from the
/// request's extensions instead of rmcp's context).
struct Observed(Option<Box<dyn BackendCallScope>>);

impl Observed {
    fn start(
        calls: Option<BackendCalls>,
        backend: &str,
        method: &str,
        name: Option<&str>,
        meta: &mut Option<rmcp::model::RequestMetaObject>,
    ) -> Self {
        let Some(calls) = calls else {
            return Self(None);
        };
        let scope = calls.0.start(backend, method, name);
        if let Some(traceparent) = scope.traceparent() {
            meta.get_or_insert_with(rmcp::model::RequestMetaObject::default)
                .0
                .set_traceparent(traceparent);
        }
        Self(Some(scope))
    }

    fn end<T>(self, result: &Result<T, BackendError>) {
        if let Some(scope) = self.0 {
            let error = result.as_ref().err().map(ToString::to_string);
            scope.end(error.as_deref());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What `declare_caller` declared before it recognized capabilities with
    /// nothing to bridge: rmcp's type, there and back.
    fn through_rmcp(declared: Option<&Value>) -> Option<RequestMetaObject> {
        let declared = declared
            .and_then(|v| ClientCapabilities::deserialize(v).ok())
            .unwrap_or_default();
        let mut meta = RequestMetaObject::default();
        meta.set_client_capabilities(bridged_capabilities(declared));
        Some(meta)
    }

    #[test]
    fn declared_capabilities_bridge_as_through_rmcps_type() {
        let cases = [
            None,
            Some(json!({})),
            Some(json!({"tasks": {"requests": {}}, "experimental": {}})),
            Some(json!({"tasks": 5})),
            Some(json!({"elicitation": {}})),
            Some(json!({"sampling": {}, "roots": {"listChanged": true}, "tasks": {}})),
            Some(json!({"roots": "not an object"})),
            Some(json!(5)),
            Some(json!(null)),
        ];
        for declared in cases {
            let mut parsed = ParsedMcpRequest::default();
            if let Some(declared) = &declared {
                let mut meta = Map::new();
                meta.insert(CLIENT_CAPABILITIES.to_owned(), declared.clone());
                parsed.meta = Some(meta);
            }
            let mut meta = None;
            declare_caller(&mut meta, &parsed);
            assert_eq!(meta, through_rmcp(declared.as_ref()), "{declared:?}");
        }
    }
}
