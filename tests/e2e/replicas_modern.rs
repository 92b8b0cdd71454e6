//! Modern (2026-07-28) resumes on any replica: two in-process gateways sharing a real
//! redis-server and a configured `sealing` key. A parked Legacy backend call resumed
//! on the replica that did not park it is forwarded to its owner over Redis pub/sub;
//! a composite run's paused state opens on either replica; a key rotation accepts
//! the previous key and refuses a removed one; forged and tampered states are
//! refused; a dead owner is a clean, retryable `-32000`.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vmcp_tests::redis::RedisServer;
use vmcp_tests::stacked::modern_as;
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{Gateway, config, gateway, serve_on_loopback};

use crate::bridge::{Asking, call_as_modern_from};

/// A key file of this test's own.
struct Keys(PathBuf);

impl Keys {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vmcp-replicas-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A key file holding `secret` (at least 32 bytes).
    fn key(&self, name: &str, secret: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, secret).unwrap();
        path.display().to_string()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The asking Legacy backend (`tests/e2e/bridge.rs`) on loopback.
async fn asking_backend() -> (String, CancellationToken) {
    let backend = Asking(Arc::default());
    let service: StreamableHttpService<Asking, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(backend.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let (addr, stop) = serve_on_loopback(axum::Router::new().nest_service("/mcp", service)).await;
    (format!("http://{addr}/mcp"), stop)
}

const GREET: &str = r#"
  - name: greet
    description: ask a name, greet it
    parameters: {type: object, properties: {greeting: {type: string}}, required: [greeting]}
    steps:
      - id: ask
        type: elicitation
        message: "Who gets the {{ params.greeting }}?"
        schema: {type: object, properties: {name: {type: string}}, required: [name]}
      - id: greet
        tool: flow.echo
        dependsOn: [ask]
        arguments: {text: "{{ params.greeting }} {{ steps.ask.output.content.name }}"}
"#;

/// A replica: both backends, the shared Redis, `sealing` as given.
async fn replica(asking: &str, flow: &FlowBackend, redis: &str, sealing: &str) -> Gateway {
    gateway(config(&format!(
        "backends:\n  - {{name: asking, url: '{asking}'}}\n  - {{name: flow, url: '{}'}}\n\
         sessionStorage: {{provider: redis, address: '{redis}', keyPrefix: 'rm-test:'}}\n\
         sealing: {sealing}\ncompositeTools:\n{GREET}",
        flow.url()
    )))
    .await
}

async fn ask(gw: &Gateway, extra: Value) -> Value {
    call_as_modern_from(&reqwest::Client::new(), &gw.url(), "asking_ask", extra).await
}

/// Park a call on `gw`: its `requestState`.
async fn park(gw: &Gateway) -> String {
    let first = ask(gw, json!({})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(
        first["result"]["inputRequests"]["vmcp"]["params"]["message"], "who are you?",
        "{first}"
    );
    first["result"]["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned()
}

fn answer(state: &str, name: &str) -> Value {
    json!({"requestState": state,
           "inputResponses": {"vmcp": {"action": "accept", "content": {"name": name}}}})
}

fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// A parked call resumes on the other replica (through its owner), forged and
/// tampered states are refused there, a composite's paused run resumes on the
/// other replica, and a call whose owner died is a retryable -32000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_completes_on_the_replica_that_did_not_park_it() {
    let (asking, _stop) = asking_backend().await;
    let flow = FlowBackend::start().await;
    let redis = RedisServer::start().await;
    let keys = Keys::new("resume");
    let key = keys.key("k", "shared-0123456789abcdef0123456789abcdef");
    let sealing = format!("{{keyFile: '{key}'}}");
    let a = replica(&asking, &flow, &redis.address(), &sealing).await;
    let b = replica(&asking, &flow, &redis.address(), &sealing).await;

    // Parked on A, answered on B: the backend (called by A) got B's caller's answer.
    let state = park(&a).await;
    let done = ask(&b, answer(&state, "carol")).await;
    assert_eq!(text(&done), r#"answer: {"name":"carol"}"#, "{done}");
    // Spent on A: a replay on either replica is refused.
    for gw in [&a, &b] {
        let replayed = ask(gw, answer(&state, "eve")).await;
        assert_eq!(replayed["error"]["code"], -32602, "{replayed}");
    }

    // Forged and tampered states are refused on B before anything is forwarded.
    let state = park(&a).await;
    let mut tampered = state.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for forged in ["bm90IGEgc3RhdGU", tampered.as_str()] {
        let refused = ask(&b, answer(forged, "mallory")).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["error"]["message"], "invalid requestState");
    }
    // The genuine state was not spent by the refusals.
    let done = ask(&b, answer(&state, "dave")).await;
    assert_eq!(text(&done), r#"answer: {"name":"dave"}"#, "{done}");

    // A composite run paused on B resumes on A: its state is sealed with the shared key.
    let greet = |greeting: &str, retry: Option<(Value, &str)>| {
        let mut params = json!({
            "name": "greet",
            "arguments": {"greeting": greeting},
            "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}},
        });
        if let Some((responses, state)) = retry {
            params["inputResponses"] = responses;
            params["requestState"] = json!(state);
        }
        params
    };
    let paused = modern_as(&b.url(), None, "tools/call", greet("hey", None)).await;
    assert_eq!(
        paused.body["result"]["resultType"], "input_required",
        "{}",
        paused.raw
    );
    let composite_state = paused.body["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let accept = json!({"ask": {"action": "accept", "content": {"name": "Bo"}}});
    let resumed = modern_as(
        &a.url(),
        None,
        "tools/call",
        greet("hey", Some((accept, &composite_state))),
    )
    .await;
    assert!(resumed.raw.contains("hey Bo"), "{}", resumed.raw);
    assert_ne!(resumed.body["result"]["isError"], true, "{}", resumed.raw);
    assert_eq!(
        flow.calls_of("echo").len(),
        1,
        "the step after the answer ran once"
    );

    // The owner dies with a call parked: B answers a clean, retryable error.
    let orphan = park(&a).await;
    drop(a);
    let started = std::time::Instant::now();
    let gone = ask(&b, answer(&orphan, "frank")).await;
    assert_eq!(gone["error"]["code"], -32000, "{gone}");
    assert_eq!(gone["error"]["data"]["retryable"], true, "{gone}");
    assert!(
        gone["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("call the tool again"),
        "{gone}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    // Called again, the tool parks anew on a live replica.
    let again = park(&b).await;
    let done = ask(&b, answer(&again, "frank")).await;
    assert_eq!(text(&done), r#"answer: {"name":"frank"}"#, "{done}");
}

/// A rotation: a replica with the new key and the old one as previous resumes a
/// call whose state the old key sealed; a replica without the old key refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_accepts_the_previous_key_and_refuses_a_removed_one() {
    let (asking, _stop) = asking_backend().await;
    let flow = FlowBackend::start().await;
    let redis = RedisServer::start().await;
    let keys = Keys::new("rotation");
    let old = keys.key("old", "old-key-0123456789abcdef0123456789abcdef");
    let new = keys.key("new", "new-key-0123456789abcdef0123456789abcdef");
    let before = replica(
        &asking,
        &flow,
        &redis.address(),
        &format!("{{keyFile: '{old}'}}"),
    )
    .await;
    let during = replica(
        &asking,
        &flow,
        &redis.address(),
        &format!("{{keyFile: '{new}', previousKeyFiles: ['{old}']}}"),
    )
    .await;
    let after = replica(
        &asking,
        &flow,
        &redis.address(),
        &format!("{{keyFile: '{new}'}}"),
    )
    .await;

    let state = park(&before).await;
    let done = ask(&during, answer(&state, "grace")).await;
    assert_eq!(text(&done), r#"answer: {"name":"grace"}"#, "{done}");

    let state = park(&before).await;
    let refused = ask(&after, answer(&state, "heidi")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"], "invalid requestState",
        "{refused}"
    );
    // The old-key replica still holds the call: it resumes there.
    let done = ask(&before, answer(&state, "heidi")).await;
    assert_eq!(text(&done), r#"answer: {"name":"heidi"}"#, "{done}");
}
