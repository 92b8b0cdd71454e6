//! The optimizer end to end, with the Python SDK client on both revisions:
//! `tools/list` shows only `find_tool` and `call_tool`; a keyword search finds the
//! right tool among real server-everything tools (stemmed, names split at `-`,
//! `_` and camelCase); `call_tool` reaches backend and composite tools; under Cedar
//! the search shows only what the caller may call, `call_tool` of a forbidden tool
//! answers exactly as a nonexistent one and is audited under the real name; a tool
//! a backend adds later is found without a restart.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoList, DemoSpec, spawn};
use vmcp_tests::stacked::{modern_as, stacked_gateway};
use vmcp_tests::{EverythingMode, config, eventually, everything, gateway, py_client};

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

fn find(description: &str, keywords: &[&str]) -> Value {
    json!({"op": "call_tool", "name": "find_tool",
           "arguments": {"tool_description": description, "tool_keywords": keywords}})
}

fn call(arguments: Value) -> Value {
    json!({"op": "call_tool", "name": "call_tool", "arguments": arguments})
}

/// The names `find_tool` returned, best first.
fn found(result: &Value) -> Vec<String> {
    result["structured"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("find_tool result without tools: {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn listed(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn yaml(everything: &str, gh: &str, extra: &str) -> String {
    format!(
        r#"
name: eng
backends:
  - {{name: everything, url: '{everything}'}}
  - {{name: gh, url: '{gh}'}}
compositeTools:
  - name: shout_twice
    description: Shout a message loudly in upper case, twice
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    steps:
      - {{id: one, tool: gh_upper, arguments: {{text: "{{{{.params.text}}}}"}}}}
      - {{id: two, tool: gh_upper, dependsOn: [one], arguments: {{text: "{{{{.params.text}}}}"}}}}
optimizer:
  maxToolsToReturn: 3
{extra}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_and_call_on_both_revisions() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add", "upper"]), 0)
        .await
        .unwrap();
    let gw = gateway(config(&yaml(&ev.url, &gh.url(), ""))).await;
    for mode in MODES {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                find("compressing files", &["gzip"]),
                find("environment variables", &[]),
                find("the tiny image", &[]),
                find("shout loudly", &[]),
                call(json!({"tool_name": "everything_get-sum", "parameters": {"a": 2, "b": 40}})),
                // tool_name nested in parameters is tolerated.
                call(json!({"parameters": {"tool_name": "gh_add", "a": 1, "b": 2}})),
                call(json!({"tool_name": "shout_twice", "parameters": {"text": "hi"}})),
                call(json!({"tool_name": "gh_no_such_tool", "parameters": {}})),
                {"op": "call_tool", "name": "gh_no_such_tool", "arguments": {}},
                call(json!({"parameters": {"a": 1}})),
            ]),
        )
        .await;
        let r = &report["results"];
        assert_eq!(listed(&r[0]), ["call_tool", "find_tool"], "{mode}");
        // Stemming: "compressing files" matches "Compresses a single file".
        assert_eq!(
            found(&r[1])[0],
            "everything_gzip-file-as-resource",
            "{mode}: {}",
            r[1]
        );
        assert!(found(&r[1]).len() <= 3, "maxToolsToReturn");
        assert_eq!(found(&r[2])[0], "everything_get-env", "{mode}: {}", r[2]);
        assert_eq!(
            found(&r[3])[0],
            "everything_get-tiny-image",
            "{mode}: {}",
            r[3]
        );
        // Composite tools are in the index.
        assert_eq!(found(&r[4])[0], "shout_twice", "{mode}: {}", r[4]);
        let metrics = &r[1]["structured"]["token_metrics"];
        let (baseline, returned) = (
            metrics["baseline_tokens"].as_u64().unwrap(),
            metrics["returned_tokens"].as_u64().unwrap(),
        );
        assert!(returned > 0 && baseline > returned, "{metrics}");
        assert!(
            metrics["savings_percent"].as_f64().unwrap() > 50.0,
            "{metrics}"
        );
        assert!(
            r[1]["structured"]["tools"][0]["input_schema"]["properties"].is_object(),
            "{}",
            r[1]
        );

        assert!(
            r[5]["text"].as_str().unwrap().contains("42"),
            "{mode}: {}",
            r[5]
        );
        assert_eq!(r[6]["text"], "3", "{mode}: {}", r[6]);
        assert!(
            r[7]["text"].as_str().unwrap().contains("HI"),
            "{mode}: {}",
            r[7]
        );
        // call_tool of a nonexistent tool: what a direct call of it gets.
        assert_eq!(r[8], r[9], "{mode}");
        assert!(
            r[8]["error"].is_object() || r[8]["isError"] == true,
            "{}",
            r[8]
        );
        assert_eq!(r[10]["error"]["code"], -32602, "{mode}: {}", r[10]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_cedar_search_filters_and_forbidden_calls_look_nonexistent() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add", "upper"]), 0)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-optimizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let extra = format!(
        r#"incomingAuth:
  type: anonymous
  authz:
    type: cedar
    policies:
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");'
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"everything_get-sum");'
audit:
  logFile: '{}'
"#,
        log.display()
    );
    let gw = stacked_gateway(config(&yaml(&ev.url, &gh.url(), &extra))).await;
    for mode in MODES {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                find("add two numbers", &["sum"]),
                find("the tiny image", &[]),
                call(json!({"tool_name": "gh_add", "parameters": {"a": 1, "b": 2}})),
                call(json!({"tool_name": "gh_no_such_tool", "parameters": {"a": 1, "b": 2}})),
                {"op": "call_tool", "name": "gh_add", "arguments": {"a": 1, "b": 2}},
                call(json!({"tool_name": "gh_echo", "parameters": {"text": "hi"}})),
            ]),
        )
        .await;
        let r = &report["results"];
        assert_eq!(listed(&r[0]), ["call_tool", "find_tool"], "{mode}");
        // gh_add matches "add" too, but this caller may not call it.
        assert_eq!(found(&r[1]), ["everything_get-sum"], "{mode}: {}", r[1]);
        assert!(
            found(&r[2]).is_empty(),
            "a forbidden tool is not found: {}",
            r[2]
        );
        let metrics = &r[2]["structured"]["token_metrics"];
        assert_eq!(metrics["returned_tokens"], 0);
        assert!(metrics["baseline_tokens"].as_u64().unwrap() > 0);
        // Forbidden, nonexistent and the direct call of the forbidden tool: one answer.
        assert!(r[3]["error"].is_object(), "{mode}: {}", r[3]);
        assert_eq!(r[3], r[4], "{mode}: forbidden vs nonexistent");
        assert_eq!(r[3], r[5], "{mode}: call_tool vs direct call");
        assert_eq!(r[6]["text"], "gh: hi", "{mode}: {}", r[6]);
    }

    // The py_client runs have ended, so every line is written.
    let text = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "mcp_tool_call")
        .collect();
    let outcome = |name: &str| -> Vec<String> {
        calls
            .iter()
            .filter(|l| l["target"]["name"] == name)
            .map(|l| l["outcome"].as_str().unwrap().to_owned())
            .collect()
    };
    // Per mode: call_tool(gh_add) and the direct call, denied under the real name.
    assert_eq!(outcome("gh_add"), ["denied"; 4], "{text}");
    assert_eq!(outcome("gh_echo"), ["success"; 2], "{text}");
    assert!(outcome("call_tool").is_empty(), "{text}");
    assert_eq!(outcome("find_tool").len(), 4, "{text}");
    let echo = calls
        .iter()
        .find(|l| l["target"]["name"] == "gh_echo")
        .unwrap();
    assert_eq!(echo["target"]["backend"], "gh");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_backend_adds_is_found_without_restart() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add", "upper"]), 0)
        .await
        .unwrap();
    let gw = gateway(config(&yaml(&ev.url, &gh.url(), ""))).await;
    let search = json!([find("frobnicate the widget", &[])]);
    for mode in MODES {
        let before = py_client(&gw.url(), mode, search.clone()).await;
        assert!(found(&before["results"][0]).is_empty(), "{before}");
    }
    gh.control()
        .change(DemoList::Tools, |spec| spec.tools.push("frobnicate".into()))
        .await;
    let catalog = || gw.vmcp.aggregator().catalog();
    assert!(
        eventually(|| catalog().tool("gh_frobnicate").is_some()).await,
        "the gateway took the backend's list_changed"
    );
    for mode in MODES {
        let after = py_client(&gw.url(), mode, search.clone()).await;
        assert_eq!(
            found(&after["results"][0]),
            ["gh_frobnicate"],
            "{mode}: {after}"
        );
    }
}

/// The optimizer follows the live configuration, also behind a stack built once
/// (`Vmcp::stack`, never rebuilt): a reload turns it on (`call_tool` is rewritten
/// into the call it wraps) and off again, without a restart; a reload adding a
/// composite named like one of its tools is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_the_optimizer_on_and_off_behind_a_built_stack() {
    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let plain = format!("backends: [{{name: gh, url: '{}'}}]\n", gh.url());
    let vmcp = vmcp_service::Vmcp::start(config(&plain))
        .await
        .expect("gateway starts");
    let stack = vmcp
        .stack(
            Default::default(),
            vmcp_layers::headers::HeaderValidationLayer::new(),
        )
        .expect("stack builds");
    let (addr, _stop) = vmcp_tests::serve_on_loopback(stack.router()).await;
    let url = format!("http://{addr}/mcp");
    let names = |reply: &vmcp_tests::stacked::Reply| -> Vec<String> {
        reply.body["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {}", reply.raw))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = || modern_as(&url, None, "tools/list", json!({}));
    let wrapped = || {
        modern_as(
            &url,
            None,
            "tools/call",
            json!({"name": "call_tool",
                   "arguments": {"tool_name": "gh_echo", "parameters": {"text": "hi"}}}),
        )
    };
    assert_eq!(names(&list().await), ["gh_add", "gh_echo"]);

    let on = format!("{plain}optimizer: {{maxToolsToReturn: 3}}\n");
    vmcp.reload(config(&on)).await.expect("reload");
    assert_eq!(names(&list().await), ["call_tool", "find_tool"]);
    let reply = wrapped().await;
    assert_eq!(
        reply.body["result"]["content"][0]["text"], "gh: hi",
        "call_tool reaches gh_echo: {}",
        reply.raw
    );

    // A composite named find_tool while the optimizer is on: refused, nothing changes.
    // (valid without the optimizer, which is then added).
    let mut clash = config(&format!(
        "{plain}compositeTools:\n  - name: find_tool\n    description: d\n    steps: [{{id: a, tool: gh.echo}}]\n"
    ));
    clash.optimizer = config(&on).optimizer;
    let refused = vmcp.reload(clash).await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("name is the optimizer's own tool"),
    );
    assert_eq!(names(&list().await), ["call_tool", "find_tool"]);

    vmcp.reload(config(&plain)).await.expect("reload");
    assert_eq!(names(&list().await), ["gh_add", "gh_echo"]);
    let reply = wrapped().await;
    assert_eq!(reply.body["error"]["code"], -32602, "{}", reply.raw);
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call_tool"),
        "{}",
        reply.raw
    );
}
