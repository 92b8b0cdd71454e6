//! A composite run as telemetry and audit see it: per-composite metrics on the
//! Prometheus endpoint, one span per step (a child of the request's, parent of the
//! step's backend call) at a real OTLP receiver, and a step the caller cancelled
//! audited as `cancelled`.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::{Value, json};
use vmcp_tests::stacked::{LegacySession, modern_as, stacked_gateway};
use vmcp_tests::workflow::FlowBackend;
use vmcp_tests::{config, serve_on_loopback};

use super::result;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_metered_steps_are_spans_and_a_cancelled_step_is_audited() {
    let (exports, mut received) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let receiver = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let _ = exports.send(body);
            async { "" }
        }),
    );
    let (collector, stop_collector) = serve_on_loopback(receiver).await;
    let flow = FlowBackend::start().await;
    let dir = std::env::temp_dir().join(format!("vmcp-composite-observed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let yaml = format!(
        r#"
backends: [{{name: flow, url: '{}'}}]
audit: {{logFile: '{}'}}
telemetry: {{endpoint: 'http://{collector}', serviceName: vmcp-e2e, tracingEnabled: true, enablePrometheusMetricsPath: true}}
compositeTools:
  - name: pair
    description: two echoes
    steps:
      - {{id: one, tool: flow.echo, arguments: {{text: one}}}}
      - {{id: two, tool: flow.echo, dependsOn: [one], arguments: {{text: two}}}}
  - name: failing
    description: fails
    steps:
      - {{id: bad, tool: flow.fail}}
  - name: long
    description: a step that outlasts the caller's patience
    steps:
      - {{id: wait, tool: flow.slow, arguments: {{ms: 60000}}}}
"#,
        flow.url(),
        log.display()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let url = gw.url();
    for _ in 0..2 {
        let ok = modern_as(
            &url,
            None,
            "tools/call",
            json!({"name": "pair", "arguments": {}}),
        )
        .await;
        assert_eq!(result(&ok)["structuredContent"]["text"], "flow: two");
    }
    let failed = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "failing", "arguments": {}}),
    )
    .await;
    assert_eq!(result(&failed)["isError"], true);

    // Cancelled: a Legacy caller sends notifications/cancelled for a running call.
    let session = LegacySession::open(&url, None).await;
    let post = |body: Value| {
        reqwest::Client::new()
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", session.id())
            .json(&body)
            .send()
    };
    let call = tokio::spawn(post(
        json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "long", "arguments": {}}}),
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Cancel once the backend has the call: the step is in flight.
    while flow.calls_of("slow").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the step never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let cancelled = post(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 77, "reason": "changed my mind"}}),
    )
    .await
    .unwrap();
    assert_eq!(cancelled.status(), 202);
    let step_lines = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|l: &Value| l["type"] == "mcp_composite_step")
            .collect()
    };
    let line = loop {
        if let Some(line) = step_lines()
            .into_iter()
            .find(|l| l["workflow"]["composite"] == "long")
        {
            break line;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no line for the cancelled step"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(line["outcome"], "cancelled", "{line}");
    assert_eq!(line["workflow"]["step"], "wait", "{line}");
    assert_eq!(line["target"]["name"], "flow_slow", "{line}");
    call.abort();

    // Metrics per composite: executions, errors, duration.
    let metrics = reqwest::get(gw.at("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for expected in [
        "vmcp_workflow_executions_total{composite=\"pair\"} 2",
        "vmcp_workflow_executions_total{composite=\"failing\"} 1",
        "vmcp_workflow_errors_total{composite=\"failing\"} 1",
        "vmcp_workflow_errors_total{composite=\"long\"} 1",
        "vmcp_workflow_duration_seconds_count{composite=\"pair\"} 2",
    ] {
        assert!(metrics.contains(expected), "{expected} in {metrics}");
    }
    assert!(
        !metrics.contains("vmcp_workflow_errors_total{composite=\"pair\"}"),
        "{metrics}"
    );

    // Spans: request -> one span per step -> the step's backend call.
    let telemetry = gw.stack.telemetry().expect("telemetry configured").clone();
    tokio::task::spawn_blocking(move || telemetry.force_flush())
        .await
        .unwrap();
    let mut spans = Vec::new();
    while let Ok(export) = received.try_recv() {
        let request = ExportTraceServiceRequest::decode(export).expect("OTLP protobuf");
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let requests: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "tools/call pair")
        .collect();
    assert_eq!(requests.len(), 2, "{names:?}");
    for step in ["one", "two"] {
        let step_spans: Vec<_> = spans
            .iter()
            .filter(|s| s.name == format!("composite step pair.{step}"))
            .collect();
        assert_eq!(step_spans.len(), 2, "one span per step and run: {names:?}");
        for span in step_spans {
            assert!(
                requests
                    .iter()
                    .any(|r| r.span_id == span.parent_span_id && r.trace_id == span.trace_id),
                "the step span is a child of its request's span"
            );
            let calls: Vec<_> = spans
                .iter()
                .filter(|s| s.name == "tools/call flow" && s.parent_span_id == span.span_id)
                .collect();
            assert_eq!(
                calls.len(),
                1,
                "the step's backend call is its child: {names:?}"
            );
        }
    }
    stop_collector.cancel();
}
