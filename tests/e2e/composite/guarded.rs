//! What a composite may not do that a direct call may not either: pass arguments an
//! argument-reading Cedar policy forbids (rendered from the call's parameters or from
//! an elicitation answer), or hand the caller a backend's reserved `_meta`.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::stacked::{LegacySession, Reply, modern_as, stacked_gateway};
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{config, gateway, py_client};

use super::{call_both, result};

const DENIED: &str = r#"{"code":403,"message":"call denied by authorization policy"}"#;

/// The JSON-RPC error of `reply` (`Null` when it is a result).
fn error(reply: &Reply) -> Value {
    reply.body["error"].clone()
}

/// `tools/call` on both revisions, as [`Reply`]s (Modern stateless, Legacy session).
async fn call_replies(url: &str, name: &str, arguments: Value) -> [Reply; 2] {
    let params = json!({"name": name, "arguments": arguments});
    let modern = modern_as(url, None, "tools/call", params.clone()).await;
    let mut session = LegacySession::open(url, None).await;
    let legacy = session.request("tools/call", params).await;
    [modern, legacy]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_is_decided_with_its_rendered_arguments_like_a_direct_call() {
    let flow = FlowBackend::start().await;
    let yaml = format!(
        r#"
backends: [{{name: flow, url: '{}'}}]
incomingAuth:
  type: anonymous
  authz:
    type: cedar
    policies:
      - 'permit(principal, action, resource);'
      - 'forbid(principal, action == Action::"call_tool", resource == Tool::"flow_echo") when {{ context.arguments has text && context.arguments.text like "*secret*" }};'
compositeTools:
  - name: relay
    description: echo a word
    parameters: {{type: object, properties: {{word: {{type: string}}}}, required: [word]}}
    steps:
      - {{id: say, tool: flow.echo, arguments: {{text: "say {{{{ params.word }}}}"}}}}
  - name: ask_relay
    description: ask a word, echo it
    steps:
      - id: ask
        type: elicitation
        message: Which word?
        schema: {{type: object, properties: {{word: {{type: string}}}}, required: [word]}}
      - id: say
        tool: flow.echo
        dependsOn: [ask]
        arguments: {{text: "say {{{{ steps.ask.output.content.word }}}}"}}
"#,
        flow.url()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let url = gw.url();
    let denied: Value = serde_json::from_str(DENIED).unwrap();

    // Directly: the forbidden arguments are refused, others pass.
    for reply in call_replies(&url, "flow_echo", json!({"text": "say secret"})).await {
        assert_eq!(error(&reply), denied, "{:?}", reply.body);
    }
    for reply in call_replies(&url, "flow_echo", json!({"text": "say hello"})).await {
        assert_eq!(
            result(&reply)["structuredContent"]["text"],
            "flow: say hello"
        );
    }
    // Through the composite, the step with the same rendered arguments is refused
    // the same way; with harmless ones it runs.
    for reply in call_replies(&url, "relay", json!({"word": "secret"})).await {
        assert_eq!(error(&reply), denied, "{:?}", reply.body);
    }
    for reply in call_replies(&url, "relay", json!({"word": "hello"})).await {
        assert_eq!(
            result(&reply)["structuredContent"]["text"],
            "flow: say hello"
        );
    }
    // Arguments made from an elicitation answer: the same, on both revisions.
    for mode in ["legacy", "2026-07-28"] {
        let report = py_client(
            &url,
            mode,
            json!([
                {"op": "on_elicitation", "answers": [
                    {"action": "accept", "content": {"word": "secret"}},
                    {"action": "accept", "content": {"word": "fine"}},
                ]},
                {"op": "call_tool", "name": "ask_relay", "arguments": {}},
                {"op": "call_tool", "name": "ask_relay", "arguments": {}},
            ]),
        )
        .await;
        let refused = &report["results"][1]["error"];
        assert_eq!(refused["code"], 403, "{mode}: {report}");
        assert_eq!(refused["message"], denied["message"], "{mode}: {report}");
        assert_eq!(
            report["results"][2]["structured"]["text"], "flow: say fine",
            "{mode}: {report}"
        );
    }
    let seen: Vec<Value> = flow
        .calls_of("echo")
        .into_iter()
        .map(|c| c.arguments["text"].clone())
        .collect();
    assert!(
        seen.iter()
            .all(|t| !t.as_str().unwrap_or_default().contains("secret")),
        "the backend never saw the forbidden arguments: {seen:?}"
    );
    assert_eq!(seen.len(), 6, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_result_carries_no_reserved_meta_of_the_backend() {
    let demo = spawn(DemoSpec::new("gh", &["stamped"]), 0)
        .await
        .expect("demo backend");
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: gh, url: '{}'}}]
compositeTools:
  - name: through
    description: the stamped tool, as the last step
    steps:
      - {{id: stamp, tool: gh.stamped}}
"#,
        demo.url()
    )))
    .await;
    for result in call_both(&gw.url(), "through", json!({})).await {
        assert_eq!(super::text(&result), "stamped", "{result}");
        let meta = &result["_meta"];
        assert_ne!(
            meta["io.modelcontextprotocol/serverInfo"]["name"], "forged",
            "{result}"
        );
        // The end-to-end and foreign keys pass, as on a direct call.
        assert_eq!(
            meta["io.modelcontextprotocol/related-task"],
            json!({"taskId": "t-1"}),
            "{result}"
        );
        assert_eq!(meta["demo/own"], json!([1, 2]), "{result}");
    }
}
