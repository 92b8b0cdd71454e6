//! Cedar authorization end to end: one admission decision filters lists and denies
//! calls (HTTP 403, JSON-RPC 403) on both revisions, identically for forbidden and
//! nonexistent tools, with group-, annotation- and argument-based policies.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{LegacySession, Reply, modern_as, stacked_gateway, tool_names};

const DENIED: &str = r#"{"jsonrpc":"2.0","id":7,"error":{"code":403,"message":"call denied by authorization policy"}}"#;

fn assert_denied(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 403, "{what}: {:?}", reply.body);
    assert_eq!(
        reply.body,
        serde_json::from_str::<Value>(DENIED).unwrap(),
        "{what}"
    );
}

fn yaml(backend: &str, issuer: &str, policies: &[&str]) -> String {
    let policies: Vec<String> = policies.iter().map(|p| format!("      - '{p}'")).collect();
    format!(
        r#"
name: eng
backends: [{{name: gh, url: '{backend}'}}]
aggregation:
  tools:
    - workload: gh
      overrides:
        echo: {{annotations: {{readOnlyHint: true}}}}
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp}}
  authz:
    type: cedar
    policies:
{}
"#,
        policies.join("\n")
    )
}

async fn modern_call(url: &str, token: &str, name: &str, arguments: Value) -> Reply {
    // The raw client always uses id 1; re-number so bodies compare against DENIED.
    let mut reply = modern_as(
        url,
        Some(token),
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    if reply.status == 403 {
        reply.body["id"] = json!(7);
    }
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_call_agree_on_both_revisions() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add", "delete_repo"]), 0)
        .await
        .unwrap();
    let gw = stacked_gateway(config(&yaml(
        &gh.url(),
        &idp.issuer,
        &[
            r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_add");"#,
            r#"permit(principal in THVGroup::"admins", action == Action::"call_tool", resource in MCP::"eng");"#,
            r#"forbid(principal, action == Action::"call_tool", resource) when { context.arguments has a && context.arguments.a == 666 };"#,
        ],
    )))
    .await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({"groups": ["devs"]})));
    let admin = key.sign(&idp.claims("root", json!({"groups": ["admins"]})));

    // Modern: the list is filtered to what alice may call.
    let list = modern_as(&url, Some(&alice), "tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["gh_add"]);
    let ok = modern_call(&url, &alice, "gh_add", json!({"a": 2, "b": 40})).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body["result"]["content"][0]["text"], "42");
    // Forbidden, nonexistent, and argument-denied calls get one identical answer.
    assert_denied(
        &modern_call(&url, &alice, "gh_delete_repo", json!({})).await,
        "forbidden",
    );
    assert_denied(
        &modern_call(&url, &alice, "gh_no_such_tool", json!({})).await,
        "nonexistent",
    );
    assert_denied(
        &modern_call(&url, &alice, "gh_add", json!({"a": 666, "b": 1})).await,
        "argument",
    );

    // Legacy: same decisions inside a session; never a 200 with isError.
    let mut session = LegacySession::open(&url, Some(&alice)).await;
    assert_eq!(
        tool_names(&session.request("tools/list", json!({})).await),
        ["gh_add"]
    );
    for name in ["gh_delete_repo", "gh_no_such_tool"] {
        let mut reply = session
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
        reply.body["id"] = json!(7);
        assert_denied(&reply, name);
    }
    let reply = session
        .request(
            "tools/call",
            json!({"name": "gh_add", "arguments": {"a": 1, "b": 1}}),
        )
        .await;
    assert_eq!(reply.body["result"]["content"][0]["text"], "2");

    // Another caller, another view: an admin sees and calls everything.
    let list = modern_as(&url, Some(&admin), "tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["gh_add", "gh_delete_repo", "gh_echo"]);
    let reply = modern_call(&url, &admin, "gh_delete_repo", json!({})).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    // ...but still not with the forbidden argument, and not a tool that does not exist.
    assert_denied(
        &modern_call(&url, &admin, "gh_add", json!({"a": 666, "b": 0})).await,
        "admin argument",
    );
    let missing = modern_call(&url, &admin, "gh_no_such_tool", json!({})).await;
    assert_eq!(missing.status, 200);
    assert_eq!(
        missing.body["error"]["code"], -32602,
        "allowed, then not found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotation_based_policy() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let gw = stacked_gateway(config(&yaml(
        &gh.url(),
        &idp.issuer,
        &[r#"permit(principal, action == Action::"call_tool", resource) when { context.annotations has readOnlyHint && context.annotations.readOnlyHint };"#],
    )))
    .await;
    let url = gw.url();
    let token = key.sign(&idp.claims("alice", json!({})));
    let list = modern_as(&url, Some(&token), "tools/list", json!({})).await;
    assert_eq!(
        tool_names(&list),
        ["gh_echo"],
        "only the read-only tool is listed"
    );
    let ok = modern_call(&url, &token, "gh_echo", json!({"text": "hi"})).await;
    assert_eq!(ok.body["result"]["content"][0]["text"], "gh: hi");
    assert_denied(
        &modern_call(&url, &token, "gh_add", json!({"a": 1, "b": 2})).await,
        "not read-only",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_and_gate_alone_in_front_of_a_plain_rmcp_server() {
    use rmcp::transport::StreamableHttpService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use std::sync::Arc;
    use tower::ServiceBuilder;
    use vmcp_examples::demo::DemoBackend;
    use vmcp_layers::auth::{AuthLayer, JwtSettings, JwtValidator};
    use vmcp_layers::authz::AuthorizationLayer;
    use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, sources};
    use vmcp_layers::gate::GateLayer;
    use vmcp_layers::parse::McpParseLayer;

    // Not the aggregator: an ordinary rmcp server, as in examples/src/bin/gate_jwt.rs.
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let backend = DemoBackend::new(DemoSpec::new("plain", &["echo", "add"]));
    let server: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            Default::default(),
        );
    let validator = Arc::new(JwtValidator::new(
        JwtSettings::new(idp.issuer.clone(), "vmcp"),
        reqwest::Client::new(),
    ));
    let policies = vec![
        r#"permit(principal in THVGroup::"admins", action == Action::"call_tool", resource);"#
            .to_owned(),
        r#"permit(principal, action == Action::"call_tool", resource == Tool::"echo");"#.to_owned(),
    ];
    let cedar =
        CedarAuthorizer::from_sources(&sources("p", &policies, &[]), CedarSettings::default())
            .unwrap();
    let gated = ServiceBuilder::new()
        .layer(AuthLayer::jwt(validator, None))
        .layer(McpParseLayer::new())
        .layer(AuthorizationLayer::new(Arc::new(cedar)))
        .layer(GateLayer::new())
        .service(server);
    let (addr, stop) =
        vmcp_tests::serve_on_loopback(axum::Router::new().route_service("/mcp", gated)).await;
    let url = format!("http://{addr}/mcp");

    let alice = key.sign(&idp.claims("alice", json!({})));
    let admin = key.sign(&idp.claims("root", json!({"groups": ["admins"]})));
    assert_eq!(
        modern_as(&url, None, "tools/list", json!({})).await.status,
        401
    );
    let echo = modern_call(&url, &alice, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.body["result"]["content"][0]["text"], "plain: hi");
    assert_denied(
        &modern_call(&url, &alice, "add", json!({"a": 1, "b": 2})).await,
        "plain add",
    );
    let mut session = LegacySession::open(&url, Some(&alice)).await;
    let mut reply = session
        .request(
            "tools/call",
            json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    reply.body["id"] = json!(7);
    assert_denied(&reply, "plain add, Legacy");
    let add = modern_call(&url, &admin, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(add.body["result"]["content"][0]["text"], "3");
    stop.cancel();
}
