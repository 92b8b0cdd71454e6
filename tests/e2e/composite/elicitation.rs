//! Elicitation steps over real HTTP: the Python SDK client's `elicitation_callback`
//! answers them over its 2025-11-25 session and through 2026-07-28 `input_required`
//! rounds; `onDecline`; a `requestState` the gateway did not seal for this call.

use base64::Engine as _;
use serde_json::{Value, json};
use vmcp_tests::stacked::modern_as;
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{gateway, py_client};

use super::flow_config;

const COMPOSITES: &str = r#"
  - name: greet
    description: stamp, ask a name, greet it
    parameters: {type: object, properties: {greeting: {type: string}}, required: [greeting]}
    steps:
      - {id: before, tool: flow.stamp, arguments: {label: "before-{{ params.greeting }}"}}
      - id: ask
        type: elicitation
        dependsOn: [before]
        message: "Who gets the {{ params.greeting }}?"
        schema: {type: object, properties: {name: {type: string}}, required: [name]}
      - id: greet
        tool: flow.echo
        dependsOn: [ask]
        arguments: {text: "{{ params.greeting }} {{ steps.ask.output.content.name }}"}
  - name: poll
    description: ask, and go on whatever the answer
    steps:
      - id: ask
        type: elicitation
        message: Proceed?
        schema: {type: object, properties: {ok: {type: boolean}}}
        onDecline: {action: continue}
      - id: report
        tool: flow.echo
        dependsOn: [ask]
        arguments: {text: "answer {{ steps.ask.output.action }}"}
"#;

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

fn answer(action: &str, content: Value) -> Value {
    json!({"op": "on_elicitation", "answers": [{"action": action, "content": content}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_answers_an_elicitation_step_on_both_revisions() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(&flow, COMPOSITES)).await;
    for (runs, mode) in MODES.into_iter().enumerate() {
        let name = format!("Ada-{mode}");
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                answer("accept", json!({"name": name})),
                {"op": "call_tool", "name": "greet", "arguments": {"greeting": "hello"}},
                {"op": "elicitations"},
            ]),
        )
        .await;
        let call = &report["results"][1];
        // The answer's content reached the next step's arguments, and the backend.
        assert_eq!(call["isError"], false, "{mode}: {report}");
        assert_eq!(
            call["structured"]["text"],
            format!("flow: hello {name}"),
            "{mode}: {report}"
        );
        let echoed = flow.calls_of("echo");
        assert_eq!(
            echoed.last().unwrap().arguments["text"],
            format!("hello {name}")
        );
        // The client was asked once, with the rendered message and the schema.
        let seen = report["results"][2]["seen"].as_array().unwrap();
        assert_eq!(seen.len(), 1, "{mode}: {report}");
        assert_eq!(seen[0]["message"], "Who gets the hello?");
        assert_eq!(seen[0]["schema"]["properties"]["name"]["type"], "string");
        // The step before the question ran once, also across the 2026-07-28 retry.
        assert_eq!(flow.calls_of("stamp").len(), runs + 1, "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_or_a_client_that_cannot_answer_follows_on_decline() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(&flow, COMPOSITES)).await;
    for mode in MODES {
        // Declined, `onDecline: continue`: the run goes on and sees the action.
        let report = py_client(
            &gw.url(),
            mode,
            json!([answer("decline", Value::Null), {"op": "call_tool", "name": "poll"}]),
        )
        .await;
        assert_eq!(
            report["results"][1]["structured"]["text"], "flow: answer decline",
            "{mode}: {report}"
        );

        // Declined, default `abort`: the call fails naming the step; greet never runs.
        let echoes = flow.calls_of("echo").len();
        let report = py_client(
            &gw.url(),
            mode,
            json!([answer("decline", Value::Null), {"op": "call_tool", "name": "greet", "arguments": {"greeting": "hi"}}]),
        )
        .await;
        let call = &report["results"][1];
        assert_eq!(call["isError"], true, "{mode}: {report}");
        let text = call["text"].as_str().unwrap();
        assert!(
            text.contains(r#"step "ask""#) && text.contains("decline"),
            "{mode}: {text}"
        );

        // A client without the elicitation capability is never asked: a decline.
        let report = py_client(
            &gw.url(),
            mode,
            json!([{"op": "call_tool", "name": "greet", "arguments": {"greeting": "hi"}}]),
        )
        .await;
        let call = &report["results"][0];
        assert_eq!(call["isError"], true, "{mode}: {report}");
        assert!(
            call["text"]
                .as_str()
                .unwrap()
                .contains("cannot answer elicitation"),
            "{mode}: {report}"
        );
        assert_eq!(flow.calls_of("echo").len(), echoes, "{mode}: greet ran");
    }
}

/// A raw 2026-07-28 `tools/call` of `greet` declaring elicitation.
async fn call_greet(url: &str, greeting: &str, retry: Option<(Value, &str)>) -> Value {
    let mut params = json!({
        "name": "greet",
        "arguments": {"greeting": greeting},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}},
    });
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        params["requestState"] = json!(state);
    }
    let reply = modern_as(url, None, "tools/call", params).await;
    reply.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_not_sealed_for_this_call_is_one_invalid_params() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(&flow, COMPOSITES)).await;
    let url = gw.url();
    let first = call_greet(&url, "hey", None).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["ask"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        result["inputRequests"]["ask"]["params"]["message"],
        "Who gets the hey?"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    // Sealed, not readable: the greeting appears nowhere in the decoded
    // bytes (the base64 text itself may spell "hey" by chance).
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&state)
        .expect("the state is base64url");
    assert!(
        !raw.windows(3).any(|w| w == b"hey"),
        "the state is sealed, not readable"
    );
    let accept = json!({"ask": {"action": "accept", "content": {"name": "Bo"}}});

    let mut tampered = state.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let mut errors = Vec::new();
    for (why, greeting, token) in [
        ("forged", "hey", "bm90IGEgc3RhdGU"),
        ("altered", "hey", tampered.as_str()),
        ("other arguments", "bye", state.as_str()),
    ] {
        let reply = call_greet(&url, greeting, Some((accept.clone(), token))).await;
        assert_eq!(reply["error"]["code"], -32602, "{why}: {reply}");
        errors.push(reply["error"].clone());
    }
    assert!(
        errors.windows(2).all(|w| w[0] == w[1]),
        "one body for all: {errors:?}"
    );
    assert_eq!(
        flow.calls_of("echo").len(),
        0,
        "no refused state ran a step"
    );

    // The genuine state still resumes the run (the refusals did not consume it).
    let done = call_greet(&url, "hey", Some((accept, &state))).await;
    assert_eq!(
        done["result"]["structuredContent"]["text"], "flow: hey Bo",
        "{done}"
    );
    assert_eq!(flow.calls_of("stamp").len(), 1);

    // A reload that changes the composite between rounds: the genuine state is
    // refused as stale, not resumed into a different graph.
    let paused = call_greet(&url, "hey", None).await;
    let state = paused["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let changed = COMPOSITES.replace("Who gets the", "Whom shall we give the");
    gw.vmcp.reload(flow_config(&flow, &changed)).await.unwrap();
    let again = json!({"ask": {"action": "accept", "content": {"name": "Cy"}}});
    let reply = call_greet(&url, "hey", Some((again, &state))).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed"),
        "{reply}"
    );
    assert_eq!(
        flow.calls_of("echo").len(),
        1,
        "the stale state ran no step"
    );
}
