//! The calls a [`BackendClient`] makes on its connection: the full listing, and
//! `tools/call`, `prompts/get`, `resources/read`, `completion/complete` (relayed and
//! spliced variants included). Each runs through the client's retry loop
//! (`run`), which owns the connection.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, ReadResourceRequestParams, ReadResourceResponse,
};

use super::{
    BackendCapabilities, BackendClient, BackendError, CallAnswer, CallBudget, direct, splice, tap,
};
use crate::backend::hints::CacheHint;
use crate::backend::meta;
use crate::backend::relay::Relay;
use serde_json::value::RawValue;

impl BackendClient {
    /// List everything the backend offers, following each list's cursor to the end.
    ///
    /// A transport failure on an open connection is retried once on a fresh one: lists
    /// have no side effects, and this is how a restarted backend is picked up.
    pub async fn capabilities(
        &self,
        timeout: Duration,
    ) -> Result<BackendCapabilities, BackendError> {
        let attempt = || {
            self.run(timeout.into(), |conn| async move {
                let caps = &conn.capabilities;
                let peer = &conn.service;
                let mut out = BackendCapabilities {
                    completions: caps.completions.is_some(),
                    ..Default::default()
                };
                let hint = |ttl, scope| Some(CacheHint::new(ttl, scope));
                if caps.tools.is_some() {
                    let list = peer.list_all_tools_with_cache_hint().await?;
                    (out.tools, out.hints.tools) =
                        (list.items, hint(list.ttl_ms, list.cache_scope));
                    if let Some(direct) = &conn.direct {
                        direct.set_tools(&out.tools);
                    }
                }
                if caps.resources.is_some() {
                    let list = peer.list_all_resources_with_cache_hint().await?;
                    (out.resources, out.hints.resources) =
                        (list.items, hint(list.ttl_ms, list.cache_scope));
                    let list = peer.list_all_resource_templates_with_cache_hint().await?;
                    (out.templates, out.hints.templates) =
                        (list.items, hint(list.ttl_ms, list.cache_scope));
                }
                if caps.prompts.is_some() {
                    let list = peer.list_all_prompts_with_cache_hint().await?;
                    (out.prompts, out.hints.prompts) =
                        (list.items, hint(list.ttl_ms, list.cache_scope));
                }
                Ok(out)
            })
        };
        match attempt().await {
            Err(BackendError::Transport { .. }) => attempt().await,
            other => other,
        }
    }

    /// `tools/call` under the backend's own tool name. Never retried: it may have run.
    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
        budget: impl Into<CallBudget>,
    ) -> Result<CallToolResponse, BackendError> {
        self.call_tool_relayed(params, budget, None).await
    }

    /// [`Self::call_tool`], with the call's progress and logs relayed to `relay`
    /// (streamable-HTTP backends; stdio and SSE backends relay nothing).
    pub(crate) async fn call_tool_relayed(
        &self,
        params: CallToolRequestParams,
        budget: impl Into<CallBudget>,
        relay: Option<Relay>,
    ) -> Result<CallToolResponse, BackendError> {
        self.call_tool_borrowed(&params, None, budget, relay).await
    }

    /// [`Self::call_tool_relayed`] from a borrow: the direct path writes the params
    /// from it; only rmcp's paths take a copy. `raw`: the caller's arguments as it
    /// wrote them (checked by the parse), sent instead of the params'.
    pub(crate) async fn call_tool_borrowed(
        &self,
        params: &CallToolRequestParams,
        raw: Option<&RawValue>,
        budget: impl Into<CallBudget>,
        relay: Option<Relay>,
    ) -> Result<CallToolResponse, BackendError> {
        self.run(budget.into(), |conn| {
            let relay = relay.clone();
            async move {
                match (&conn.direct, relay) {
                    (Some(direct), relay) => direct.call_tool(params, raw, relay.as_ref()).await,
                    (None, Some(relay)) => {
                        tap::call_tool(conn.service.peer(), with_arguments(params, raw), relay)
                            .await
                    }
                    (None, None) => {
                        conn.service
                            .call_tool_once(with_arguments(params, raw))
                            .await
                    }
                }
            }
        })
        .await
        .map(meta::strip_result_meta)
    }

    /// [`Self::call_tool`] for the fast path: a complete result from the direct path
    /// comes back as `peer`'s result bytes, spliced from the backend's (see
    /// `splice`); anything else as rmcp's types.
    pub(crate) async fn call_tool_spliced(
        &self,
        params: &CallToolRequestParams,
        raw: Option<&RawValue>,
        budget: impl Into<CallBudget>,
        peer: splice::Peer,
    ) -> Result<CallAnswer, BackendError> {
        self.run(budget.into(), |conn| async move {
            let Some(direct) = &conn.direct else {
                let params = with_arguments(params, raw);
                let response = conn.service.call_tool_once(params).await?;
                return Ok(CallAnswer::Typed(meta::strip_result_meta(response)));
            };
            let raw = direct.call_tool_raw(params, raw, None).await?;
            match splice::complete_result(splice::Kind::Call, peer, &raw) {
                Some(result) => Ok(CallAnswer::Spliced(result)),
                None => direct::call_response(raw.get())
                    .map(|r| CallAnswer::Typed(meta::strip_result_meta(r))),
            }
        })
        .await
    }

    /// [`Self::get_prompt`] for the fast path, spliced as
    /// [`Self::call_tool_spliced`] splices.
    pub(crate) async fn get_prompt_spliced(
        &self,
        params: &GetPromptRequestParams,
        budget: impl Into<CallBudget>,
        peer: splice::Peer,
    ) -> Result<CallAnswer<GetPromptResponse>, BackendError> {
        self.run(budget.into(), |conn| async move {
            let Some(direct) = &conn.direct else {
                let response = conn.service.get_prompt_once(params.clone()).await?;
                return Ok(CallAnswer::Typed(meta::strip_result_meta(response)));
            };
            let raw = direct.get_prompt_raw(params, None).await?;
            match splice::complete_result(splice::Kind::Prompt, peer, &raw) {
                Some(result) => Ok(CallAnswer::Spliced(result)),
                None => direct::prompt_response(raw.get())
                    .map(|r| CallAnswer::Typed(meta::strip_result_meta(r))),
            }
        })
        .await
    }

    /// `prompts/get` under the backend's own prompt name.
    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        budget: impl Into<CallBudget>,
    ) -> Result<GetPromptResponse, BackendError> {
        self.get_prompt_relayed(params, budget, None).await
    }

    /// [`Self::get_prompt`] with a relay (see [`Self::call_tool_relayed`]).
    pub(crate) async fn get_prompt_relayed(
        &self,
        params: GetPromptRequestParams,
        budget: impl Into<CallBudget>,
        relay: Option<Relay>,
    ) -> Result<GetPromptResponse, BackendError> {
        // As for `call_tool_relayed`: only rmcp's paths take a copy.
        let params = &params;
        self.run(budget.into(), |conn| {
            let relay = relay.clone();
            async move {
                match (&conn.direct, relay) {
                    (Some(direct), relay) => direct.get_prompt(params, relay.as_ref()).await,
                    (None, Some(relay)) => {
                        tap::get_prompt(conn.service.peer(), params.clone(), relay).await
                    }
                    (None, None) => conn.service.get_prompt_once(params.clone()).await,
                }
            }
        })
        .await
        .map(meta::strip_result_meta)
    }

    /// `resources/read` of a URI this backend owns.
    pub async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        budget: impl Into<CallBudget>,
    ) -> Result<ReadResourceResponse, BackendError> {
        self.run(budget.into(), |conn| {
            let params = params.clone();
            async move { conn.service.read_resource_once(params).await }
        })
        .await
        .map(meta::strip_result_meta)
    }

    /// `completion/complete` for a prompt or template this backend owns.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
        budget: impl Into<CallBudget>,
    ) -> Result<CompleteResult, BackendError> {
        self.run(budget.into(), |conn| {
            let params = params.clone();
            async move { conn.service.complete(params).await }
        })
        .await
        .map(meta::strip_result_meta)
    }
}

/// `params` with `raw` (the caller's arguments, checked by the parse) as their
/// arguments, for rmcp's paths, which take typed params.
fn with_arguments(params: &CallToolRequestParams, raw: Option<&RawValue>) -> CallToolRequestParams {
    let mut params = params.clone();
    if let Some(raw) = raw {
        params.arguments = serde_json::from_str(raw.get()).ok();
    }
    params
}
