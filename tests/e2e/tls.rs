//! TLS on every outbound connection, over real HTTPS on loopback with a certificate
//! authority generated at test time: backends (in-process rmcp and the Python SDK
//! behind uvicorn), the OIDC issuer's discovery and JWKS, and the OTLP collector.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use vmcp_examples::demo::{DemoBackend, DemoSpec};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{modern_as, stacked_gateway, tool_names};
use vmcp_tests::tls::{ServerCert, TestCa, ca_as_server_cert, serve_tls_on_loopback};
use vmcp_tests::{Gateway, config, gateway, modern, names, py_backend, py_client, status_json};

/// An in-process rmcp backend named `name` with one `echo` tool, over HTTPS.
async fn tls_backend(
    name: &str,
    cert: &ServerCert,
) -> (String, tokio_util::sync::CancellationToken) {
    let backend = DemoBackend::new(DemoSpec::new(name, &["echo"]));
    let service: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let (addr, stop) = serve_tls_on_loopback(router, cert).await;
    (format!("https://{addr}/mcp"), stop)
}

/// The `/status` entry of backend `name` once `check` holds for it (bounded ~20 s).
async fn backend_status(gw: &Gateway, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let (_, status) = status_json(gw, "/status").await;
        if let Some(entry) = status["backends"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["name"] == name))
        {
            if check(entry) {
                return status;
            }
            last = status.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("backend {name} never reached the expected state; last /status: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_behind_a_private_ca_is_refused_without_its_bundle_and_served_with_it() {
    let ca = TestCa::generate("vmcp test CA");
    let cert = ca.server_cert("backend");
    let (url, _stop) = tls_backend("secure", &cert).await;
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");

    let untrusting = gateway(config(&format!(
        "backends: [{{name: secure, url: '{url}'}}]\noperational:\n  failureHandling: {{healthCheckInterval: 200ms}}\n"
    )))
    .await;
    let status = backend_status(&untrusting, "secure", |b| {
        b["last_error"].as_str().is_some()
    })
    .await;
    let entry = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "secure")
        .unwrap();
    assert_eq!(
        entry["last_error"], "certificate not trusted: unknown issuer",
        "{status}"
    );
    assert_ne!(entry["health"], "healthy", "{status}");
    assert!(
        !status.to_string().contains(port),
        "no backend URL on /status: {status}"
    );
    let (_, listed) = modern(&untrusting.url(), "tools/list", json!({})).await;
    assert_eq!(
        names(&listed["result"], "tools", "name"),
        Vec::<String>::new()
    );

    let trusting = gateway(config(&format!(
        "backends: [{{name: secure, url: '{url}', caBundlePath: '{}'}}]\n",
        ca.ca_file().display()
    )))
    .await;
    let (_, listed) = modern(&trusting.url(), "tools/list", json!({})).await;
    assert_eq!(names(&listed["result"], "tools", "name"), ["secure_echo"]);
    let (code, called) = modern(
        &trusting.url(),
        "tools/call",
        json!({"name": "secure_echo", "arguments": {"text": "over tls"}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        called["result"]["content"][0]["text"], "secure: over tls",
        "{called}"
    );
    let status = backend_status(&trusting, "secure", |b| b["health"] == "healthy").await;
    assert!(!status.to_string().contains("certificate"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_certificate_served_as_the_servers_own_is_refused_in_words() {
    let cert = ca_as_server_cert("leaf-ca");
    let (url, _stop) = tls_backend("odd", &cert).await;
    let gw = gateway(config(&format!(
        "backends: [{{name: odd, url: '{url}', caBundlePath: '{}'}}]\noperational:\n  failureHandling: {{healthCheckInterval: 200ms}}\n",
        cert.cert_file.display()
    )))
    .await;
    let status = backend_status(&gw, "odd", |b| b["last_error"].as_str().is_some()).await;
    let entry = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "odd")
        .unwrap();
    assert_eq!(
        entry["last_error"],
        "certificate not trusted: the server presented a CA certificate as its own",
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_backend_behind_uvicorn_tls_is_served_with_its_bundle() {
    let ca = TestCa::generate("vmcp test CA");
    let cert = ca.server_cert("uvicorn");
    let py = py_backend(
        "pytls",
        &[
            "--ssl-certfile",
            cert.cert_file.to_str().unwrap(),
            "--ssl-keyfile",
            cert.key_file.to_str().unwrap(),
        ],
    )
    .await;
    assert!(py.url.starts_with("https://"), "{}", py.url);
    let gw = gateway(config(&format!(
        "backends: [{{name: pytls, url: '{}', caBundlePath: '{}'}}]\n",
        py.url,
        ca.ca_file().display()
    )))
    .await;
    for mode in ["legacy", "2026-07-28"] {
        let report = py_client(
            &gw.url(),
            mode,
            json!([{"op": "list_tools"}, {"op": "call_tool", "name": "pytls_echo", "arguments": {"text": "hi"}}]),
        )
        .await;
        assert!(
            names(&report["results"][0], "tools", "name").contains(&"pytls_echo".to_owned()),
            "{report}"
        );
        assert_eq!(
            report["results"][1]["text"], "pytls: hi",
            "{mode}: {report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issuer_and_jwks_are_fetched_over_https() {
    let ca = TestCa::generate("vmcp test CA");
    let cert = ca.server_cert("idp");
    let key = SigningKey::generate("k1");
    let idp = Idp::start_tls(&[&key], &cert).await;
    assert!(idp.issuer.starts_with("https://"));
    let backend_cert = ca.server_cert("backend");
    let (url, _stop) = tls_backend("gh", &backend_cert).await;
    let ca_file = ca.ca_file();
    let token = key.sign(&idp.claims("alice", json!({})));

    // Without the CA the issuer cannot be reached: the token cannot be checked.
    let untrusting = stacked_gateway(config(&format!(
        "backends: [{{name: gh, url: '{url}', caBundlePath: '{}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n",
        ca_file.display(),
        idp.issuer
    )))
    .await;
    let refused = modern_as(&untrusting.url(), Some(&token), "tools/list", json!({})).await;
    assert_ne!(refused.status, 200, "{:?}", refused.body);
    assert_eq!(idp.jwks_fetches(), 0, "no JWKS fetched without trust");

    let trusting = stacked_gateway(config(&format!(
        "backends: [{{name: gh, url: '{url}', caBundlePath: '{}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp, caBundlePath: '{}'}}\n",
        ca_file.display(),
        idp.issuer,
        ca_file.display()
    )))
    .await;
    let ok = modern_as(&trusting.url(), Some(&token), "tools/list", json!({})).await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    assert_eq!(tool_names(&ok), ["gh_echo"]);
    assert!(idp.jwks_fetches() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_over_https() {
    let ca = TestCa::generate("vmcp test CA");
    let cert = ca.server_cert("collector");
    let (exports, mut received) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let receiver = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let _ = exports.send(body);
            async { "" }
        }),
    );
    let (collector, _stop) = serve_tls_on_loopback(receiver, &cert).await;
    let gh = vmcp_examples::demo::spawn(DemoSpec::new("gh", &["echo"]), 0)
        .await
        .unwrap();
    let gw = stacked_gateway(config(&format!(
        "backends: [{{name: gh, url: '{}'}}]\ntelemetry: {{endpoint: 'https://{collector}', serviceName: vmcp-tls, tracingEnabled: true, caCertPath: '{}'}}\n",
        gh.url(),
        ca.ca_file().display()
    )))
    .await;
    let reply = modern_as(
        &gw.url(),
        None,
        "tools/call",
        json!({"name": "gh_echo", "arguments": {"text": "x"}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let telemetry = gw.stack.telemetry().expect("telemetry configured").clone();
    tokio::task::spawn_blocking(move || telemetry.force_flush())
        .await
        .unwrap();
    let mut spans = Vec::new();
    while let Ok(export) = received.try_recv() {
        let request = ExportTraceServiceRequest::decode(export).expect("OTLP protobuf");
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|s| s.name));
            }
        }
    }
    assert!(
        spans.iter().any(|s| s == "tools/call gh_echo"),
        "spans exported over https: {spans:?}"
    );
}

#[test]
fn ca_bundle_keys_are_checked_at_load_and_name_their_field() {
    let ca = TestCa::generate("vmcp test CA");
    let ca_file = ca.ca_file();
    let not_pem = ca_file.with_file_name("not-pem.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let yaml = format!(
        "backends:\n  - {{name: a, url: 'https://a.example/mcp', caBundlePath: 'relative/ca.pem'}}\n  - {{name: b, url: 'https://b.example/mcp', caBundlePath: '/nonexistent/ca.pem'}}\n  - {{name: c, url: 'https://c.example/mcp', caBundlePath: '{}'}}\n  - {{name: d, url: 'https://d.example/mcp', caBundlePath: '{}'}}\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: 'https://idp.example', audience: vmcp, caBundlePath: '{}'}}\ntelemetry: {{endpoint: 'https://otel.example', tracingEnabled: true, caCertPath: '/nonexistent/otel.pem'}}\n",
        not_pem.display(),
        ca_file.display(),
        not_pem.display()
    );
    let error = vmcp_service::config::load_str(&yaml)
        .unwrap_err()
        .to_string();
    for field in [
        "backends[0].caBundlePath",
        "backends[1].caBundlePath",
        "backends[2].caBundlePath",
        "incomingAuth.oidc.caBundlePath",
        "telemetry.caCertPath",
    ] {
        assert!(error.contains(field), "{field} missing in: {error}");
    }
    assert!(
        !error.contains("backends[3]"),
        "a good bundle passes: {error}"
    );
    assert!(error.contains("absolute"), "{error}");
}
