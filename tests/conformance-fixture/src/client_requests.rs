//! Requests this fixture makes of the client (`elicitation/create`,
//! `sampling/createMessage`), written once as JSON for both revisions: on 2025-11-25 a
//! tool sends them on the caller's stream ([`ask_client`]); on 2026-07-28 the
//! input-required tools return them as the `inputRequests` of an `InputRequiredResult`,
//! and the 2025-11-25 tools that ask (`test_sampling`, `test_elicitation*`) do the same
//! through [`ask_either`], as a dual-era server does.

use rmcp::model::{InputRequiredResult, InputResponses, ServerRequest};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

/// What asking the client came to.
pub(crate) enum Asked {
    /// The client's answer (or why there is none).
    Answer(Result<Value, String>),
    /// A 2026-07-28 request: answer with this and wait for the retry.
    Pending(InputRequiredResult),
}

/// Ask the client `request` the way its revision allows: on 2025-11-25 on its stream;
/// on 2026-07-28 as input request `key` of an `InputRequiredResult`, whose answer the
/// retry carries in `inputResponses`. A 2026-07-28 client that did not declare the
/// capability (`declared`) is not asked (SEP-2322).
pub(crate) async fn ask_either(
    ctx: &RequestContext<RoleServer>,
    responses: &Option<InputResponses>,
    key: &str,
    declared: impl FnOnce(&rmcp::model::ClientCapabilities) -> bool,
    request: Value,
) -> Result<Asked, ErrorData> {
    if ctx.meta.protocol_version().is_none() {
        return Ok(Asked::Answer(ask_client(ctx, request).await));
    }
    if let Some(answer) = responses.as_ref().and_then(|r| r.get(key)) {
        return Ok(Asked::Answer(Ok(answer.clone())));
    }
    if !declared(&ctx.client_capabilities().unwrap_or_default()) {
        return Ok(Asked::Answer(Err(format!(
            "the client did not declare what `{key}` needs"
        ))));
    }
    crate::input_required::input_required(json!({ key: request }), None).map(Asked::Pending)
}

/// An `elicitation/create` request for an object with `properties` and `required`.
pub(crate) fn elicit(message: &str, properties: Value, required: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}})
}

/// A `sampling/createMessage` request with one user message.
pub(crate) fn sample(text: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens}})
}

/// A 2025-11-25 server-to-client request on the caller's stream.
pub(crate) async fn ask_client(
    ctx: &RequestContext<RoleServer>,
    request: Value,
) -> Result<Value, String> {
    let request: ServerRequest = serde_json::from_value(request).map_err(|e| e.to_string())?;
    let result = ctx
        .peer
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::to_value(result).map_err(|e| e.to_string())
}
