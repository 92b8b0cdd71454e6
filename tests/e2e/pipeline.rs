//! The outer layers end to end: recovery from a panic, Origin and Accept checks, the
//! body limit, and telemetry exported to a real OTLP/HTTP receiver (spans, W3C trace
//! context to the backend, Prometheus text).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::json;
use tower::Service;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_layers::ParsedMcpRequest;
use vmcp_layers::stack::StackBuilder;
use vmcp_service::CatalogProvider;
use vmcp_service::Vmcp;
use vmcp_tests::stacked::{modern_as, stacked_gateway};
use vmcp_tests::{config, serve_on_loopback};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_a_500_and_the_next_request_is_served() {
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let vmcp = Vmcp::start(config(&format!(
        "backends: [{{name: gh, url: '{}'}}]",
        gh.url()
    )))
    .await
    .unwrap();
    let service = vmcp.service();
    // An inner handler that panics on one tool name.
    let inner = tower::service_fn(move |req: Request<Full<Bytes>>| {
        let mut service = service.clone();
        async move {
            let boom = req
                .extensions()
                .get::<Arc<ParsedMcpRequest>>()
                .is_some_and(|p| p.name.as_deref() == Some("boom"));
            if boom {
                panic!("the handler fell over");
            }
            let response: Response<_> = service.call(req).await?;
            Ok::<_, Infallible>(response)
        }
    });
    let stack = StackBuilder::new()
        .provider(Arc::new(CatalogProvider(vmcp.aggregator().clone())))
        .build(inner);
    let (addr, stop) = serve_on_loopback(stack.router()).await;
    let url = format!("http://{addr}/mcp");

    let crashed = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "boom", "arguments": {}}),
    )
    .await;
    assert_eq!(crashed.status, 500);
    assert_eq!(
        crashed.body,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": "internal error"}})
    );
    let next = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "gh_echo", "arguments": {"text": "still here"}}),
    )
    .await;
    assert_eq!(next.status, 200);
    assert_eq!(next.body["result"]["content"][0]["text"], "gh: still here");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_accept_and_body_limit() {
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let gw = stacked_gateway(config(&format!(
        "backends: [{{name: gh, url: '{}'}}]",
        gh.url()
    )))
    .await;
    let client = reqwest::Client::new();
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{},
        "io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}});
    let post = |origin: Option<&str>| {
        let mut request = client
            .post(gw.url())
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .json(&list);
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        request.send()
    };
    let evil = post(Some("https://evil.example")).await.unwrap();
    assert_eq!(evil.status(), 403);
    let body: serde_json::Value = evil.json().await.unwrap();
    assert_eq!(body["error"]["message"], "Origin header is not allowed");
    assert_eq!(
        post(Some("http://localhost:6274")).await.unwrap().status(),
        200
    );
    assert_eq!(post(None).await.unwrap().status(), 200);

    let get = client.get(gw.url()).send().await.unwrap();
    assert_eq!(get.status(), 406, "GET without Accept: text/event-stream");

    // 9 MiB: refused from Content-Length, and when streamed without one. Raw HTTP:
    // the gateway answers 413 without reading the rest, and a client that insists on
    // writing everything first would see a broken pipe instead of the answer.
    let sized = raw_post(
        gw.addr,
        "Content-Length: 9437184\r\n",
        9 * 1024 * 1024,
        false,
    )
    .await;
    assert!(sized.starts_with("HTTP/1.1 413"), "{sized:.200}");
    let streamed = raw_post(
        gw.addr,
        "Transfer-Encoding: chunked\r\n",
        9 * 1024 * 1024,
        true,
    )
    .await;
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed:.200}");
    assert!(streamed.contains("request body too large"), "{streamed}");
}

/// POST `len` bytes of spaces to `/mcp` over a raw connection, writing in the
/// background (write errors ignored: the server may close early) while reading the
/// whole answer.
async fn raw_post(addr: std::net::SocketAddr, framing: &str, len: usize, chunked: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{framing}\r\n"
    );
    let writer = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 * 1024];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            if chunked {
                write.write_all(format!("{n:x}\r\n").as_bytes()).await?;
                write.write_all(&chunk[..n]).await?;
                write.write_all(b"\r\n").await?;
            } else {
                write.write_all(&chunk[..n]).await?;
            }
            left -= n;
        }
        if chunked {
            write.write_all(b"0\r\n\r\n").await?;
        }
        std::io::Result::Ok(write)
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the answer's body is complete or the server closes.
    loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), read.read(&mut buf))
            .await
            .expect("an answer within 10s")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if text.contains("\r\n\r\n") && text.contains("too large") {
            break;
        }
    }
    writer.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_with_trace_context_to_the_backend() {
    // The receiver: OTLP/HTTP protobuf at /v1/traces, each export forwarded here.
    let (exports, mut received) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let receiver = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let _ = exports.send(body);
            async { "" }
        }),
    );
    let (collector, stop_collector) = serve_on_loopback(receiver).await;

    let gh = spawn(DemoSpec::new("gh", &["echo", "traceparent"]), 0)
        .await
        .unwrap();
    let yaml = format!(
        "backends: [{{name: gh, url: '{}'}}]\naudit: {{enabled: false}}\ntelemetry: {{endpoint: 'http://{collector}', serviceName: vmcp-e2e, tracingEnabled: true, enablePrometheusMetricsPath: true}}\n",
        gh.url()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let response = reqwest::Client::new()
        .post(gw.url())
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "gh_traceparent")
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "name":"gh_traceparent","arguments":{},
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities":{},
                     "io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = vmcp_tests::parse_jsonrpc_body(&response.text().await.unwrap());
    let seen_by_backend = body["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();

    let telemetry = gw.stack.telemetry().expect("telemetry configured").clone();
    tokio::task::spawn_blocking(move || telemetry.force_flush())
        .await
        .unwrap();
    let mut spans = Vec::new();
    while let Ok(export) = received.try_recv() {
        let request = ExportTraceServiceRequest::decode(export).expect("OTLP protobuf");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.clone());
            assert!(format!("{service:?}").contains("vmcp-e2e"), "{service:?}");
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let server = spans
        .iter()
        .find(|s| s.name == "tools/call gh_traceparent")
        .unwrap_or_else(|| {
            panic!(
                "no request span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    let client = spans
        .iter()
        .find(|s| s.name == "tools/call gh")
        .expect("a backend-call span");
    assert_eq!(
        hex(&server.trace_id),
        trace_id,
        "the caller's trace continues"
    );
    assert_eq!(hex(&server.parent_span_id), caller_span);
    assert_eq!(hex(&client.trace_id), trace_id);
    assert_eq!(
        client.parent_span_id, server.span_id,
        "backend span is a child of the request span"
    );
    assert_eq!(
        seen_by_backend,
        format!("00-{trace_id}-{}-01", hex(&client.span_id)),
        "the backend got the backend span's traceparent in _meta"
    );

    let metrics = reqwest::get(gw.at("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("vmcp_backend_requests_total{backend=\"gh\",mcp_method=\"tools/call\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vmcp_requests_total{mcp_method=\"tools/call\"} 1"),
        "{metrics}"
    );
    stop_collector.cancel();
}

/// The whole stack as one tower `Layer`, in front of an ordinary rmcp server (not the
/// aggregator): `ServiceBuilder::new().layer(stack).service(server)`, served over
/// real HTTP to the Python SDK client, with the Cedar gate refusing a tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_as_a_tower_layer_in_front_of_a_plain_rmcp_server() {
    use rmcp::transport::StreamableHttpService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use tower::ServiceBuilder;
    use vmcp_examples::demo::DemoBackend;
    use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, sources};
    use vmcp_tests::py_client;

    let backend = DemoBackend::new(DemoSpec::new("plain", &["echo", "add"]));
    let server: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            Default::default(),
        );
    let policies = vec![
        r#"permit(principal, action == Action::"call_tool", resource == Tool::"echo");"#.to_owned(),
    ];
    let cedar =
        CedarAuthorizer::from_sources(&sources("p", &policies, &[]), CedarSettings::default())
            .unwrap();
    let stack = StackBuilder::new().authorizer(Arc::new(cedar)).into_layer();
    assert_eq!(
        stack.layers(),
        ["recovery", "headers", "auth", "parse", "authz", "gate"]
    );
    let service = ServiceBuilder::new().layer(stack.clone()).service(server);
    let app = axum::Router::new()
        .route_service("/mcp", service)
        .merge(stack.routes());
    let (addr, stop) = serve_on_loopback(app).await;
    let url = format!("http://{addr}/mcp");

    for mode in ["legacy", "2026-07-28"] {
        let report = py_client(
            &url,
            mode,
            json!([{"op": "call_tool", "name": "echo", "arguments": {"text": "hi"}}]),
        )
        .await;
        assert_eq!(
            report["results"][0]["text"], "plain: hi",
            "{mode}: {report}"
        );
    }
    let denied = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    )
    .await;
    assert_eq!(denied.status, 403, "{:?}", denied.body);
    assert_eq!(
        denied.body["error"]["message"],
        "call denied by authorization policy"
    );
    stop.cancel();
}
