//! A Legacy backend's elicitation during a call on replica A, answered by a Legacy
//! client whose answering POST reaches replica B (as a round-robin balancer sends
//! it): B hands the answer to A over Redis (`shared_sessions::changes`) and A
//! completes the call. Two in-process gateways, one real redis-server, the real
//! server-everything (Legacy-only) behind them; the client is raw HTTP, so which
//! replica gets which request is the test's choice.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_tests::redis::RedisServer;
use vmcp_tests::stacked::stacked_gateway;
use vmcp_tests::{EverythingMode, config, everything};

fn post(url: &str, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(body);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    request
}

/// The JSON-RPC messages of an SSE stream as they arrive (≤ 20 s in all).
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn next(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if let Ok(message) = serde_json::from_str::<Value>(&data) {
                    return message;
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("the next SSE event within 20 s")
                .expect("read the SSE stream")
                .expect("the stream is still open");
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answered_on_another_replica_completes_the_call() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let redis = RedisServer::start().await;
    let yaml = format!(
        "backends: [{{name: ev, url: '{}'}}]\nsessionStorage: {{provider: redis, address: '{}', keyPrefix: 'ask:'}}\n",
        ev.url,
        redis.address()
    );
    let (a, b) = (
        stacked_gateway(config(&yaml)).await,
        stacked_gateway(config(&yaml)).await,
    );

    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "asked-elsewhere", "version": "1"}}});
    let response = post(&a.url(), None, &init).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let status = post(&a.url(), Some(&session), &initialized)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202);

    // The call runs on A; its elicitation comes on the call's stream.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "ev_trigger-elicitation-request", "arguments": {}}});
    let response = post(&a.url(), Some(&session), &call).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let asked = loop {
        let message = events.next().await;
        if message["method"] == "elicitation/create" {
            break message;
        }
        assert!(message.get("result").is_none(), "answered early: {message}");
    };

    // The answer reaches B, which does not run the call.
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"name": "answered-on-b"}}});
    let status = post(&b.url(), Some(&session), &answer)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202, "B takes the answer");

    let done = loop {
        let message = events.next().await;
        if message["id"] == 7 {
            break message;
        }
    };
    let text: String = done["result"]["content"]
        .as_array()
        .expect("a result's content")
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert!(
        text.contains("- Name: answered-on-b"),
        "the backend got the answer given on B: {done}"
    );
    assert_ne!(done["result"]["isError"], true, "{done}");
}
