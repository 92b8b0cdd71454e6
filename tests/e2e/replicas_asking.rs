//! A Legacy session's traffic split over two replicas, as a round-robin balancer
//! splits it. A backend's elicitation during a call on replica A, answered by a
//! POST that reaches replica B: B hands the answer to A over Redis
//! (`shared_sessions::changes`) and A completes the call. A GET stream opened on
//! the replica that did not take the subscription: it restores the session, its
//! backend is subscribed again, and the stream gets `resources/updated` and
//! `tools/list_changed`; the log level set on A holds on B. Two in-process gateways, one real redis-server, real
//! backends (server-everything, the demo); the client is raw HTTP, so which
//! replica gets which request is the test's choice.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoList, DemoSpec, spawn};
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
    /// The Legacy GET stream of `session` on `url`.
    async fn get(url: &str, session: &str) -> Self {
        let response = reqwest::Client::new()
            .get(url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", session)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "the GET stream opens");
        Self {
            response,
            buffer: String::new(),
        }
    }

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

    let session = open(&a.url(), json!({"elicitation": {}})).await;

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

/// Open a Legacy session on `url` (client capabilities `caps`): its id.
async fn open(url: &str, caps: Value) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": caps,
        "clientInfo": {"name": "split", "version": "1"}}});
    let response = post(url, None, &init).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let status = post(url, Some(&session), &initialized)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202);
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_the_other_replica_gets_the_sessions_notifications() {
    let demo = spawn(
        DemoSpec {
            resources: vec!["sub://one".into()],
            ..DemoSpec::new("d", &["add"])
        },
        0,
    )
    .await
    .unwrap();
    let redis = RedisServer::start().await;
    let yaml = format!(
        "backends: [{{name: d, url: '{}'}}]\nsessionStorage: {{provider: redis, address: '{}', keyPrefix: 'st:'}}\n",
        demo.url(),
        redis.address()
    );
    let (a, b) = (
        stacked_gateway(config(&yaml)).await,
        stacked_gateway(config(&yaml)).await,
    );
    let session = open(&a.url(), json!({})).await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
        "params": {"uri": "sub://one"}});
    let response = post(&a.url(), Some(&session), &subscribe)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "subscribed on A");
    let _ = response.text().await;
    let control = demo.control().clone();
    assert!(
        vmcp_tests::eventually(|| control.listening_to("sub://one") == 1).await,
        "A subscribed its backend"
    );

    // The GET stream goes to B, which never saw the session: restored there, with
    // the subscription, and B's backend subscribed too.
    let mut events = Events::get(&b.url(), &session).await;
    assert!(
        vmcp_tests::eventually(|| control.listening_to("sub://one") == 2).await,
        "B subscribed its backend for the restored session"
    );
    control.resource_updated("sub://one").await;
    let updated = loop {
        let message = events.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
    };
    assert_eq!(updated["params"]["uri"], "sub://one");
    control
        .change(DemoList::Tools, |spec| spec.tools.push("sub".into()))
        .await;
    loop {
        if events.next().await["method"] == "notifications/tools/list_changed" {
            break;
        }
    }
}

/// The log level set on A holds on B, which restores the session from its record
/// when the session's GET stream opens there: a call on B relays the backend's
/// logs at that level (a session without a level gets none; `info` gets the info
/// logs and not the debug ones, each step logging debug before info).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_level_set_on_one_replica_holds_on_another() {
    let py = vmcp_tests::py_backend("py", &["--forwarding-tools"]).await;
    let redis = RedisServer::start().await;
    let yaml = format!(
        "backends: [{{name: py, url: '{}'}}]\nsessionStorage: {{provider: redis, address: '{}', keyPrefix: 'lv:'}}\n",
        py.url,
        redis.address()
    );
    let (a, b) = (
        stacked_gateway(config(&yaml)).await,
        stacked_gateway(config(&yaml)).await,
    );
    let session = open(&a.url(), json!({})).await;
    let set = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel",
        "params": {"level": "info"}});
    let response = post(&a.url(), Some(&session), &set).send().await.unwrap();
    assert_eq!(response.status(), 200, "setLevel on A");
    let _ = response.text().await;

    // Logs go to the session's GET stream: opened on B (restoring the session).
    let mut stream = Events::get(&b.url(), &session).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "py_steps", "arguments": {"count": 2, "tag": "lv"}}});
    let response = post(&b.url(), Some(&session), &call).send().await.unwrap();
    assert_eq!(response.status(), 200, "the call on B");
    let mut answer = Events {
        response,
        buffer: String::new(),
    };
    loop {
        let message = answer.next().await;
        if message["id"] == 2 {
            assert_ne!(message["result"]["isError"], true, "{message}");
            break;
        }
    }
    let mut logs = Vec::new();
    while !logs.iter().any(|l: &String| l.contains("lv info 2")) {
        let message = stream.next().await;
        if message["method"] == "notifications/message" {
            logs.push(message["params"]["data"].to_string());
        }
    }
    assert!(
        logs.iter().any(|l| l.contains("lv info 1")),
        "info logs relayed: {logs:?}"
    );
    assert!(
        !logs.iter().any(|l| l.contains("debug")),
        "no debug log at info: {logs:?}"
    );
}
