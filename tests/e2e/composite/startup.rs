//! What needs the backends' live tool lists: checked when the catalog is built. At
//! startup, backends that answered and contradict a composite stop the gateway; a
//! backend that has not answered is reported until it does; a reload only reports.

use serde_json::{Value, json};
use vmcp_service::catalog::CompositeProblem;
use vmcp_service::{StartError, Vmcp};
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{config, eventually, free_port, gateway};

use super::call_both;

/// A composite named like flow's advertised `flow_echo`, and one whose step names a
/// tool flow does not offer (beside one that is fine).
const CONTRADICTED: &str = r#"
  - name: flow_echo
    description: shadows the backend's flow_echo
    steps:
      - {id: s, tool: flow.stamp, arguments: {label: shadow}}
  - name: uses_echo
    description: the shadowed backend tool, by its own name
    steps:
      - {id: e, tool: flow.echo, arguments: {text: reached}}
  - name: broken
    description: a tool the backend does not offer
    steps:
      - {id: gone, tool: flow.nonexistent}
"#;

fn flow_yaml(url: &str, composites: &str) -> String {
    format!("backends: [{{name: flow, url: '{url}'}}]\ncompositeTools:\n{composites}")
}

async fn status(gw: &vmcp_tests::Gateway) -> Value {
    reqwest::get(format!("http://{}/status", gw.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_the_answering_backends_contradict_stops_startup() {
    let flow = FlowBackend::start().await;
    let err = Vmcp::start(config(&flow_yaml(&flow.url(), CONTRADICTED)))
        .await
        .unwrap_err();
    let StartError::CompositeTools(problems) = &err else {
        panic!("expected composite problems, got {err}");
    };
    assert_eq!(
        problems,
        &[
            CompositeProblem::NameTaken {
                composite: "flow_echo".into(),
                backend: "flow".into(),
                tool: "echo".into(),
            },
            CompositeProblem::MissingStepTool {
                composite: "broken".into(),
                step: "gone".into(),
                tool: "flow.nonexistent".into(),
                backend: Some("flow".into()),
            },
        ],
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains(
            "composite tool \"broken\" step \"gone\": tool \"flow.nonexistent\" is not in the catalog"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "composite tool \"flow_echo\" collides with tool \"echo\" of backend \"flow\""
        ),
        "{message}"
    );
}

/// A backend that has not answered at startup is not held against a composite: the
/// gateway starts, `/status` lists the step, and the step resolves once the backend
/// comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_has_not_answered_is_reported_until_it_comes_up() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let yaml = format!(
        "{}operational: {{failureHandling: {{healthCheckInterval: 100ms}}}}\n",
        flow_yaml(
            &url,
            "  - name: later\n    description: flow's echo, once flow is up\n    steps:\n      - {id: e, tool: flow.echo, arguments: {text: late}}\n"
        )
    );
    let gw = gateway(config(&yaml)).await;
    assert_eq!(
        status(&gw).await["missing_step_tools"],
        json!([
            "composite tool \"later\" step \"e\": tool \"flow.echo\" is not in the catalog; the step fails when it runs"
        ])
    );
    let _flow = FlowBackend::start_on(port).await;
    let aggregator = gw.vmcp.aggregator().clone();
    assert!(
        eventually(|| aggregator.missing_step_tools().is_empty()).await,
        "the step tool resolves once its backend answers: {:?}",
        aggregator.missing_step_tools()
    );
    for result in call_both(&gw.url(), "later", json!({})).await {
        assert_eq!(
            result["structuredContent"]["text"], "flow: late",
            "{result}"
        );
    }
}

/// A reload only reports what the live lists contradict: a composite named like a
/// backend tool keeps its name, yet a step naming that backend tool as
/// `<backend>.<tool>` still reaches it; a step tool the backend does not offer is
/// listed on `/status` and fails its step, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reports_contradicted_composites_and_shadowed_tools_stay_reachable() {
    let flow = FlowBackend::start().await;
    let gw = gateway(config(&flow_yaml(
        &flow.url(),
        "  - name: fine\n    description: nothing contradicts it\n    steps:\n      - {id: e, tool: flow.echo}\n",
    )))
    .await;
    gw.vmcp
        .reload(config(&flow_yaml(&flow.url(), CONTRADICTED)))
        .await
        .expect("a reload reports, it does not refuse");
    let status = status(&gw).await;
    assert_eq!(
        status["missing_step_tools"],
        json!([
            "composite tool \"broken\" step \"gone\": tool \"flow.nonexistent\" is not in the catalog; the step fails when it runs"
        ]),
        "{status}"
    );
    let unresolved = status["unresolved"].to_string();
    assert!(
        unresolved.contains("composite tool \\\"flow_echo\\\" collides with tool \\\"echo\\\""),
        "{status}"
    );
    for result in call_both(&gw.url(), "uses_echo", json!({})).await {
        assert_eq!(
            result["structuredContent"]["text"], "flow: reached",
            "{result}"
        );
    }
    for result in call_both(&gw.url(), "flow_echo", json!({})).await {
        assert_eq!(result["isError"], false, "{result}");
    }
    assert_eq!(flow.stamps().len(), 2, "the composite answered flow_echo");
    for result in call_both(&gw.url(), "broken", json!({})).await {
        assert_eq!(result["isError"], true, "{result}");
        assert!(
            super::text(&result)
                .contains("step \"gone\" failed: tool \"flow.nonexistent\" is not available"),
            "{result}"
        );
    }
}
