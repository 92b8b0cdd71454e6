//! Whose failure it is: a backend's health says whether the *backend* works, so what
//! callers bring on themselves (a slow tool's timeouts, a token exchange the IdP
//! refuses) never takes it out of the catalog for everyone, and a backend taken out
//! by failed calls comes back at its next good check, without a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_service::backend::{CircuitState, HealthStatus};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::oidc::OidcProvider;
use vmcp_tests::stacked::{StackedGateway, modern_as, stacked_gateway};
use vmcp_tests::tls::TestCa;
use vmcp_tests::{config, modern, names, py_backend};

/// The health of backend `name` as `/status` reports it.
fn health(gw: &StackedGateway, name: &str) -> vmcp_service::backend::HealthSnapshot {
    gw.vmcp
        .registry()
        .get(name)
        .expect("the backend is configured")
        .health()
        .snapshot()
}

/// The tool names `token`'s caller is offered.
async fn tools_of(gw: &StackedGateway, token: &str) -> Vec<String> {
    let reply = modern_as(&gw.url(), Some(token), "tools/list", json!({})).await;
    names(&reply.body["result"], "tools", "name")
}

/// Poll `check` until it holds or `within` passes.
async fn within<F: Future<Output = bool>>(within: Duration, mut check: impl FnMut() -> F) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Three callers each call a tool slower than the call timeout: each gets a timeout,
/// and the backend stays healthy, listed and callable, its circuit closed. (Timeouts
/// of callers' requests are not counted: a long-running tool looks exactly like a
/// stuck backend, and whether the backend is stuck is what the checks answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tools_timeouts_across_callers_leave_the_backend_up() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let py = py_backend("py", &["--forwarding-tools"]).await;
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{url}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp}}
operational:
  timeouts: {{default: 1500ms}}
  failureHandling:
    healthCheckInterval: 200ms
    unhealthyThreshold: 3
    circuitBreaker: {{enabled: true, failureThreshold: 3, timeout: 1h}}
"#,
        url = py.url,
        issuer = idp.issuer,
    )))
    .await;
    let token = |sub: &str| key.sign(&idp.claims(sub, json!({})));
    let dave = token("dave");
    assert!(
        tools_of(&gw, &dave).await.contains(&"py_slow".to_owned()),
        "listed at start"
    );

    let slow = ["alice", "bob", "carol", "erin"].map(|sub| {
        let (url, token) = (gw.url(), token(sub));
        async move {
            modern_as(
                &url,
                Some(&token),
                "tools/call",
                json!({"name": "py_slow", "arguments": {"tag": sub, "seconds": 20}}),
            )
            .await
        }
    });
    for reply in futures::future::join_all(slow).await {
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("did not answer within"),
            "each caller's call timed out: {:?}",
            reply.body
        );
    }

    let now = health(&gw, "py");
    assert!(now.status.advertisable(), "{now:?}");
    assert_eq!(now.circuit, CircuitState::Closed, "{now:?}");
    assert_eq!(now.consecutive_failures, 0, "{now:?}");
    assert!(
        tools_of(&gw, &dave).await.contains(&"py_slow".to_owned()),
        "still listed for another caller"
    );
    let reply = modern_as(
        &gw.url(),
        Some(&dave),
        "tools/call",
        json!({"name": "py_echo", "arguments": {"text": "still here"}}),
    )
    .await;
    assert_eq!(
        reply.body["result"]["content"][0]["text"], "py: still here",
        "{:?}",
        reply.body
    );
}

/// A backend whose calls fail (HTTP 500 on `tools/call`) while its checks pass goes
/// unhealthy, and is listed and callable again after its next successful check: no
/// call can bring back a backend that is not advertised, so the check must. The
/// calls run on per-caller connections (`passthroughHeaders`), as a `token_exchange`
/// backend's do: the shared connection is undisturbed, so nothing re-lists the
/// backend on a reconnect either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_out_after_failed_calls_is_back_at_its_next_good_check() {
    let failing = Arc::new(AtomicBool::new(false));
    let demo = spawn(DemoSpec::new("d", &["echo"]), 0).await.unwrap();
    // A proxy in front of the demo backend that fails its calls while `failing`.
    let upstream = demo.url();
    let fail = failing.clone();
    let proxy = axum::Router::new().fallback(move |request: Request| {
        let (upstream, fail) = (upstream.clone(), fail.clone());
        async move { relay(&upstream, &fail, request).await }
    });
    let (addr, _stop) = vmcp_tests::serve_on_loopback(proxy).await;
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: d, url: 'http://{addr}/mcp'}}]
passthroughHeaders: [X-Tenant]
operational:
  failureHandling: {{healthCheckInterval: 300ms, unhealthyThreshold: 1}}
"#,
    )))
    .await;
    let call = || async {
        modern(
            &gw.url(),
            "tools/call",
            json!({"name": "d_echo", "arguments": {"text": "hi"}}),
        )
        .await
        .1
    };
    assert_eq!(call().await["result"]["content"][0]["text"], "d: hi");

    let mut events = gw.vmcp.registry().events();
    failing.store(true, Ordering::SeqCst);
    let failed = call().await;
    assert!(failed["error"].is_object(), "{failed}");
    // The failure was recorded before the answer: the backend went unhealthy.
    let mut flipped = false;
    while let Ok(event) = events.try_recv() {
        flipped |= &*event.backend == "d"
            && matches!(
                event.kind,
                vmcp_service::backend::BackendEventKind::HealthChanged
            );
    }
    assert!(flipped, "the failed call made the backend unhealthy");
    failing.store(false, Ordering::SeqCst);

    let back = within(Duration::from_secs(10), || async {
        let listed = modern(&gw.url(), "tools/list", json!({})).await.1;
        names(&listed["result"], "tools", "name") == ["d_echo"]
            && call().await["result"]["content"][0]["text"] == "d: hi"
    })
    .await;
    let now = health(&gw, "d");
    assert!(
        back,
        "listed and callable again after a good check: {now:?}"
    );
    assert_eq!(now.status, HealthStatus::Healthy, "{now:?}");
}

/// Forward `request` to `upstream`, or answer 500 to a `tools/call` while `fail`.
async fn relay(upstream: &str, fail: &AtomicBool, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let method = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["method"].as_str().map(str::to_owned));
    if fail.load(Ordering::SeqCst) && method.as_deref() == Some("tools/call") {
        return (http::StatusCode::INTERNAL_SERVER_ERROR, "broken").into_response();
    }
    let mut forward = reqwest::Client::new()
        .request(parts.method.clone(), upstream)
        .body(bytes);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let Ok(answer) = forward.send().await else {
        return (http::StatusCode::BAD_GATEWAY, "upstream").into_response();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| http::StatusCode::BAD_GATEWAY.into_response())
}

/// A caller whose token the real IdP refuses to exchange (`invalid_grant`) calls
/// again and again: each call fails for that caller alone; the backend stays
/// healthy, and another caller still sees and calls its tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_refused_by_the_idp_does_not_take_the_backend_down() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(
        &ca,
        &[
            ("alice", "alice-pw"),
            ("mallory", "mallory-pw"),
            ("gateway", "gw-pw"),
        ],
    )
    .await;
    let backend = spawn(DemoSpec::new("b", &["echo"]), 0).await.unwrap();
    let ca_file = ca.ca_file();
    // Checks far apart: a good check between mallory's calls must not be what
    // keeps the backend up.
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: b, url: '{url}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp, caBundlePath: '{ca}'}}
outgoingAuth:
  backends:
    b:
      type: token_exchange
      tokenExchange:
        tokenUrl: '{token_url}'
        clientId: gateway
        clientSecret: gw-pw
        audience: backend-b
        caBundlePath: '{ca}'
operational:
  failureHandling:
    healthCheckInterval: 1h
    unhealthyThreshold: 3
    circuitBreaker: {{enabled: true, failureThreshold: 3, timeout: 1h}}
"#,
        url = backend.url(),
        issuer = idp.issuer,
        ca = ca_file.display(),
        token_url = idp.token_url(),
    )))
    .await;
    let alice = idp.caller_token("alice", "alice-pw").await;
    let mallory = idp.caller_token("mallory", "mallory-pw").await;
    assert!(
        within(Duration::from_secs(10), || async {
            health(&gw, "b").status == HealthStatus::Healthy
        })
        .await,
        "{:?}",
        health(&gw, "b")
    );
    idp.deny_subject("mallory").await;

    for _ in 0..5 {
        let reply = modern_as(
            &gw.url(),
            Some(&mallory),
            "tools/call",
            json!({"name": "b_echo", "arguments": {"text": "me"}}),
        )
        .await;
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("invalid_grant"),
            "mallory's exchange is refused: {:?}",
            reply.body
        );
    }
    assert!(
        idp.stats().await["denied"].as_u64() >= Some(5),
        "the IdP refused each exchange: {}",
        idp.stats().await
    );

    let now = health(&gw, "b");
    assert_eq!(now.status, HealthStatus::Healthy, "{now:?}");
    assert_eq!(now.circuit, CircuitState::Closed, "{now:?}");
    assert_eq!(now.consecutive_failures, 0, "{now:?}");
    assert_eq!(tools_of(&gw, &alice).await, ["b_echo"]);
    let reply = modern_as(
        &gw.url(),
        Some(&alice),
        "tools/call",
        json!({"name": "b_echo", "arguments": {"text": "hi"}}),
    )
    .await;
    assert_eq!(
        reply.body["result"]["content"][0]["text"], "b: hi",
        "{:?}",
        reply.body
    );
}
