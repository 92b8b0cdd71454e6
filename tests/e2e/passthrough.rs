//! What of a caller's request headers reaches a backend, against the Python SDK
//! backend that answers the SHA-256 of each header it got (`--echo-headers`): a
//! request with two `Authorization` headers is refused before either is checked or
//! passed on, and a backend strategy's header is never replaced by a caller's.

use serde_json::{Value, json};
use vmcp_service::Vmcp;
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{LegacySession, Reply, modern_with_headers, stacked_gateway};
use vmcp_tests::{config, py_backend, sha256_hex};

/// The headers the backend saw on the call that answered `reply`.
fn seen(reply: &Reply) -> Value {
    let text = reply.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result: {:?}", reply.body));
    serde_json::from_str(text).expect("headers JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_authorization_headers_are_refused_before_either_is_checked_or_passed_on() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let vault = py_backend("vault", &["--echo-headers"]).await;
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: vault, url: '{}'}}]
passthroughHeaders: [Authorization]
passthroughAuthorization: true
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
"#,
        vault.url, idp.issuer
    )))
    .await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let call = json!({"name": "vault_headers", "arguments": {}});

    // One validated token: passed on as configured.
    let one = modern_with_headers(&url, Some(&alice), &[], "tools/call", call.clone()).await;
    assert_eq!(one.status, 200, "{:?}", one.body);
    assert_eq!(
        seen(&one)["authorization"],
        sha256_hex(&format!("Bearer {alice}"))
    );

    // A second Authorization after the valid one (the one the gateway would check),
    // or before it: 400 either way, and nothing reaches the backend.
    let valid = format!("Bearer {alice}");
    for (order, token, extra) in [
        (
            "after",
            Some(alice.as_str()),
            vec![("Authorization", "Bearer forged")],
        ),
        (
            "before",
            None,
            vec![
                ("Authorization", "Bearer forged"),
                ("Authorization", valid.as_str()),
            ],
        ),
    ] {
        let reply = modern_with_headers(&url, token, &extra, "tools/call", call.clone()).await;
        assert_eq!(reply.status, 400, "{order}: {:?}", reply.body);
        assert_eq!(reply.body["error"]["code"], -32600, "{order}");
        assert_eq!(
            reply.body["error"]["message"], "more than one Authorization header",
            "{order}"
        );
    }

    // The Legacy edge refuses the same way, on `initialize` and inside a session.
    let response = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .bearer_auth(&alice)
        .header("Authorization", "Bearer forged")
        .json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let session = LegacySession::open(&url, Some(&alice)).await;
    let response = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session.id())
        .header("MCP-Protocol-Version", "2025-11-25")
        .bearer_auth(&alice)
        .header("Authorization", "Bearer forged")
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params": call}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_header_is_never_replaced_by_a_passed_through_one() {
    let secret = format!("vault-secret-{}", std::process::id());
    let vault = py_backend("vault", &["--echo-headers"]).await;
    let yaml = |passthrough: &str| {
        format!(
            r#"
backends: [{{name: vault, url: '{}'}}]
passthroughHeaders: [{passthrough}]
outgoingAuth:
  backends:
    vault:
      type: header_injection
      headerInjection: {{headerName: X-Api-Key, headerValue: '{secret}'}}
"#,
            vault.url
        )
    };

    // Refused at load: the caller would choose the backend's credentials.
    let mut conflicting = config(&yaml("X-Tenant"));
    conflicting.passthrough_headers.push("x-api-key".into());
    let Err(refused) = Vmcp::start(conflicting).await else {
        panic!("a passthrough header the strategy sets is refused");
    };
    let text = refused.to_string();
    assert!(
        text.contains("passthroughHeaders[1]: \"x-api-key\" is set by outgoingAuth.backends.vault"),
        "{text}"
    );
    assert!(!text.contains(&secret), "{text}");

    // And at run time: an embedder that sets the list through the registry still
    // gets the strategy's value on the wire, the caller's other headers passed on.
    let gw = stacked_gateway(config(&yaml("X-Tenant"))).await;
    let registry = gw.vmcp.registry();
    registry.set_passthrough(&["X-Tenant".into(), "X-Api-Key".into()]);
    let backend = config(&yaml("X-Tenant")).backends[0].clone();
    registry.upsert(backend).await;
    let reply = modern_with_headers(
        &gw.url(),
        None,
        &[("X-Api-Key", "caller-chosen"), ("X-Tenant", "acme")],
        "tools/call",
        json!({"name": "vault_headers", "arguments": {}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let headers = seen(&reply);
    assert_eq!(headers["x-api-key"], sha256_hex(&secret), "{headers}");
    assert_eq!(headers["x-tenant"], sha256_hex("acme"), "{headers}");
}
