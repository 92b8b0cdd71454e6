//! Rate limiting (`rateLimiting`, docs/rate-limiting.md) against a real Python SDK
//! backend: per-user and shared budgets with two JWT subjects, the Modern refusal
//! byte for byte, per-tool budgets by real name (composite steps included), the
//! Legacy `isError` refusal through the Python SDK client, list and discover
//! budgets, and a backend's concurrency cap under 32 concurrent callers.

use serde_json::{Value, json};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{Reply, modern_as, stacked_gateway};
use vmcp_tests::{config, gateway, modern, py_backend, py_client, status_json};

/// The exact Modern refusal body, as the reference writes it.
fn refusal(retry: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":429,"message":"Rate limit exceeded","data":{{"retryAfterSeconds":{retry}}}}}}}"#
    )
}

/// `reply` is the Modern refusal at HTTP 200, with `Retry-After` and a `RateLimit`
/// header naming `bucket`; returns its retry-after.
fn assert_refused(reply: &Reply, bucket: &str) -> u64 {
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let retry = reply.body["error"]["data"]["retryAfterSeconds"]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer retryAfterSeconds: {}", reply.raw));
    assert_eq!(reply.raw, refusal(retry), "the refusal, byte for byte");
    assert_eq!(reply.headers["retry-after"], retry.to_string().as_str());
    assert_eq!(
        reply.headers["ratelimit"],
        format!("\"{bucket}\";r=0;t={retry}").as_str()
    );
    retry
}

fn assert_served(reply: &Reply) {
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert!(reply.body.get("result").is_some(), "{}", reply.raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_user_budgets_are_per_subject_and_the_shared_one_is_shared() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let py = py_backend("py", &[]).await;
    let dir = std::env::temp_dir().join(format!("vmcp-rate-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
audit: {{logFile: '{}'}}
telemetry: {{enablePrometheusMetricsPath: true}}
rateLimiting:
  perUser: {{maxTokens: 2, refillPeriod: 1h}}
  shared: {{maxTokens: 3, refillPeriod: 1h}}
"#,
        py.url,
        idp.issuer,
        log.display()
    )))
    .await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));
    let echo = |token: &str| {
        let (url, token) = (url.clone(), token.to_owned());
        async move {
            modern_as(
                &url,
                Some(&token),
                "tools/call",
                json!({"name": "py_echo", "arguments": {"text": "hi"}}),
            )
            .await
        }
    };
    assert_served(&echo(&alice).await);
    assert_served(&echo(&alice).await);
    // Alice's own budget (2 an hour) is spent: a token every 30 minutes.
    let retry = assert_refused(&echo(&alice).await, "perUser");
    assert!((1790..=1800).contains(&retry), "{retry}");
    // Bob's budget is his own; the shared one (3) has one token left.
    assert_served(&echo(&bob).await);
    let retry = assert_refused(&echo(&bob).await, "shared");
    assert!((1190..=1200).contains(&retry), "{retry}");
    // Lists are not metered by the tools/call budgets.
    let list = modern_as(&url, Some(&alice), "tools/list", json!({})).await;
    assert_served(&list);

    let metrics = reqwest::Client::new()
        .get(gw.at("/metrics"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"vmcp_rate_limit_decisions_total{tool="*",bucket="perUser",decision="limited"} 1"#,
        r#"vmcp_rate_limit_decisions_total{tool="*",bucket="shared",decision="limited"} 1"#,
        r#"vmcp_rate_limit_decisions_total{tool="*",bucket="shared",decision="allowed"} 3"#,
        r#"vmcp_rate_limit_decisions_total{tool="*",bucket="perUser",decision="allowed"} 3"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let audit = std::fs::read_to_string(&log).unwrap();
    let outcomes: Vec<(String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["target"]["method"] == "tools/call")
        .map(|r| {
            (
                r["subjects"]["user_id"].as_str().unwrap().to_owned(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("alice", "success"),
        ("alice", "success"),
        ("alice", "limited"),
        ("bob", "success"),
        ("bob", "limited"),
    ]
    .map(|(who, outcome)| (who.to_owned(), outcome.to_owned()));
    assert_eq!(outcomes, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_budget_counts_its_calls_through_composite_steps() {
    let py = py_backend("py", &[]).await;
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
compositeTools:
  - name: relay
    description: echo through py
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    steps:
      - id: first
        tool: py.echo
        arguments: {{text: "{{{{.params.text}}}}"}}
rateLimiting:
  tools: [{{name: py_echo, shared: {{maxTokens: 2, refillPeriod: 1h}}}}]
"#,
        py.url
    )))
    .await;
    let url = gw.url();
    let call = |name: &'static str| {
        let url = url.clone();
        async move {
            let args = if name == "py_add" {
                json!({"a": 1, "b": 2})
            } else {
                json!({"text": "hi"})
            };
            modern(&url, "tools/call", json!({"name": name, "arguments": args})).await
        }
    };
    // The composite's step is a call of py_echo: it takes one of py_echo's tokens.
    let (status, relayed) = call("relay").await;
    assert_eq!(status, 200);
    assert_eq!(relayed["result"]["isError"], false, "{relayed}");
    let (_, direct) = call("py_echo").await;
    assert!(direct.get("result").is_some(), "{direct}");
    let (status, refused) = call("py_echo").await;
    assert_eq!(status, 200);
    assert_eq!(refused["error"]["code"], 429, "{refused}");
    // Spent: the composite's step is refused too, and the composite fails with it.
    let (_, relayed) = call("relay").await;
    assert_eq!(relayed["result"]["isError"], true, "{relayed}");
    let text = relayed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Rate limit exceeded"), "{text}");
    // Another tool of the same backend has no budget.
    let (_, add) = call("py_add").await;
    assert!(add.get("result").is_some(), "{add}");
}

/// A composite call takes the global tokens once, however many steps it runs,
/// while each step takes its real tool's tokens: with a global budget of 2 and
/// `py_echo`'s of 3, two calls of a two-step composite are admitted (2 global
/// tokens, not 4), the second one's second step is refused by `py_echo`'s budget,
/// and the third call is refused by the global budget before any step runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_takes_the_global_tokens_once_and_each_step_its_tool_s() {
    let py = py_backend("py", &[]).await;
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
compositeTools:
  - name: twice
    description: echo twice through py
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    steps:
      - {{id: one, tool: py.echo, arguments: {{text: "{{{{.params.text}}}}"}}}}
      - {{id: two, tool: py.echo, dependsOn: [one], arguments: {{text: "{{{{.params.text}}}}"}}}}
rateLimiting:
  shared: {{maxTokens: 2, refillPeriod: 1h}}
  tools: [{{name: py_echo, shared: {{maxTokens: 3, refillPeriod: 1h}}}}]
"#,
        py.url
    )))
    .await;
    let url = gw.url();
    let twice = || {
        modern(
            &url,
            "tools/call",
            json!({"name": "twice", "arguments": {"text": "hi"}}),
        )
    };
    let (status, first) = twice().await;
    assert_eq!(status, 200);
    assert_eq!(first["result"]["isError"], false, "{first}");
    // Admitted (one global token left before it), but py_echo has one token for
    // its two steps.
    let (_, second) = twice().await;
    assert_eq!(second["result"]["isError"], true, "{second}");
    let text = second["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Rate limit exceeded"), "{text}");
    // The global budget is spent: refused before any step, as the reference does.
    let (status, third) = twice().await;
    assert_eq!(status, 200);
    assert_eq!(third["error"]["code"], 429, "{third}");
    assert!(
        third["error"]["data"]["retryAfterSeconds"].is_u64(),
        "{third}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_refusals_through_the_python_sdk_client() {
    let py = py_backend("py", &[]).await;
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
rateLimiting:
  tools: [{{name: py_echo, perUser: {{maxTokens: 1, refillPeriod: 1h}}}}]
  verbs: {{prompts: {{shared: {{maxTokens: 1, refillPeriod: 1h}}}}}}
"#,
        py.url
    )))
    .await;
    let echo = json!({"op": "call_tool", "name": "py_echo", "arguments": {"text": "hi"}});
    let greet = json!({"op": "get_prompt", "name": "py_greet", "arguments": {"name": "Ada"}});
    let report = py_client(&gw.url(), "legacy", json!([echo, echo, greet, greet])).await;
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["isError"], false, "{report}");
    // tools/call: an isError result carrying the code and data.
    assert_eq!(results[1]["isError"], true, "{report}");
    let structured = &results[1]["structured"];
    assert_eq!(structured["code"], 429, "{report}");
    assert_eq!(structured["message"], "Rate limit exceeded", "{report}");
    let retry = structured["data"]["retryAfterSeconds"].as_u64().unwrap();
    assert!((3590..=3600).contains(&retry), "{retry}");
    // Other verbs: the JSON-RPC error.
    assert!(results[2].get("error").is_none(), "{report}");
    assert_eq!(results[3]["error"]["code"], 429, "{report}");
    assert_eq!(
        results[3]["error"]["message"], "Rate limit exceeded",
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_discover_are_limited_when_configured() {
    let py = py_backend("py", &[]).await;
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
rateLimiting:
  verbs:
    lists: {{perUser: {{maxTokens: 2, refillPeriod: 1m}}}}
    discover: {{shared: {{maxTokens: 1, refillPeriod: 1m}}}}
"#,
        py.url
    )))
    .await;
    let url = gw.url();
    let (_, tools) = modern(&url, "tools/list", json!({})).await;
    assert!(tools.get("result").is_some(), "{tools}");
    let (_, prompts) = modern(&url, "prompts/list", json!({})).await;
    assert!(prompts.get("result").is_some(), "{prompts}");
    // The four list verbs share the `lists` budget.
    for method in ["resources/list", "tools/list"] {
        let (status, refused) = modern(&url, method, json!({})).await;
        assert_eq!(status, 200, "{method}");
        assert_eq!(refused["error"]["code"], 429, "{method}: {refused}");
        assert_eq!(
            refused["error"]["data"]["retryAfterSeconds"], 30,
            "{method}: {refused}"
        );
    }
    let (_, discover) = modern(&url, "server/discover", json!({})).await;
    assert!(discover.get("result").is_some(), "{discover}");
    let (status, refused) = modern(&url, "server/discover", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(refused["error"]["code"], 429, "{refused}");
    // Calls are not metered by the verb budgets.
    let (_, call) = modern(
        &url,
        "tools/call",
        json!({"name": "py_echo", "arguments": {"text": "hi"}}),
    )
    .await;
    assert!(call.get("result").is_some(), "{call}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_concurrency_cap_holds_under_32_concurrent_callers() {
    let py = py_backend("py", &["--busy-tools"]).await;
    let gw = gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{}'}}]
rateLimiting:
  backends: [{{name: py, maxConcurrent: 3}}]
"#,
        py.url
    )))
    .await;
    let url = gw.url();
    let client = reqwest::Client::new();
    let calls = (0..32).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            vmcp_tests::modern_with(
                &client,
                &url,
                "tools/call",
                json!({"name": "py_busy", "arguments": {"seconds": 0.1}}),
            )
            .await
        }
    });
    for (status, reply) in futures::future::join_all(calls).await {
        assert_eq!(status, 200);
        assert_eq!(reply["result"]["content"][0]["text"], "done", "{reply}");
    }
    let (_, max) = modern(
        &url,
        "tools/call",
        json!({"name": "py_busy_max", "arguments": {}}),
    )
    .await;
    // The backend itself saw at most 3 at once (and the cap was reached).
    assert_eq!(max["result"]["content"][0]["text"], "3", "{max}");
    let (_, status) = status_json(&gw, "/status").await;
    assert_eq!(
        status["rate_limiting"]["limits"]["backends"][0],
        json!({"name": "py", "maxConcurrent": 3})
    );
    assert_eq!(
        status["rate_limiting"]["in_flight"],
        json!([{"backend": "py", "in_flight": 0, "max_concurrent": 3}])
    );
}
