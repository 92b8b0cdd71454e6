//! Caps on Modern `subscriptions/listen` streams (`operational.listenStreams`) over
//! real HTTP: one caller holding its cap is refused a clean JSON-RPC error, not a
//! hang, while another caller still opens one; a closed stream gives its slot back.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;

/// One client from `ip` (a loopback address of its own).
fn client_at(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// What a `subscriptions/listen` got.
enum Listen {
    /// The stream, open (held while this lives), after its acknowledgment.
    Open(#[allow(dead_code)] reqwest::Response),
    /// Refused: the HTTP status and the JSON-RPC body.
    Refused(u16, Value),
}

/// Open a Modern `subscriptions/listen` from `client`, waiting for its
/// acknowledgment (the first SSE `data:` message).
async fn listen(client: &reqwest::Client, url: &str, id: u64) -> Listen {
    listen_as(client, url, None, id).await
}

/// [`listen`] with a bearer token.
async fn listen_as(client: &reqwest::Client, url: &str, token: Option<&str>, id: u64) -> Listen {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
    "notifications": {"toolsListChanged": true},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp-tests", "version": "1"}
    }}});
    let mut request = client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.expect("listen");
    let status = response.status().as_u16();
    if status != 200 {
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body: {text}"));
        return Listen::Refused(status, body);
    }
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !text.lines().any(|l| l.starts_with("data:")) {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("no listen acknowledgment: {other:?} {text:?}"),
        }
    }
    Listen::Open(response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_at_its_listen_cap_is_refused_while_others_still_listen() {
    let demo = spawn(DemoSpec::new("demo", &["alpha"]), 0).await.unwrap();
    let gw = vmcp_tests::served_gateway(config(&format!(
        "backends:\n  - {{name: demo, url: '{}'}}\noperational:\n  listenStreams: {{max: 10, maxPerAddress: 2}}\n",
        demo.url()
    )))
    .await;
    let url = gw.url();
    let (flood, other) = (client_at("127.0.0.2"), client_at("127.0.0.3"));

    let mut held = Vec::new();
    for id in 1..=2 {
        match listen(&flood, &url, id).await {
            Listen::Open(stream) => held.push(stream),
            Listen::Refused(status, body) => panic!("stream {id} under the cap: {status} {body}"),
        }
    }
    match listen(&flood, &url, 3).await {
        Listen::Refused(status, body) => {
            assert_eq!(status, 429, "{body}");
            assert_eq!(body["id"], 3, "answers the request: {body}");
            assert_eq!(body["error"]["code"], -32000, "{body}");
        }
        Listen::Open(_) => panic!("a third stream of one caller past its cap of 2"),
    }
    // Another caller is not locked out.
    let Listen::Open(_theirs) = listen(&other, &url, 4).await else {
        panic!("another caller's stream refused");
    };
    // A stream closed gives its slot back (the gateway sees the close soon after).
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match listen(&flood, &url, 5).await {
            Listen::Open(_) => break,
            Listen::Refused(..) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Listen::Refused(status, body) => panic!("slot not given back: {status} {body}"),
        }
    }
}

/// Authenticated callers are capped by identity (issuer and subject), not by
/// address: from one address, alice at her cap is refused while bob still listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_at_its_listen_cap_is_refused_while_another_on_the_same_address_listens() {
    use vmcp_tests::idp::{Idp, SigningKey};
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let demo = spawn(DemoSpec::new("demo", &["alpha"]), 0).await.unwrap();
    let gw = vmcp_tests::stacked::stacked_gateway(config(&format!(
        "backends:\n  - {{name: demo, url: '{}'}}\n\
         incomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n\
         operational:\n  listenStreams: {{maxPerIdentity: 1}}\n",
        demo.url(),
        idp.issuer
    )))
    .await;
    let url = gw.url();
    let client = reqwest::Client::new();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));
    let Listen::Open(_held) = listen_as(&client, &url, Some(&alice), 1).await else {
        panic!("alice's first stream refused");
    };
    match listen_as(&client, &url, Some(&alice), 2).await {
        Listen::Refused(status, body) => {
            assert_eq!(status, 429, "{body}");
            assert_eq!(body["error"]["code"], -32000, "{body}");
        }
        Listen::Open(_) => panic!("alice's second stream past her cap of 1"),
    }
    let Listen::Open(_bobs) = listen_as(&client, &url, Some(&bob), 3).await else {
        panic!("bob's stream refused: alice's cap is hers");
    };
}
