//! Aggregation of all five capability kinds from three kinds of real backends,
//! seen by the Python SDK client in all three of its modes.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{EverythingMode, config, everything, gateway, names, py_backend, py_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kinds_from_python_everything_and_in_process_backends() {
    let py = py_backend("py", &[]).await;
    let py2 = py_backend("py2", &[]).await;
    let ev = everything(EverythingMode::StreamableHttp).await;
    let demo = spawn(
        DemoSpec {
            resources: vec!["demo://inproc/readme".into()],
            templates: vec!["demo://inproc/notes/{id}".into()],
            prompts: vec!["summarize".into()],
            ..DemoSpec::new("inproc", &["echo", "add"])
        },
        0,
    )
    .await
    .unwrap();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: py, url: '{}'}}\n  - {{name: py2, url: '{}'}}\n  - {{name: everything, url: '{}'}}\n  - {{name: inproc, url: '{}'}}\n",
        py.url,
        py2.url,
        ev.url,
        demo.url()
    )))
    .await;

    for mode in ["auto", "legacy", "2026-07-28"] {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                {"op": "list_resources"},
                {"op": "list_resource_templates"},
                {"op": "list_prompts"},
                {"op": "call_tool", "name": "py_echo", "arguments": {"text": "hi"}},
                {"op": "call_tool", "name": "everything_get-sum", "arguments": {"a": 2, "b": 3}},
                {"op": "call_tool", "name": "inproc_add", "arguments": {"a": 40, "b": 2}},
                {"op": "read_resource", "uri": "py://py2/items/7"},
                {"op": "read_resource", "uri": "shared://readme"},
                {"op": "read_resource", "uri": "demo://inproc/notes/9"},
                {"op": "get_prompt", "name": "py_greet", "arguments": {"name": "Ada"}},
                {"op": "get_prompt", "name": "everything_simple-prompt", "arguments": {}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "py_greet"}, "argument": {"name": "name", "value": "al"}},
                {"op": "complete", "ref": {"type": "ref/resource", "uri": "py://py/items/{id}"}, "argument": {"name": "id", "value": ""}}
            ]),
        )
        .await;
        let expected_protocol = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(report["protocol"], expected_protocol, "{mode}: {report}");
        let r = &report["results"];

        let tools = names(&r[0], "tools", "name");
        for tool in [
            "py_echo",
            "py_add",
            "py2_whoami",
            "everything_get-sum",
            "everything_echo",
            "inproc_echo",
            "inproc_add",
        ] {
            assert!(
                tools.contains(&tool.to_owned()),
                "{mode}: {tool} missing from {tools:?}"
            );
        }
        let resources = names(&r[1], "resources", "uri");
        assert_eq!(
            resources.iter().filter(|u| *u == "shared://readme").count(),
            1,
            "{mode}: a duplicate URI is advertised once"
        );
        for uri in ["py://py/static", "py://py2/static", "demo://inproc/readme"] {
            assert!(
                resources.contains(&uri.to_owned()),
                "{mode}: {uri} missing from {resources:?}"
            );
        }
        assert!(
            resources
                .iter()
                .any(|u| u.starts_with("demo://resource/static/document/")),
            "{mode}: everything's resources missing"
        );
        let templates = names(&r[2], "templates", "uriTemplate");
        for t in [
            "py://py/items/{id}",
            "py://py2/items/{id}",
            "demo://inproc/notes/{id}",
        ] {
            assert!(
                templates.contains(&t.to_owned()),
                "{mode}: {t} missing from {templates:?}"
            );
        }
        assert!(
            templates
                .iter()
                .any(|t| t.starts_with("demo://resource/dynamic/")),
            "{mode}: everything's templates missing"
        );
        let prompts = names(&r[3], "prompts", "name");
        for p in [
            "py_greet",
            "py2_greet",
            "everything_simple-prompt",
            "inproc_summarize",
        ] {
            assert!(
                prompts.contains(&p.to_owned()),
                "{mode}: {p} missing from {prompts:?}"
            );
        }

        assert_eq!(r[4]["text"], "py: hi", "{mode}");
        assert!(
            r[5]["text"].as_str().unwrap_or_default().contains('5'),
            "{mode}: {}",
            r[5]
        );
        assert_eq!(r[6]["text"], "42", "{mode}");
        assert_eq!(
            r[7]["text"], "item 7 from py2",
            "{mode}: template read routed by match"
        );
        assert_eq!(
            r[8]["text"], "readme from py",
            "{mode}: the earliest backend owns a duplicate URI"
        );
        assert_eq!(r[9]["text"], "demo://inproc/notes/9 from inproc", "{mode}");
        assert_eq!(
            r[10]["messages"][0], "Hello Ada from py",
            "{mode}: {}",
            r[10]
        );
        assert!(
            r[11]["messages"].as_array().is_some_and(|m| !m.is_empty()),
            "{mode}: {}",
            r[11]
        );
        assert_eq!(
            r[12]["values"],
            json!(["alice", "albert"]),
            "{mode}: {}",
            r[12]
        );
        assert_eq!(r[13]["values"], json!(["1", "2", "3"]), "{mode}: {}", r[13]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_pages_are_followed_to_the_end() {
    let tools: Vec<String> = (0..7).map(|i| format!("t{i}")).collect();
    let tool_refs: Vec<&str> = tools.iter().map(String::as_str).collect();
    let demo = spawn(
        DemoSpec {
            page_size: Some(2),
            ..DemoSpec::new("paged", &tool_refs)
        },
        0,
    )
    .await
    .unwrap();
    let py = py_backend("pypaged", &["--page-size", "1"]).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: paged, url: '{}'}}\n  - {{name: pypaged, url: '{}'}}\n",
        demo.url(),
        py.url
    )))
    .await;
    let catalog = gw.vmcp.aggregator().catalog();
    let listed: Vec<String> = catalog.tools().iter().map(|t| t.name.to_string()).collect();
    let expected: Vec<String> = tools.iter().map(|t| format!("paged_{t}")).collect();
    for name in &expected {
        assert!(listed.contains(name), "{name} missing: {listed:?}");
    }
    for name in ["pypaged_echo", "pypaged_add", "pypaged_whoami"] {
        assert!(
            listed.contains(&name.to_owned()),
            "{name} missing: {listed:?}"
        );
    }
    assert_eq!(
        catalog.resources().len(),
        2,
        "py backend's two resources over 1-item pages"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse_backend_behind_both_client_revisions() {
    use vmcp_layers::McpRevision;

    let ev = everything(EverythingMode::Sse).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: ev, url: '{}', transport: sse}}\n",
        ev.url
    )))
    .await;
    let backend = gw.vmcp.registry().get("ev").unwrap();
    assert_eq!(backend.revision(), Some(McpRevision::Legacy));
    for mode in ["legacy", "2026-07-28"] {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                {"op": "call_tool", "name": "ev_get-sum", "arguments": {"a": 20, "b": 22}},
                {"op": "list_prompts"},
                {"op": "read_resource", "uri": "demo://resource/static/document/architecture.md"}
            ]),
        )
        .await;
        let r = &report["results"];
        let tools = names(&r[0], "tools", "name");
        assert!(tools.contains(&"ev_echo".to_owned()), "{mode}: {tools:?}");
        assert!(
            r[1]["text"].as_str().unwrap_or_default().contains("42"),
            "{mode}: {}",
            r[1]
        );
        assert!(
            names(&r[2], "prompts", "name").contains(&"ev_simple-prompt".to_owned()),
            "{mode}"
        );
        assert!(
            r[3].get("error").is_none() && r[3]["text"].as_str().is_some_and(|t| !t.is_empty()),
            "{mode}: {}",
            r[3]
        );
    }
}
