//! Legacy sessions bound to their creator, over real HTTP with real JWTs: another
//! subject holding Alice's `Mcp-Session-Id` gets exactly the unknown-session answer
//! on POST, GET and DELETE, and Alice's session carries on.

use reqwest::Method;
use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey, now};
use vmcp_tests::stacked::stacked_gateway;

/// One raw request: status and body bytes.
async fn raw(
    method: Method,
    url: &str,
    token: &str,
    session: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, Vec<u8>, Option<String>) {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25");
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request to the gateway");
    let status = response.status().as_u16();
    let created = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // A GET stream that was accepted stays open: read only what arrives at once.
    let bytes = tokio::time::timeout(std::time::Duration::from_secs(2), response.bytes())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (status, bytes, created)
}

async fn open(url: &str, token: &str) -> String {
    let (status, _, session) = raw(
        Method::POST,
        url,
        token,
        None,
        Some(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "binding-test", "version": "1"}}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "initialize");
    let session = session.expect("a session id");
    let (status, _, _) = raw(
        Method::POST,
        url,
        token,
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    )
    .await;
    assert_eq!(status, 202, "notifications/initialized");
    session
}

fn list(id: u64) -> Option<serde_json::Value> {
    Some(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subject_on_a_session_is_answered_as_an_unknown_session() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let gw = stacked_gateway(config(&format!(
        "name: eng\nbackends: [{{name: gh, url: '{}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n",
        gh.url(),
        idp.issuer
    )))
    .await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));
    let session = open(&url, &alice).await;
    let unknown = "00000000-0000-0000-0000-000000000000";

    // POST, GET stream and DELETE: Bob on Alice's session == anyone on no session.
    for (verb, body) in [
        (Method::POST, list(5)),
        (Method::GET, None),
        (Method::DELETE, None),
    ] {
        let (status, bytes, _) = raw(verb.clone(), &url, &bob, Some(&session), body.clone()).await;
        let (unknown_status, unknown_bytes, _) =
            raw(verb.clone(), &url, &bob, Some(unknown), body).await;
        assert_eq!(
            (status, String::from_utf8_lossy(&bytes)),
            (unknown_status, String::from_utf8_lossy(&unknown_bytes)),
            "{verb}: Bob on Alice's session must look exactly like an unknown session"
        );
        // rmcp answers a DELETE of an unknown session as a success (it is gone
        // either way); that Bob's did nothing is checked on Alice's next request.
        if verb != Method::DELETE {
            assert!(
                (400..500).contains(&status),
                "{verb}: Bob is refused, got {status}"
            );
        }
    }

    // Alice is unaffected; a refreshed token of hers (new iat/exp) keeps the session.
    let (status, bytes, _) = raw(Method::POST, &url, &alice, Some(&session), list(6)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert!(String::from_utf8_lossy(&bytes).contains("gh_echo"));
    let refreshed = key.sign(&idp.claims(
        "alice",
        json!({"iat": now() + 1, "exp": now() + 7200, "jti": "refreshed"}),
    ));
    assert_ne!(refreshed, alice);
    let (status, _, _) = raw(Method::POST, &url, &refreshed, Some(&session), list(7)).await;
    assert_eq!(status, 200, "a refreshed token of the same subject");

    assert_eq!(gw.vmcp.sessions().len(), 1, "Alice's listener");
    // Alice's own DELETE ends the session; after it, the id is unknown for her too.
    let (status, _, _) = raw(Method::DELETE, &url, &alice, Some(&session), None).await;
    assert!((200..300).contains(&status), "Alice's DELETE: {status}");
    assert_eq!(
        gw.vmcp.sessions().len(),
        0,
        "the listener is released at once"
    );
    let (status, _, _) = raw(Method::POST, &url, &alice, Some(&session), list(8)).await;
    assert_eq!(status, 404, "a deleted session is gone");
}
