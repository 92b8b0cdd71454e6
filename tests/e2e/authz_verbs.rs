//! Authorization on every verb that names something, on both revisions: for each
//! verb, a name the caller may not use and a name that does not exist get
//! byte-identical answers (HTTP status and body, same JSON-RPC id), and the name the
//! caller may use works, so the comparison is not between two blanket refusals.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{LegacySession, Reply, StackedGateway, modern_as, stacked_gateway};

/// One verb: its method and its params for a given name (or URI).
struct Verb {
    method: &'static str,
    params: fn(&str) -> Value,
    allowed: &'static str,
    forbidden: &'static str,
    nonexistent: &'static str,
}

fn verbs(legacy: bool) -> Vec<Verb> {
    let mut verbs = vec![
        Verb {
            method: "tools/call",
            params: |n| json!({"name": n, "arguments": {"text": "x"}}),
            allowed: "gh_echo",
            forbidden: "gh_secret",
            nonexistent: "gh_nope",
        },
        Verb {
            method: "prompts/get",
            params: |n| json!({"name": n}),
            allowed: "gh_open",
            forbidden: "gh_secret",
            nonexistent: "gh_nope",
        },
        Verb {
            method: "resources/read",
            params: |u| json!({"uri": u}),
            allowed: "gh://open",
            forbidden: "gh://secret",
            nonexistent: "gh://nope",
        },
        Verb {
            method: "resources/read",
            params: |u| json!({"uri": u}),
            allowed: "gh://items/1",
            forbidden: "gh://hidden/1",
            nonexistent: "nowhere://1",
        },
        Verb {
            method: "completion/complete",
            params: |n| {
                json!({"ref": {"type": "ref/prompt", "name": n},
                        "argument": {"name": "topic", "value": ""}})
            },
            allowed: "gh_open",
            forbidden: "gh_secret",
            nonexistent: "gh_nope",
        },
        Verb {
            method: "completion/complete",
            params: |u| {
                json!({"ref": {"type": "ref/resource", "uri": u},
                        "argument": {"name": "id", "value": ""}})
            },
            allowed: "gh://items/{id}",
            forbidden: "gh://hidden/{id}",
            nonexistent: "nowhere://{id}",
        },
    ];
    if legacy {
        for method in ["resources/subscribe", "resources/unsubscribe"] {
            verbs.push(Verb {
                method,
                params: |u| json!({"uri": u}),
                allowed: "gh://open",
                forbidden: "gh://secret",
                nonexistent: "gh://nope",
            });
        }
    }
    verbs
}

async fn gateway(idp: &Idp) -> (StackedGateway, vmcp_examples::demo::RunningDemo) {
    let gh = spawn(
        DemoSpec {
            resources: vec!["gh://open".into(), "gh://secret".into()],
            templates: vec!["gh://items/{id}".into(), "gh://hidden/{id}".into()],
            prompts: vec!["open".into(), "secret".into()],
            ..DemoSpec::new("gh", &["echo", "secret"])
        },
        0,
    )
    .await
    .unwrap();
    let yaml = format!(
        r#"
name: eng
backends: [{{name: gh, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
  authz:
    type: cedar
    policies:
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");'
      - 'permit(principal, action == Action::"get_prompt", resource == Prompt::"gh_open");'
      - 'permit(principal, action == Action::"read_resource", resource) when {{ resource.name == "gh://open" || resource.name like "gh://items/*" }};'
"#,
        gh.url(),
        idp.issuer
    );
    (stacked_gateway(config(&yaml)).await, gh)
}

fn assert_identical(verb: &Verb, revision: &str, forbidden: &Reply, nonexistent: &Reply) {
    let what = format!("{revision} {} {}", verb.method, verb.forbidden);
    assert_eq!(forbidden.status, 403, "{what}: {}", forbidden.raw);
    assert_eq!(
        (forbidden.status, &forbidden.raw),
        (nonexistent.status, &nonexistent.raw),
        "{what}: forbidden and nonexistent answers differ"
    );
}

fn assert_allowed(verb: &Verb, revision: &str, reply: &Reply) {
    assert_eq!(
        reply.status, 200,
        "{revision} {} {}: {}",
        verb.method, verb.allowed, reply.raw
    );
    assert!(
        reply.body.get("result").is_some(),
        "{revision} {} {}: {}",
        verb.method,
        verb.allowed,
        reply.raw
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_and_nonexistent_are_byte_identical_on_modern() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let (gw, _gh) = gateway(&idp).await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let url = gw.url();
    for verb in verbs(false) {
        let call =
            |name: &'static str| modern_as(&url, Some(&alice), verb.method, (verb.params)(name));
        let allowed = call(verb.allowed).await;
        assert_allowed(&verb, "modern", &allowed);
        let forbidden = call(verb.forbidden).await;
        let nonexistent = call(verb.nonexistent).await;
        assert_identical(&verb, "modern", &forbidden, &nonexistent);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_and_nonexistent_are_byte_identical_on_legacy() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let (gw, _gh) = gateway(&idp).await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let mut session = LegacySession::open(&gw.url(), Some(&alice)).await;
    for verb in verbs(true) {
        let allowed = session
            .request_with_id(7, verb.method, (verb.params)(verb.allowed))
            .await;
        assert_allowed(&verb, "legacy", &allowed);
        let forbidden = session
            .request_with_id(8, verb.method, (verb.params)(verb.forbidden))
            .await;
        let nonexistent = session
            .request_with_id(8, verb.method, (verb.params)(verb.nonexistent))
            .await;
        assert_identical(&verb, "legacy", &forbidden, &nonexistent);
    }
}

/// The first SSE `data:` message of a Modern `subscriptions/listen` for `uris`: the
/// acknowledgment, which lists the accepted filter.
async fn listen_acknowledgment(url: &str, token: &str, uris: &[&str]) -> (u16, String) {
    use futures::StreamExt;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": {
    "notifications": {"resourceSubscriptions": uris},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp-tests", "version": "1"}
    }}});
    let response = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("listen");
    let status = response.status().as_u16();
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(data) = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| !d.is_empty())
        {
            return (status, data.to_owned());
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(_) => return (status, text),
            Err(_) => panic!("no listen acknowledgment within 20s: {text:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_filters_accept_only_readable_uris_and_reveal_nothing() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let (gw, _gh) = gateway(&idp).await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let (status, ack) =
        listen_acknowledgment(&gw.url(), &alice, &["gh://open", "gh://secret"]).await;
    assert_eq!(status, 200, "{ack}");
    let ack: Value = serde_json::from_str(&ack).expect("acknowledgment JSON");
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["gh://open"]),
        "only the readable URI is accepted: {ack}"
    );
    let forbidden = listen_acknowledgment(&gw.url(), &alice, &["gh://secret"]).await;
    let nonexistent = listen_acknowledgment(&gw.url(), &alice, &["gh://nope"]).await;
    assert_eq!(
        forbidden, nonexistent,
        "forbidden and nonexistent filters differ"
    );
    assert!(!forbidden.1.contains("gh://secret"), "{}", forbidden.1);
}
