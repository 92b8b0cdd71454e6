//! Ownership of the reserved `io.modelcontextprotocol/*` `_meta` namespace.
//!
//! The gateway is the client's peer on one hop and the backend's peer on the other,
//! so reserved keys never cross it: a backend must not fabricate the client's
//! identity, and a client's `protocolVersion`/`clientCapabilities` must not reach a
//! backend that negotiated something else. Only the end-to-end keys pass.

use rmcp::model::{CallToolResponse, ClientCapabilities};
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

/// Remove every reserved key except the end-to-end ones.
pub fn strip_reserved(meta: &mut Map<String, Value>) {
    meta.retain(|key, _| crosses_gateway(key));
}

/// A backend's `tools/call` answer as the gateway may pass it on: reserved `_meta`
/// of a complete result stripped. Every typed answer of a backend client goes
/// through this (direct calls, bridged calls, composite steps); the spliced fast
/// path applies the same [`crosses_gateway`] rule to the bytes.
pub fn strip_result_meta(mut response: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(result) = &mut response
        && let Some(meta) = result.meta.as_mut()
    {
        strip_reserved(&mut meta.0);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
