//! `Vmcp::service()` answers 2026-07-28 requests with plain JSON bodies, and keeps
//! event streams for 2025-11-25 sessions.

use serde_json::{Value, json};
use vmcp_service::{Vmcp, VmcpConfig};

async fn serve() -> (Vmcp, String) {
    // No backends: the gateway still serves its (empty) catalog.
    let vmcp = Vmcp::start(VmcpConfig::default()).await.expect("starts");
    let app = axum::Router::new().nest_service("/mcp", vmcp.service());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (vmcp, url)
}

fn post(url: &str, version: &str, body: Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", version)
        .body(body.to_string())
}

#[tokio::test]
async fn modern_requests_get_json_bodies() {
    let (_vmcp, url) = serve().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let response = post(
        &url,
        "2026-07-28",
        json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": meta}
        }),
    )
    .header("Mcp-Method", "tools/list")
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], 7);
    assert_eq!(body["result"]["tools"], json!([]));
}

#[tokio::test]
async fn legacy_sessions_keep_event_streams() {
    let (_vmcp, url) = serve().await;
    let response = post(
        &url,
        "2025-11-25",
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}
        }),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
}
