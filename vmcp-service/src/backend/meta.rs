//! Ownership of the reserved `io.modelcontextprotocol/*` `_meta` namespace.
//!
//! The gateway is the client's peer on one hop and the backend's peer on the other,
//! so reserved keys never cross it: a backend must not fabricate the client's
//! identity, and a client's `protocolVersion`/`clientCapabilities` must not reach a
//! backend that negotiated something else. Only the end-to-end keys pass.

use rmcp::model::{
    CallToolResponse, ClientCapabilities, CompleteResult, GetPromptResponse, ReadResourceResponse,
};
use serde_json::{Map, Value};

const RESERVED_PREFIX: &str = "io.modelcontextprotocol/";
/// Reserved keys that are end-to-end and so cross the gateway unchanged.
const PASSTHROUGH: [&str; 2] = [
    "io.modelcontextprotocol/related-task",
    "io.modelcontextprotocol/model-immediate-response",
];

/// True when `key` may cross the gateway.
pub fn crosses_gateway(key: &str) -> bool {
    !key.starts_with(RESERVED_PREFIX) || PASSTHROUGH.contains(&key)
}

/// The part of a caller's declared client capabilities a backend hop may declare on
/// its behalf (SEP-2322): `elicitation`, `sampling` and `roots`, which the gateway
/// relays back to the caller. Anything else (tasks, extensions) would promise the
/// backend more than the gateway forwards.
pub fn bridged_capabilities(declared: ClientCapabilities) -> ClientCapabilities {
    let mut hop = ClientCapabilities::default();
    hop.elicitation = declared.elicitation;
    hop.sampling = declared.sampling;
    hop.roots = declared.roots;
    hop
}

/// The members of declared client capabilities that [`bridged_capabilities`]
/// keeps, as they are written: declared capabilities without any of them bridge
/// to none.
pub const BRIDGED_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// Remove every reserved key except the end-to-end ones.
pub fn strip_reserved(meta: &mut Map<String, Value>) {
    meta.retain(|key, _| crosses_gateway(key));
}

/// A backend's complete result as the gateway may pass it on: reserved `_meta`
/// stripped. Every typed answer of a backend client goes through this, for every
/// verb with a result (direct calls, bridged calls, composite steps, prompts,
/// resource reads, completions); the spliced fast path applies the same
/// [`crosses_gateway`] rule to the bytes (`backend::client::splice`).
pub fn strip_result_meta<R: ResultMeta>(mut response: R) -> R {
    if let Some(meta) = response.complete_meta() {
        strip_reserved(meta);
    }
    response
}

/// A backend answer whose complete result may carry `_meta`. (An MRTR
/// `input_required` answer is not a result the caller receives: the gateway
/// answers it itself or bridges its requests.)
pub trait ResultMeta {
    /// The complete result's `_meta`, if it has one.
    fn complete_meta(&mut self) -> Option<&mut Map<String, Value>>;
}

impl ResultMeta for CallToolResponse {
    fn complete_meta(&mut self) -> Option<&mut Map<String, Value>> {
        match self {
            CallToolResponse::Complete(result) => result.meta.as_mut().map(|m| &mut m.0),
            _ => None,
        }
    }
}

impl ResultMeta for GetPromptResponse {
    fn complete_meta(&mut self) -> Option<&mut Map<String, Value>> {
        match self {
            GetPromptResponse::Complete(result) => result.meta.as_mut().map(|m| &mut m.0),
            _ => None,
        }
    }
}

impl ResultMeta for ReadResourceResponse {
    fn complete_meta(&mut self) -> Option<&mut Map<String, Value>> {
        match self {
            ReadResourceResponse::Complete(result) => result.meta.as_mut().map(|m| &mut m.0),
            _ => None,
        }
    }
}

impl ResultMeta for CompleteResult {
    fn complete_meta(&mut self) -> Option<&mut Map<String, Value>> {
        self.meta.as_mut().map(|m| &mut m.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, GetPromptResult, ReadResourceResult};
    use serde_json::json;

    #[test]
    fn only_bridged_capabilities_reach_the_hop() {
        let declared: ClientCapabilities = serde_json::from_value(json!({
            "sampling": {}, "roots": {"listChanged": true},
            "extensions": {"io.modelcontextprotocol/tasks": {}}, "experimental": {"x": {}}
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(bridged_capabilities(declared)).unwrap(),
            json!({"sampling": {}, "roots": {"listChanged": true}})
        );
    }

    #[test]
    fn strips_reserved_but_keeps_end_to_end_and_foreign_keys() {
        let mut meta = json!({
            "io.modelcontextprotocol/serverInfo": {"name": "evil"},
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/related-task": {"taskId": "t"},
            "traceparent": "00-abc-def-01",
            "progressToken": 3
        })
        .as_object()
        .cloned()
        .unwrap();
        strip_reserved(&mut meta);
        let mut keys: Vec<_> = meta.keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                "io.modelcontextprotocol/related-task",
                "progressToken",
                "traceparent"
            ]
        );
    }

    #[test]
    fn every_complete_result_kind_loses_its_reserved_meta() {
        let meta = json!({"io.modelcontextprotocol/serverInfo": {"name": "forged"}, "own": 1});
        let kept = |value: Value| value["_meta"].clone();
        let with = |mut result: Value| {
            result["_meta"] = meta.clone();
            result
        };
        let prompt: GetPromptResult =
            serde_json::from_value(with(json!({"messages": []}))).unwrap();
        let read: ReadResourceResult =
            serde_json::from_value(with(json!({"contents": []}))).unwrap();
        let completion: CompleteResult =
            serde_json::from_value(with(json!({"completion": {"values": []}}))).unwrap();
        let call: CallToolResult = serde_json::from_value(with(json!({"content": []}))).unwrap();
        let stripped = [
            match strip_result_meta(GetPromptResponse::from(prompt)) {
                GetPromptResponse::Complete(r) => serde_json::to_value(r).unwrap(),
                _ => unreachable!(),
            },
            match strip_result_meta(ReadResourceResponse::from(read)) {
                ReadResourceResponse::Complete(r) => serde_json::to_value(r).unwrap(),
                _ => unreachable!(),
            },
            serde_json::to_value(strip_result_meta(completion)).unwrap(),
            match strip_result_meta(CallToolResponse::from(call)) {
                CallToolResponse::Complete(r) => serde_json::to_value(r).unwrap(),
                _ => unreachable!(),
            },
        ];
        for result in stripped {
            assert_eq!(kept(result.clone()), json!({"own": 1}), "{result}");
        }
    }
}
