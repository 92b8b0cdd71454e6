//! Requests this fixture makes of the client (`elicitation/create`,
//! `sampling/createMessage`), written once as JSON for both revisions: on 2025-11-25 a
//! tool sends them on the caller's stream ([`ask_client`]); on 2026-07-28 the
//! input-required tools return them as the `inputRequests` of an `InputRequiredResult`.

use rmcp::RoleServer;
use rmcp::model::ServerRequest;
use rmcp::service::RequestContext;
use serde_json::{Value, json};

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
