//! Composite tools end to end: workflows over real HTTP on both client revisions,
//! against the Python SDK backend, server-everything and an in-process rmcp
//! backend that records what it was asked (`vmcp_tests::workflow`).

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_tests::stacked::{LegacySession, Reply, modern_as, stacked_gateway, tool_names};
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{EverythingMode, config, everything, gateway, py_backend, py_client};

mod elicitation;
mod guarded;
mod observed;
mod startup;

/// `tools/call` of `name` on both revisions (Modern stateless, then a Legacy session).
async fn call_both(url: &str, name: &str, arguments: Value) -> [Value; 2] {
    let modern = modern_as(
        url,
        None,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    let mut session = LegacySession::open(url, None).await;
    let legacy = session
        .request("tools/call", json!({"name": name, "arguments": arguments}))
        .await;
    [result(&modern), result(&legacy)]
}

fn result(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body["result"].clone()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn flow_config(flow: &FlowBackend, composites: &str) -> vmcp_service::VmcpConfig {
    config(&format!(
        "backends: [{{name: flow, url: '{}'}}]\ncompositeTools:\n{composites}",
        flow.url()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_workflow_across_python_everything_and_in_process_backends() {
    let py = py_backend("py", &[]).await;
    let ev = everything(EverythingMode::StreamableHttp).await;
    let flow = FlowBackend::start().await;
    let gw = gateway(config(&format!(
        r#"
backends:
  - {{name: py, url: '{}'}}
  - {{name: everything, url: '{}'}}
  - {{name: flow, url: '{}'}}
compositeTools:
  - name: relay
    description: py, then everything, then flow
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    steps:
      - id: first
        tool: py.echo
        arguments: {{text: "{{{{.params.text}}}}"}}
      - id: second
        tool: everything_echo
        dependsOn: [first]
        arguments: {{message: "{{{{ steps.first.content.text }}}}"}}
      - id: third
        tool: flow.echo
        dependsOn: [second]
        arguments: {{text: "{{{{ steps.second.content.text }}}}"}}
"#,
        py.url,
        ev.url,
        flow.url()
    )))
    .await;
    for result in call_both(&gw.url(), "relay", json!({"text": "hi"})).await {
        assert_eq!(
            result["structuredContent"]["text"], "flow: Echo: py: hi",
            "{result}"
        );
    }
    // The Python SDK client sees an ordinary tool, listed and callable.
    let report = py_client(
        &gw.url(),
        "auto",
        json!([{"op": "list_tools"}, {"op": "call_tool", "name": "relay", "arguments": {"text": "yo"}}]),
    )
    .await;
    let listed: Vec<&str> = report["results"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(listed.contains(&"relay"), "{listed:?}");
    assert_eq!(
        report["results"][1]["structured"]["text"], "flow: Echo: py: yo",
        "{report}"
    );
    assert_eq!(flow.calls_of("echo").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_fan_in_runs_the_branches_concurrently() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(
        &flow,
        r#"
  - name: fan_in
    description: three branches, then a join
    steps:
      - {id: a, tool: flow.stamp, arguments: {label: "a-{{ params.run }}"}}
      - {id: b, tool: flow.stamp, arguments: {label: "b-{{ params.run }}"}}
      - {id: c, tool: flow.stamp, arguments: {label: "c-{{ params.run }}"}}
      - id: join
        tool: flow.echo
        dependsOn: [a, b, c]
        arguments: {text: "{{ steps.a.output.label }}+{{ steps.b.output.label }}+{{ steps.c.output.label }}"}
"#,
    ))
    .await;
    for (revision, run) in [("modern", "m"), ("legacy", "l")] {
        flow.expect_together(3);
        let arguments = json!({"run": run});
        let result = if revision == "modern" {
            result(
                &modern_as(
                    &gw.url(),
                    None,
                    "tools/call",
                    json!({"name": "fan_in", "arguments": arguments}),
                )
                .await,
            )
        } else {
            let mut session = LegacySession::open(&gw.url(), None).await;
            result(
                &session
                    .request(
                        "tools/call",
                        json!({"name": "fan_in", "arguments": arguments}),
                    )
                    .await,
            )
        };
        assert_eq!(
            result["structuredContent"]["text"],
            format!("flow: a-{run}+b-{run}+c-{run}"),
            "{result}"
        );
        let stamps: Vec<_> = flow
            .stamps()
            .into_iter()
            .filter(|s| s.label.ends_with(&format!("-{run}")))
            .collect();
        assert_eq!(stamps.len(), 3, "{revision}");
        // All three were inside the backend at once: the last start precedes the
        // first end. Run one after another, each would have waited out its 10 s
        // rendezvous alone and ended before the next started.
        let last_start = stamps.iter().map(|s| s.start).max().unwrap();
        let first_end = stamps.iter().map(|s| s.end).min().unwrap();
        assert!(
            last_start <= first_end,
            "{revision}: not concurrent: {stamps:?}"
        );
        assert!(
            first_end - last_start < Duration::from_secs(9),
            "{revision}: {stamps:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_each_condition_continue_retry_and_abort() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(
        &flow,
        r#"
  - name: each
    description: echo every item of a list
    steps:
      - {id: items, tool: flow.list, arguments: {n: "{{ params.n }}"}}
      - id: loop
        type: forEach
        dependsOn: [items]
        collection: "{{json .steps.items.output.items}}"
        itemVar: it
        maxParallel: 2
        step: {id: one, tool: flow.echo, arguments: {text: "{{ forEach.index }}={{ forEach.it }}"}}
    output:
      properties:
        count: {type: integer, value: "{{ steps.loop.output.count }}"}
        texts: {type: array, value: "{{ steps.loop.output.iterations | map(attribute='output') | map(attribute='text') | list | json }}"}
  - name: skip
    description: a condition skips a step; its defaultResults stand in
    steps:
      - id: maybe
        tool: flow.echo
        condition: "{{ params.go }}"
        arguments: {text: real}
        defaultResults: {text: stand-in}
      - {id: after, tool: flow.echo, dependsOn: [maybe], arguments: {text: "got {{ steps.maybe.output.text }}"}}
  - name: resilient
    description: retry a flaky tool, continue past a failing one
    steps:
      - id: flaky
        tool: flow.flaky
        arguments: {key: "{{ params.key }}"}
        onError: {action: retry, retryCount: 3, retryDelay: 10ms}
      - id: broken
        tool: flow.fail
        onError: {action: continue}
        defaultResults: {text: fallback}
      - {id: end, tool: flow.echo, dependsOn: [flaky, broken], arguments: {text: "{{ steps.flaky.output.attempt }} {{ steps.broken.output.text }} {{ steps.broken.status }}"}}
  - name: fragile
    description: the default onError aborts
    steps:
      - {id: broken, tool: flow.fail}
      - {id: never, tool: flow.echo, dependsOn: [broken], arguments: {text: never}}
"#,
    ))
    .await;
    let url = gw.url();
    for result in call_both(&url, "each", json!({"n": 3})).await {
        assert_eq!(
            result["structuredContent"],
            json!({"count": 3, "texts": ["flow: 0=i0", "flow: 1=i1", "flow: 2=i2"]}),
            "{result}"
        );
    }
    for (go, expected) in [
        (false, "flow: got stand-in"),
        (true, "flow: got flow: real"),
    ] {
        for result in call_both(&url, "skip", json!({"go": go})).await {
            assert_eq!(result["structuredContent"]["text"], expected, "{result}");
        }
    }
    assert_eq!(
        flow.calls_of("echo")
            .iter()
            .filter(|c| c.arguments["text"] == "real")
            .count(),
        2
    );

    let [modern, legacy] = [
        result(
            &modern_as(
                &url,
                None,
                "tools/call",
                json!({"name": "resilient", "arguments": {"key": "m"}}),
            )
            .await,
        ),
        {
            let mut s = LegacySession::open(&url, None).await;
            result(
                &s.request(
                    "tools/call",
                    json!({"name": "resilient", "arguments": {"key": "l"}}),
                )
                .await,
            )
        },
    ];
    for result in [modern, legacy] {
        assert_eq!(
            result["structuredContent"]["text"], "flow: 3 fallback failed",
            "{result}"
        );
    }
    for key in ["m", "l"] {
        let calls = flow
            .calls_of("flaky")
            .into_iter()
            .filter(|c| c.arguments["key"] == key)
            .count();
        assert_eq!(
            calls, 3,
            "failed twice, then succeeded: exactly three calls ({key})"
        );
    }

    for result in call_both(&url, "fragile", json!({})).await {
        assert_eq!(result["isError"], true, "{result}");
        assert!(
            text(&result).contains(r#"step "broken" failed"#),
            "{result}"
        );
    }
    assert!(
        flow.calls_of("echo")
            .iter()
            .all(|c| c.arguments["text"] != "never")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_coercion_and_structured_output() {
    let flow = FlowBackend::start().await;
    let gw = gateway(flow_config(
        &flow,
        r#"
  - name: step_timeout
    description: one slow step
    steps:
      - {id: slow, tool: flow.slow, timeout: 200ms, arguments: {ms: 5000}}
  - name: workflow_timeout
    description: the whole workflow is bounded
    timeout: 300ms
    steps:
      - {id: slow, tool: flow.slow, arguments: {ms: 5000}}
  - name: coerce
    description: template strings become the tool's types, nested too
    parameters: {type: object, properties: {n: {type: integer}, r: {type: string}}}
    steps:
      - id: typed
        tool: flow.typed
        arguments:
          count: "{{ params.n }}"
          flag: "{{ params.n > 2 }}"
          nested: {ratio: "{{ params.r }}", ids: ["1", "{{ params.n }}"]}
    output:
      properties:
        count: {type: integer, description: the count, value: "{{ steps.typed.output.count }}"}
        flag: {type: boolean, value: "{{ steps.typed.output.flag }}"}
        missing: {type: string, value: "{{ steps.typed.output.nope }}", default: none}
        summary:
          type: object
          properties:
            ids: {type: array, value: "{{ steps.typed.output.nested.ids | json }}"}
      required: [count]
"#,
    ))
    .await;
    let url = gw.url();
    for result in call_both(&url, "step_timeout", json!({})).await {
        assert_eq!(result["isError"], true);
        assert!(
            text(&result).contains("did not finish within 200ms"),
            "{result}"
        );
    }
    for result in call_both(&url, "workflow_timeout", json!({})).await {
        assert_eq!(result["isError"], true);
        assert!(
            text(&result).contains("workflow did not finish within 300ms"),
            "{result}"
        );
    }
    for result in call_both(&url, "coerce", json!({"n": 3, "r": "0.5"})).await {
        assert_eq!(
            result["structuredContent"],
            json!({"count": 3, "flag": true, "missing": "none", "summary": {"ids": [1, 3]}}),
            "{result}"
        );
    }
    let typed = flow.calls_of("typed");
    assert_eq!(
        typed[0].arguments,
        json!({"count": 3, "flag": true, "nested": {"ratio": 0.5, "ids": [1, 3]}})
    );
    // A value that cannot be coerced fails the step, naming the argument; the
    // backend never sees it.
    for result in call_both(&url, "coerce", json!({"n": 3, "r": "half"})).await {
        assert_eq!(result["isError"], true);
        assert!(text(&result).contains("argument nested.ratio"), "{result}");
    }
    assert_eq!(flow.calls_of("typed").len(), 2);
    // The output schema is advertised.
    let list = modern_as(&url, None, "tools/list", json!({})).await;
    let tool = list.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "coerce")
        .cloned()
        .unwrap();
    assert_eq!(
        tool["outputSchema"]["properties"]["count"],
        json!({"type": "integer", "description": "the count"})
    );
    assert_eq!(tool["outputSchema"]["required"], json!(["count"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_steps_are_denied_and_every_step_is_audited() {
    use vmcp_tests::idp::{Idp, SigningKey};
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let flow = FlowBackend::start().await;
    let dir = std::env::temp_dir().join(format!("vmcp-composite-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let yaml = format!(
        r#"
name: eng
backends: [{{name: flow, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
  authz:
    type: cedar
    policies:
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"allowed");'
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"sneaky");'
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"flow_echo");'
audit:
  logFile: '{}'
compositeTools:
  - name: allowed
    description: two permitted steps
    steps:
      - {{id: one, tool: flow_echo, arguments: {{text: one}}}}
      - {{id: two, tool: flow.echo, dependsOn: [one], arguments: {{text: two}}}}
  - name: sneaky
    description: reaches a tool the caller may not call
    steps:
      - {{id: fine, tool: flow_echo, arguments: {{text: fine}}}}
      - {{id: hidden, tool: flow.slow, dependsOn: [fine], arguments: {{ms: 1}}}}
"#,
        flow.url(),
        idp.issuer,
        log.display()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let url = gw.url();
    let token = key.sign(&idp.claims("alice", json!({})));
    const DENIED: &str = r#"{"jsonrpc":"2.0","id":1,"error":{"code":403,"message":"call denied by authorization policy"}}"#;
    let denied: Value = serde_json::from_str(DENIED).unwrap();

    // Listed: both composites (they are permitted as themselves) and flow_echo.
    let list = modern_as(&url, Some(&token), "tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["allowed", "flow_echo", "sneaky"]);
    // The same answer as calling the forbidden tool directly, on both revisions.
    let direct = modern_as(
        &url,
        Some(&token),
        "tools/call",
        json!({"name": "flow_slow", "arguments": {"ms": 1}}),
    )
    .await;
    assert_eq!((direct.status, &direct.body), (403, &denied));
    let through = modern_as(
        &url,
        Some(&token),
        "tools/call",
        json!({"name": "sneaky", "arguments": {}}),
    )
    .await;
    assert_eq!((through.status, &through.body), (403, &denied));
    let mut session = LegacySession::open(&url, Some(&token)).await;
    let mut legacy = session
        .request("tools/call", json!({"name": "sneaky", "arguments": {}}))
        .await;
    legacy.body["id"] = json!(1);
    assert_eq!((legacy.status, &legacy.body), (403, &denied));
    assert!(
        flow.calls_of("slow").is_empty(),
        "the backend never saw the forbidden step"
    );
    assert!(
        flow.calls_of("echo")
            .iter()
            .all(|c| c.arguments["text"] != "fine"),
        "no step of a denied composite ran"
    );

    let ok = modern_as(
        &url,
        Some(&token),
        "tools/call",
        json!({"name": "allowed", "arguments": {}}),
    )
    .await;
    assert_eq!(result(&ok)["structuredContent"]["text"], "flow: two");
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["type"] == "mcp_composite_step")
        .collect();
    assert_eq!(lines.len(), 2, "one line per step: {lines:?}");
    for (line, step) in lines.iter().zip(["one", "two"]) {
        assert_eq!(line["workflow"]["composite"], "allowed");
        assert_eq!(line["workflow"]["step"], step);
        assert_eq!(line["target"]["name"], "flow_echo");
        assert_eq!(line["target"]["backend"], "flow");
        assert_eq!(line["outcome"], "success");
        assert_eq!(line["subjects"]["user_id"], "alice");
        assert!(line["metadata"]["duration_ms"].as_f64().is_some());
    }
    assert_eq!(lines[0]["workflow"]["id"], lines[1]["workflow"]["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_sessions_all_list_the_composite() {
    let flow = FlowBackend::start().await;
    let mut config = flow_config(
        &flow,
        "  - {name: wf, description: d, steps: [{id: s, tool: flow.echo, arguments: {text: x}}]}\n",
    );
    // 200 anonymous sessions from one address: over the per-address cap (100), the
    // caller's own idle sessions would make room for its newer ones.
    config.operational.sessions.max_per_address = Some(200);
    let gw = gateway(config).await;
    let url = gw.url();
    let lists = futures::future::join_all((0..200).map(|_| {
        let url = url.clone();
        async move {
            let mut session = LegacySession::open(&url, None).await;
            tool_names(&session.request("tools/list", json!({})).await)
        }
    }))
    .await;
    assert_eq!(lists.len(), 200);
    for names in lists {
        assert!(names.contains(&"wf".to_owned()), "{names:?}");
    }
}
