//! The params of the methods rmcp reads into typed requests, read as rmcp reads
//! them, so that malformed params get one answer on every path.
//!
//! rmcp's `ClientRequest` is an untagged union: a request whose params do not read
//! as its method's type becomes a custom request, which rmcp's default handler
//! answers -32601 "method not found" (HTTP 404 on 2026-07-28). For a method that
//! exists that is wrong: its params are invalid, -32602. The handler answers such
//! requests with [`invalid`]; the fast path admits a completion only when
//! [`request`] reads it (its other verbs admit only params whose every member it
//! read), so a malformed request reaches the handler and gets the same answer on
//! both paths and both revisions.

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequest, CompleteRequest, GetPromptRequest, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, ReadResourceRequest,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The request `{method, params}` read as rmcp's typed request `T` (with rmcp's own
/// deserializer, which takes `_meta` apart), or the -32602 answering it.
pub(crate) fn request<T: DeserializeOwned>(
    method: &str,
    params: Option<&Value>,
) -> Result<T, ErrorData> {
    let mut members = Map::new();
    members.insert("method".to_owned(), Value::String(method.to_owned()));
    if let Some(params) = params {
        members.insert("params".to_owned(), params.clone());
    }
    serde_json::from_value(Value::Object(members)).map_err(|e| {
        // serde's reason may quote the client's input: shown bounded and escaped.
        ErrorData::invalid_params(
            format!(
                "invalid params for {method}: {}",
                vmcp_layers::shown::shown(e)
            ),
            None,
        )
    })
}

/// The -32602 answering `params` when they do not read as what rmcp reads for
/// `method`, one of the verbs the fast path serves; `None` when they do, or for any
/// other method (unknown, custom, or one 2026-07-28 removed, whose -32601 and HTTP
/// 404 stand whatever its params).
pub(crate) fn invalid(method: &str, params: Option<&Value>) -> Option<ErrorData> {
    match method {
        "tools/call" => request::<CallToolRequest>(method, params).err(),
        "prompts/get" => request::<GetPromptRequest>(method, params).err(),
        "resources/read" => request::<ReadResourceRequest>(method, params).err(),
        "completion/complete" => request::<CompleteRequest>(method, params).err(),
        "tools/list" => request::<ListToolsRequest>(method, params).err(),
        "prompts/list" => request::<ListPromptsRequest>(method, params).err(),
        "resources/list" => request::<ListResourcesRequest>(method, params).err(),
        "resources/templates/list" => request::<ListResourceTemplatesRequest>(method, params).err(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_params_of_a_known_method_are_invalid_params() {
        let valid = json!({"ref": {"type": "ref/prompt", "name": "p"},
                           "argument": {"name": "a", "value": "v"}});
        assert!(invalid("completion/complete", Some(&valid)).is_none());
        for bad in [
            json!({"ref": {"type": "ref/prompt", "name": "p"}}),
            json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": 5}),
            json!({"ref": {"type": "ref/prompt", "name": "p"},
                   "argument": {"name": "a", "value": 5}}),
            json!({"ref": {"type": "ref/prompt", "name": "p"},
                   "argument": {"name": "a", "value": "v"}, "context": 5}),
        ] {
            let error = invalid("completion/complete", Some(&bad)).expect("invalid");
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad}");
        }
        assert!(invalid("tools/list", None).is_none());
        // rmcp reads a list's params as optional: unreadable ones are none (serde's
        // flattened `Option`), a first page, so no error.
        assert!(invalid("tools/list", Some(&json!({"cursor": 5}))).is_none());
        assert!(invalid("prompts/get", Some(&json!({"arguments": {}}))).is_some());
        assert!(invalid("tools/call", Some(&json!({"name": 5}))).is_some());
        assert!(invalid("no/such/method", Some(&json!(5))).is_none());
    }
}
