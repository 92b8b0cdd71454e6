//! Each conflict-resolution strategy, seen by a real client over HTTP.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, RunningDemo, spawn};
use vmcp_service::{StartError, Vmcp};
use vmcp_tests::{config, gateway, names, py_backend, py_client};

async fn three_backends() -> (RunningDemo, RunningDemo, RunningDemo) {
    let a = spawn(
        DemoSpec {
            prompts: vec!["review".into()],
            ..DemoSpec::new("a", &["echo", "add", "only_a"])
        },
        0,
    )
    .await
    .unwrap();
    let b = spawn(
        DemoSpec {
            prompts: vec!["review".into()],
            ..DemoSpec::new("b", &["echo", "upper"])
        },
        0,
    )
    .await
    .unwrap();
    let c = spawn(
        DemoSpec {
            prompts: vec!["review".into()],
            ..DemoSpec::new("c", &["echo", "upper"])
        },
        0,
    )
    .await
    .unwrap();
    (a, b, c)
}

fn backends_yaml(a: &RunningDemo, b: &RunningDemo, c: &RunningDemo) -> String {
    format!(
        "backends:\n  - {{name: a, url: '{}'}}\n  - {{name: b, url: '{}'}}\n  - {{name: c, url: '{}'}}\n",
        a.url(),
        b.url(),
        c.url()
    )
}

async fn listed(url: &str) -> (Vec<String>, Vec<String>, serde_json::Value) {
    let report = py_client(
        url,
        "auto",
        json!([
            {"op": "list_tools"},
            {"op": "list_prompts"},
            {"op": "call_tool", "name": "echo", "arguments": {"text": "x"}},
            {"op": "call_tool", "name": "upper", "arguments": {"text": "x"}}
        ]),
    )
    .await;
    let r = report["results"].clone();
    (
        names(&r[0], "tools", "name"),
        names(&r[1], "prompts", "name"),
        r,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_is_the_default_and_applies_to_everything() {
    let (a, b, c) = three_backends().await;
    let gw = gateway(config(&backends_yaml(&a, &b, &c))).await;
    let (tools, prompts, _) = listed(&gw.url()).await;
    assert_eq!(
        tools,
        [
            "a_add", "a_echo", "a_only_a", "b_echo", "b_upper", "c_echo", "c_upper"
        ]
    );
    assert_eq!(prompts, ["a_review", "b_review", "c_review"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_prefix_format() {
    let (a, b, c) = three_backends().await;
    let yaml = backends_yaml(&a, &b, &c)
        + "aggregation:\n  conflictResolutionConfig: {prefixFormat: 'x-{workload}-'}\n";
    let gw = gateway(config(&yaml)).await;
    let (tools, prompts, _) = listed(&gw.url()).await;
    assert!(tools.contains(&"x-a-echo".to_owned()), "{tools:?}");
    assert!(prompts.contains(&"x-c-review".to_owned()), "{prompts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_listed_backends_win_and_unlisted_fall_back_to_prefix() {
    let (a, b, c) = three_backends().await;
    let yaml = backends_yaml(&a, &b, &c)
        + "aggregation:\n  conflictResolution: priority\n  conflictResolutionConfig: {priorityOrder: [b, a]}\n";
    let gw = gateway(config(&yaml)).await;
    let (tools, prompts, r) = listed(&gw.url()).await;
    // echo: b (rank 0) wins, a (listed, lower) dropped, c (unlisted) prefixed.
    // upper: b wins, c prefixed. add/only_a: no collision, bare.
    assert_eq!(
        tools,
        ["add", "c_echo", "c_upper", "echo", "only_a", "upper"]
    );
    // Prompts: listed keep bare names, b beats a; unlisted c stays prefixed.
    assert_eq!(prompts, ["c_review", "review"]);
    assert_eq!(r[2]["text"], "b: x", "the bare name routes to the winner");
    assert_eq!(r[3]["text"], "X");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_fails_startup_naming_every_collision() {
    let (a, b, c) = three_backends().await;
    let yaml = backends_yaml(&a, &b, &c)
        + "aggregation:\n  conflictResolution: manual\n  tools:\n    - workload: a\n      overrides: {echo: {name: a_echo}}\n";
    let err = Vmcp::start(config(&yaml)).await.unwrap_err();
    let StartError::UnresolvedCollisions(collisions) = &err else {
        panic!("expected unresolved collisions, got {err}");
    };
    assert_eq!(
        collisions,
        &[
            "tool \"echo\" is offered by b, c and no override renames it".to_owned(),
            "tool \"upper\" is offered by b, c and no override renames it".to_owned()
        ],
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_with_overrides_keeps_bare_names() {
    let (a, b, c) = three_backends().await;
    let yaml = backends_yaml(&a, &b, &c)
        + "aggregation:\n  conflictResolution: manual\n  tools:\n    - workload: a\n      overrides: {echo: {name: a_echo}}\n    - workload: b\n      overrides: {echo: {name: b_echo}, upper: {name: shout}}\n";
    let gw = gateway(config(&yaml)).await;
    let (tools, prompts, r) = listed(&gw.url()).await;
    assert_eq!(
        tools,
        [
            "a_echo", "add", "b_echo", "echo", "only_a", "shout", "upper"
        ]
    );
    assert_eq!(
        prompts,
        ["a_review", "b_review", "c_review"],
        "manual does not change prompts"
    );
    assert_eq!(r[2]["text"], "c: x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolution_is_deterministic_across_runs_and_backend_order() {
    let p1 = py_backend("one", &["--tool-prefix", "x_"]).await;
    let p2 = py_backend("one_x", &[]).await;
    // one + x_echo and one_x + echo compose to the same prefixed name: both dropped.
    let yaml = format!(
        "backends:\n  - {{name: one_x, url: '{}'}}\n  - {{name: one, url: '{}'}}\n",
        p2.url, p1.url
    );
    let first = gateway(config(&yaml)).await;
    let second = gateway(config(&yaml)).await;
    let tools = |gw: &vmcp_tests::Gateway| {
        gw.vmcp
            .aggregator()
            .catalog()
            .tools()
            .iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
    };
    let t1 = tools(&first);
    assert_eq!(t1, tools(&second));
    // Every tool of one (x_echo, x_add, x_whoami) composes to the same name as a tool
    // of one_x: all six claimants are dropped, and the rest of the group keeps serving.
    assert!(t1.is_empty(), "ambiguous names dropped: {t1:?}");
    let resources = first.vmcp.aggregator().catalog().resources().len();
    assert_eq!(
        resources, 3,
        "py://one/static, py://one_x/static, shared://readme"
    );
}
