//! Filtering, overrides, and hidden-but-routable tools.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{config, gateway, names, py_backend, py_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_overrides_and_visibility() {
    let py = py_backend("gh", &[]).await;
    let jira = spawn(DemoSpec::new("jira", &["get_issue", "add_comment"]), 0)
        .await
        .unwrap();
    let docs = spawn(DemoSpec::new("docs", &["search"]), 0).await.unwrap();
    let yaml = format!(
        r#"
backends:
  - {{name: gh, url: '{}'}}
  - {{name: jira, url: '{}'}}
  - {{name: docs, url: '{}'}}
aggregation:
  tools:
    - workload: gh
      filter: [echo, sum]
      overrides:
        add:
          name: sum
          description: Adds two integers (overridden)
          annotations: {{readOnlyHint: true, title: Sum}}
    - workload: jira
      excludeAll: true
"#,
        py.url,
        jira.url(),
        docs.url()
    );
    let gw = gateway(config(&yaml)).await;
    let report = py_client(
        &gw.url(),
        "2026-07-28",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "gh_sum", "arguments": {"a": 1, "b": 2}},
            {"op": "call_tool", "name": "gh_whoami", "arguments": {}},
            {"op": "call_tool", "name": "jira_get_issue", "arguments": {}},
            {"op": "call_tool", "name": "gh_add", "arguments": {"a": 1, "b": 2}}
        ]),
    )
    .await;
    let r = &report["results"];
    assert_eq!(
        names(&r[0], "tools", "name"),
        ["docs_search", "gh_echo", "gh_sum"]
    );
    let sum = r[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "gh_sum")
        .unwrap();
    assert_eq!(sum["description"], "Adds two integers (overridden)");
    assert_eq!(sum["annotations"]["readOnlyHint"], true);
    assert_eq!(sum["annotations"]["title"], "Sum");
    assert_eq!(
        r[1]["text"], "3",
        "the override routes to the backend's own name"
    );
    // Hidden tools and the pre-override name are not callable, and look like unknown tools.
    for i in [2, 3, 4] {
        assert_eq!(r[i]["error"]["code"], -32602, "{}", r[i]);
    }
    // ...but stay in the routing table for internal callers (composite tools).
    let catalog = gw.vmcp.aggregator().catalog();
    let hidden = catalog
        .tool_any("jira_get_issue")
        .expect("hidden tool is routable");
    assert_eq!(
        (&*hidden.route.backend, hidden.route.name.as_str()),
        ("jira", "get_issue")
    );
    assert!(!hidden.advertised);
    assert!(catalog.tool_any("gh_whoami").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_deny_and_exclude_all_tools() {
    let a = spawn(
        DemoSpec {
            prompts: vec!["p".into()],
            ..DemoSpec::new("a", &["x"])
        },
        0,
    )
    .await
    .unwrap();
    let b = spawn(
        DemoSpec {
            prompts: vec!["p".into()],
            ..DemoSpec::new("b", &["y"])
        },
        0,
    )
    .await
    .unwrap();
    let base = format!(
        "backends:\n  - {{name: a, url: '{}'}}\n  - {{name: b, url: '{}'}}\n",
        a.url(),
        b.url()
    );
    let deny = gateway(config(
        &(base.clone() + "aggregation:\n  defaultToolVisibility: deny\n  tools: [{workload: a}]\n"),
    ))
    .await;
    let report = py_client(
        &deny.url(),
        "legacy",
        json!([{"op": "list_tools"}, {"op": "list_prompts"}]),
    )
    .await;
    assert_eq!(names(&report["results"][0], "tools", "name"), ["a_x"]);
    assert_eq!(
        names(&report["results"][1], "prompts", "name"),
        ["a_p", "b_p"],
        "visibility settings gate tools only"
    );
    let none = gateway(config(&(base + "aggregation:\n  excludeAllTools: true\n"))).await;
    let report = py_client(
        &none.url(),
        "auto",
        json!([{"op": "list_tools"}, {"op": "call_tool", "name": "a_x", "arguments": {}}]),
    )
    .await;
    assert_eq!(
        names(&report["results"][0], "tools", "name"),
        Vec::<String>::new()
    );
    assert_eq!(report["results"][1]["error"]["code"], -32602);
    assert!(none.vmcp.aggregator().catalog().tool_any("b_y").is_some());
}
