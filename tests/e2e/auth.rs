//! Authentication over real HTTP with real JWTs: an issuer on loopback with generated
//! RSA keys, discovery, JWKS, rotation, and every refusal answered 401 with a
//! `WWW-Authenticate` challenge pointing at the protected-resource metadata.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey, hs256_with_public_key, none_token, now};
use vmcp_tests::stacked::{LegacySession, modern_as, stacked_gateway, tool_names};

fn oidc_yaml(backend: &str, issuer: &str, extra: &str) -> String {
    format!(
        "name: eng\nbackends: [{{name: gh, url: '{backend}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{issuer}', audience: vmcp{extra}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_401_with_a_challenge() {
    let key = SigningKey::generate("k1");
    let rogue = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let gw = stacked_gateway(config(&oidc_yaml(&gh.url(), &idp.issuer, ""))).await;
    let url = gw.url();

    let good = key.sign(&idp.claims("alice", json!({})));
    let ok = modern_as(&url, Some(&good), "tools/list", json!({})).await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    assert_eq!(tool_names(&ok), ["gh_echo"]);

    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no token", None, ""),
        (
            "expired",
            Some(key.sign(&idp.claims("alice", json!({"exp": now() - 3600, "nbf": now() - 7200})))),
            "token expired",
        ),
        (
            "not yet valid",
            Some(key.sign(&idp.claims("alice", json!({"nbf": now() + 3600})))),
            "token not yet valid",
        ),
        (
            "wrong audience",
            Some(key.sign(&idp.claims("alice", json!({"aud": "someone-else"})))),
            "wrong audience",
        ),
        (
            "wrong issuer",
            Some(key.sign(&idp.claims("alice", json!({"iss": "https://evil.example"})))),
            "wrong issuer",
        ),
        (
            "signed by another key with the same kid",
            Some(rogue.sign(&idp.claims("alice", json!({})))),
            "bad signature",
        ),
        (
            "HS256 keyed with the public key",
            Some(hs256_with_public_key(&key, &idp.claims("alice", json!({})))),
            "algorithm not allowed for this key",
        ),
        (
            "alg none",
            Some(none_token(&idp.claims("alice", json!({})))),
            "malformed token or unsupported algorithm",
        ),
        (
            "garbage",
            Some("not.a.jwt".to_owned()),
            "malformed token or unsupported algorithm",
        ),
    ];
    for (case, token, description) in cases {
        let reply = modern_as(&url, token.as_deref(), "tools/list", json!({})).await;
        assert_eq!(reply.status, 401, "{case}: {:?}", reply.body);
        let challenge = reply.headers["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.starts_with("Bearer realm=\"vmcp\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains(&format!(
                "resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
                gw.addr
            )),
            "{case}: {challenge}"
        );
        if description.is_empty() {
            assert!(!challenge.contains("error="), "{case}: {challenge}");
        } else {
            assert!(
                challenge.contains(&format!(
                    "error=\"invalid_token\", error_description=\"{description}\""
                )),
                "{case}: {challenge}"
            );
        }
        assert_eq!(reply.body["error"]["code"], -32001, "{case}");
    }

    // The Legacy edge refuses the same way: no session without a token.
    let response = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let mut session = LegacySession::open(&url, Some(&good)).await;
    assert_eq!(
        tool_names(&session.request("tools/list", json!({})).await),
        ["gh_echo"]
    );

    // RFC 9728 metadata, at both the root and the path-suffixed location.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let doc: Value = reqwest::get(gw.at(path))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], format!("http://{}/mcp", gw.addr), "{path}");
        assert_eq!(doc["authorization_servers"], json!([idp.issuer]), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kid_is_refused_until_the_key_is_published() {
    let old = SigningKey::generate("old");
    let new = SigningKey::generate("new");
    let idp = Idp::start(&[&old]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    // Explicit jwksUrl; refetching on an unknown kid is allowed at any time here.
    let extra = format!(
        ", jwksUrl: '{}/jwks', jwksRefreshMinInterval: 0s",
        idp.issuer
    );
    let gw = stacked_gateway(config(&oidc_yaml(&gh.url(), &idp.issuer, &extra))).await;
    let url = gw.url();

    let old_token = old.sign(&idp.claims("alice", json!({})));
    assert_eq!(
        modern_as(&url, Some(&old_token), "tools/list", json!({}))
            .await
            .status,
        200
    );
    let new_token = new.sign(&idp.claims("bob", json!({})));
    let refused = modern_as(&url, Some(&new_token), "tools/list", json!({})).await;
    assert_eq!(refused.status, 401);
    assert!(
        refused.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("unknown signing key")
    );
    let fetches = idp.jwks_fetches();

    idp.publish(&new);
    let accepted = modern_as(&url, Some(&new_token), "tools/list", json!({})).await;
    assert_eq!(accepted.status, 200, "{:?}", accepted.body);
    assert_eq!(
        idp.jwks_fetches(),
        fetches + 1,
        "one refetch picked up the rotation"
    );
    // The old key still works, and a repeated token costs no fetch.
    assert_eq!(
        modern_as(&url, Some(&old_token), "tools/list", json!({}))
            .await
            .status,
        200
    );
    assert_eq!(idp.jwks_fetches(), fetches + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kids_do_not_hammer_the_issuer() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    // Discovery through /.well-known/openid-configuration, default rate limit (10 s).
    let gw = stacked_gateway(config(&oidc_yaml(&gh.url(), &idp.issuer, ""))).await;
    for i in 0..5 {
        let stranger = SigningKey::generate(&format!("unknown-{i}"));
        let token = stranger.sign(&idp.claims("mallory", json!({})));
        let reply = modern_as(&gw.url(), Some(&token), "tools/list", json!({})).await;
        assert_eq!(reply.status, 401);
    }
    assert_eq!(idp.jwks_fetches(), 1, "five unknown kids, one JWKS fetch");
}

const GREET: &str = r#"
compositeTools:
  - name: greet
    description: ask a name, echo it
    steps:
      - id: ask
        type: elicitation
        message: Who?
        schema: {type: object, properties: {name: {type: string}}, required: [name]}
      - id: say
        tool: gh.echo
        dependsOn: [ask]
        arguments: {text: "hi {{ steps.ask.output.content.name }}"}
"#;

/// A 2026-07-28 call of `greet` as `token`, declaring elicitation; a retry with
/// `state` answers the question with `name`.
async fn greet(url: &str, token: &str, retry: Option<(&str, &str)>) -> Value {
    let mut params = json!({
        "name": "greet",
        "arguments": {},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}},
    });
    if let Some((state, name)) = retry {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"ask": {"action": "accept", "content": {"name": name}}});
    }
    let reply = modern_as(url, Some(token), "tools/call", params).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_array_is_refused_and_paused_runs_stay_their_callers() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let yaml = oidc_yaml(&gh.url(), &idp.issuer, "") + GREET;
    let gw = stacked_gateway(config(&yaml)).await;
    let url = gw.url();

    // jsonwebtoken accepts an `iss` array holding the issuer; the identity it
    // yields has no issuer, and a run paused for it was sealed as anonymous's.
    for (case, claims, description) in [
        (
            "iss array",
            idp.claims("alice", json!({"iss": [idp.issuer]})),
            "wrong issuer",
        ),
        (
            "iss array with another",
            idp.claims(
                "alice",
                json!({"iss": ["https://evil.example", idp.issuer]}),
            ),
            "wrong issuer",
        ),
    ] {
        let reply = modern_as(&url, Some(&key.sign(&claims)), "tools/list", json!({})).await;
        assert_eq!(reply.status, 401, "{case}: {:?}", reply.body);
        let challenge = reply.headers["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.contains(&format!("error_description=\"{description}\"")),
            "{case}: {challenge}"
        );
    }

    // A paused run opens for its own caller only.
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));
    let paused = greet(&url, &alice, None).await;
    assert_eq!(paused["result"]["resultType"], "input_required", "{paused}");
    let state = paused["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let stolen = greet(&url, &bob, Some((&state, "Mallory"))).await;
    assert_eq!(stolen["error"]["code"], -32602, "{stolen}");
    let done = greet(&url, &alice, Some((&state, "Bo"))).await;
    assert!(done["result"].to_string().contains("hi Bo"), "{done}");
}
