//! The `serde_json::Map` work of one forwarded `tools/call`, repeated `N` times (the
//! first argument): `request` parses the caller's request, reads its members and
//! writes the backend's request (what the fast path does with maps: it splices the
//! backend's result as bytes); `result` parses the backend's result and writes the
//! caller's answer (what rmcp's path adds). Run twice under callgrind with different
//! `N`, the difference divided by the difference in `N` is one round, start-up
//! cancelled out.

use std::hint::black_box;

use serde_json::{Value, json};

const REQUEST: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gh_search","arguments":{"query":"rust tower middleware","limit":20,"sort":"stars","filters":{"language":"rust","archived":false}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"sampling":{}},"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1.0"},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}"#;

const RESULT: &str = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"42 repositories"}],"structuredContent":{"total":42,"items":[{"name":"tower","stars":3500,"url":"https://example.com/tower"},{"name":"axum","stars":20000,"url":"https://example.com/axum"}]},"isError":false,"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"gh","version":"1"},"demo/own":[1,2]}}}"#;

fn request() -> usize {
    let request: Value = serde_json::from_str(black_box(REQUEST)).expect("request");
    let params = &request["params"];
    let name = params["name"].as_str().expect("name");
    let arguments = params["arguments"].clone();
    let meta = &params["_meta"];
    let backend = json!({
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": name.strip_prefix("gh_").unwrap_or(name),
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": meta["io.modelcontextprotocol/protocolVersion"],
                "io.modelcontextprotocol/clientCapabilities": meta["io.modelcontextprotocol/clientCapabilities"],
                "traceparent": meta["traceparent"],
            },
        },
    });
    serde_json::to_vec(&backend).expect("backend request").len()
}

fn result() -> usize {
    let mut result: Value = serde_json::from_str(black_box(RESULT)).expect("result");
    let mut answer = result["result"].take();
    if let Some(meta) = answer.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("io.modelcontextprotocol/serverInfo");
    }
    let reply = json!({"jsonrpc": "2.0", "id": 7, "result": answer});
    serde_json::to_vec(&reply).expect("answer").len()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let round: fn() -> usize = match std::env::args().nth(2).as_deref() {
        Some("result") => result,
        _ => request,
    };
    let mut bytes = 0;
    for _ in 0..n {
        bytes += round();
    }
    println!("{n} rounds, {bytes} bytes");
}
