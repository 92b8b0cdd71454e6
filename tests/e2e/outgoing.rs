//! Per-caller outgoing credentials against a real authorization server: the
//! `oidc-provider` package over HTTPS (CA generated here) is both the incoming
//! issuer (discovery + JWKS) and the RFC 8693 token endpoint; an in-process rmcp
//! backend records every request it gets (Authorization, headers, sessions).
//! Over 600 lines, one idea: every test shares that recording backend and the
//! provider, and each checks one way a caller's credentials reach a backend.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use vmcp_examples::demo::{DemoBackend, DemoSpec};
use vmcp_tests::oidc::{OidcProvider, claims};
use vmcp_tests::stacked::{StackedGateway, modern_as, modern_with_headers, stacked_gateway};
use vmcp_tests::tls::TestCa;
use vmcp_tests::{config, eventually};

/// One request as the backend saw it.
#[derive(Debug, Clone)]
struct Seen {
    http_method: String,
    /// The JSON-RPC method (empty for GET/DELETE).
    method: String,
    authorization: Option<String>,
    session: Option<String>,
    tenant: Option<String>,
    forwarded: bool,
    other: bool,
}

#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Bearer tokens answered with 401.
    refused: Arc<Mutex<HashSet<String>>>,
}

impl Recorder {
    fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests carrying a token whose `sub` is `sub`.
    fn of(&self, sub: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|s| {
                s.authorization
                    .as_deref()
                    .is_some_and(|a| claims(a.trim_start_matches("Bearer "))["sub"] == sub)
            })
            .collect()
    }
}

async fn record(
    axum::extract::State(recorder): axum::extract::State<Recorder>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let method = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["method"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorization = header("authorization");
    recorder.seen.lock().unwrap().push(Seen {
        http_method: parts.method.to_string(),
        method,
        authorization: authorization.clone(),
        session: header("mcp-session-id"),
        tenant: header("x-tenant"),
        forwarded: parts.headers.contains_key("x-forwarded-for"),
        other: parts.headers.contains_key("x-not-allowed"),
    });
    let token = authorization
        .as_deref()
        .unwrap_or_default()
        .trim_start_matches("Bearer ");
    if authorization.is_none() || recorder.refused.lock().unwrap().contains(token) {
        return (http::StatusCode::UNAUTHORIZED, "no").into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A recording backend named `name` with tool `echo` (Legacy-only if `legacy`).
async fn backend(name: &str, legacy: bool) -> (String, Recorder) {
    let spec = DemoSpec {
        legacy_only: legacy,
        ..DemoSpec::new(name, &["echo"])
    };
    let backend = DemoBackend::new(spec);
    let service: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let recorder = Recorder::default();
    let app = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(recorder.clone(), record),
    );
    let (addr, _stop) = vmcp_tests::serve_on_loopback(app).await;
    std::mem::forget(_stop); // serves until the test process ends
    (format!("http://{addr}/mcp"), recorder)
}

/// A gateway authenticating callers at `idp` and exchanging their tokens for
/// backend `b` (audience `backend-b`).
async fn gateway(idp: &OidcProvider, ca: &TestCa, url: &str, secret: &str) -> StackedGateway {
    gateway_with(idp, ca, url, secret, "").await
}

/// [`gateway`] with more configuration (`extra`, top-level YAML keys).
async fn gateway_with(
    idp: &OidcProvider,
    ca: &TestCa,
    url: &str,
    secret: &str,
    extra: &str,
) -> StackedGateway {
    let ca_file = ca.ca_file();
    stacked_gateway(config(&format!(
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
        clientSecret: '{secret}'
        audience: backend-b
        scopes: [tools]
        caBundlePath: '{ca}'
operational:
  failureHandling: {{healthCheckInterval: 500ms}}
{extra}"#,
        issuer = idp.issuer,
        ca = ca_file.display(),
        token_url = idp.token_url(),
    )))
    .await
}

async fn call_echo(gw: &StackedGateway, token: &str, text: &str) -> Value {
    let reply = modern_as(
        &gw.url(),
        Some(token),
        "tools/call",
        json!({"name": "b_echo", "arguments": {"text": text}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

fn text(body: &Value) -> &str {
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanged_tokens_are_cached_per_caller_single_flight_refreshed_and_retried() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(
        &ca,
        &[
            ("alice", "alice-pw"),
            ("bob", "bob-pw"),
            ("gateway", "gw-pw"),
        ],
    )
    .await;
    let (url, seen) = backend("b", false).await;
    let gw = gateway(&idp, &ca, &url, "gw-pw").await;
    let alice = idp.caller_token("alice", "alice-pw").await;
    let bob = idp.caller_token("bob", "bob-pw").await;

    // The incoming side: discovery and JWKS fetched from oidc-provider over https.
    let unauthenticated = modern_as(&gw.url(), None, "tools/list", json!({})).await;
    assert_eq!(unauthenticated.status, 401);

    // 50 concurrent calls of one caller: exactly one exchange.
    let burst = (0..50).map(|i| {
        let (gw_url, alice) = (gw.url(), alice.clone());
        async move {
            modern_as(
                &gw_url,
                Some(&alice),
                "tools/call",
                json!({"name": "b_echo", "arguments": {"text": format!("n{i}")}}),
            )
            .await
        }
    });
    for reply in futures::future::join_all(burst).await {
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert!(text(&reply.body).starts_with("b: n"), "{:?}", reply.body);
    }
    assert_eq!(idp.exchanges_of("alice").await, 1, "{}", idp.stats().await);

    // The backend saw the exchanged token (aud = the backend), never the caller's.
    let calls: Vec<Seen> = seen
        .all()
        .into_iter()
        .filter(|s| s.method == "tools/call")
        .collect();
    assert_eq!(calls.len(), 50);
    for call in &calls {
        let token = call
            .authorization
            .as_deref()
            .unwrap()
            .trim_start_matches("Bearer ");
        assert_ne!(token, alice, "the caller's own token reached the backend");
        let claims = claims(token);
        assert_eq!(claims["aud"], "backend-b", "{claims}");
        assert_eq!(claims["sub"], "alice", "{claims}");
        assert_eq!(claims["act"]["sub"], "gateway", "{claims}");
    }
    assert!(
        seen.all()
            .iter()
            .all(|s| s.authorization.as_deref() != Some(&format!("Bearer {alice}")))
    );

    // A second caller: a second exchange, its own token.
    assert_eq!(text(&call_echo(&gw, &bob, "hi").await), "b: hi");
    assert_eq!(idp.exchanges_of("bob").await, 1);
    assert_eq!(idp.exchanges_of("alice").await, 1);
    assert!(!seen.of("bob").is_empty());

    // Health checks go with the gateway's own client-credentials token.
    let checks = seen.of("gateway");
    assert!(
        checks.iter().any(|s| s.method == "server/discover"),
        "{checks:?}"
    );
    assert!(idp.stats().await["client_credentials"].as_u64().unwrap() >= 3);

    // The backend revokes alice's exchanged token (401): evicted, exchanged again,
    // and the call retried once; the caller sees only success.
    let current = seen
        .of("alice")
        .last()
        .unwrap()
        .authorization
        .clone()
        .unwrap();
    let before = seen.all().len();
    seen.refused
        .lock()
        .unwrap()
        .insert(current.trim_start_matches("Bearer ").to_owned());
    idp.set_ttl(3).await;
    assert_eq!(text(&call_echo(&gw, &alice, "again").await), "b: again");
    assert_eq!(idp.exchanges_of("alice").await, 2);
    let after: Vec<Seen> = seen.all().split_off(before);
    let refused_calls = after
        .iter()
        .filter(|s| s.method == "tools/call" && s.authorization.as_ref() == Some(&current))
        .count();
    let served_calls = after
        .iter()
        .filter(|s| s.method == "tools/call" && s.authorization.as_ref() != Some(&current))
        .count();
    assert_eq!(
        (refused_calls, served_calls),
        (1, 1),
        "tried once with the refused token, retried once: {after:?}"
    );

    // The new token lives 3 s (used for 2.7 s): within that, no new exchange;
    // after it, one more.
    call_echo(&gw, &alice, "cached").await;
    assert_eq!(idp.exchanges_of("alice").await, 2);
    tokio::time::sleep(Duration::from_millis(3100)).await; // the token's lifetime
    call_echo(&gw, &alice, "expired").await;
    assert_eq!(idp.exchanges_of("alice").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_backend_gets_one_session_per_caller_closed_when_idle_and_passthrough_headers() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(&ca, &[("alice", "alice-pw"), ("gateway", "gw-pw")]).await;
    let (url, seen) = backend("b", true).await;
    let gw = stacked_gateway(config(&format!(
        r#"
backends: [{{name: b, url: '{url}'}}]
passthroughHeaders: [X-Tenant]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp, caBundlePath: '{ca}'}}
outgoingAuth:
  callerConnections: {{idleTimeout: 1s, maxPerBackend: 8}}
  backends:
    b:
      type: token_exchange
      tokenExchange: {{tokenUrl: '{token_url}', clientId: gateway, clientSecret: gw-pw, audience: backend-b, caBundlePath: '{ca}'}}
"#,
        issuer = idp.issuer,
        ca = ca.ca_file().display(),
        token_url = idp.token_url(),
    )))
    .await;
    let alice = idp.caller_token("alice", "alice-pw").await;
    let headers = [
        ("X-Tenant", "acme"),
        ("X-Forwarded-For", "203.0.113.9"),
        ("X-Not-Allowed", "1"),
    ];
    for i in 0..5 {
        let reply = modern_with_headers(
            &gw.url(),
            Some(&alice),
            &headers,
            "tools/call",
            json!({"name": "b_echo", "arguments": {"text": format!("s{i}")}}),
        )
        .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(text(&reply.body), format!("b: s{i}"));
    }
    let mine = seen.of("alice");
    let inits: Vec<_> = mine.iter().filter(|s| s.method == "initialize").collect();
    assert_eq!(
        inits.len(),
        1,
        "one Legacy session for the caller: {mine:?}"
    );
    let calls: Vec<_> = mine.iter().filter(|s| s.method == "tools/call").collect();
    assert_eq!(calls.len(), 5);
    let session = calls[0].session.clone().expect("calls carry the session");
    assert!(calls.iter().all(|c| c.session.as_ref() == Some(&session)));
    // Passed through: X-Tenant; not: X-Forwarded-For, a header not in the list.
    assert!(
        calls.iter().all(|c| c.tenant.as_deref() == Some("acme")),
        "{calls:?}"
    );
    assert!(calls.iter().all(|c| !c.forwarded && !c.other), "{calls:?}");
    // The gateway's own connection is another session, without the caller's headers.
    assert!(seen.of("gateway").iter().all(|s| s.tenant.is_none()));

    // Idle for longer than idleTimeout: the caller's session is ended (DELETE).
    assert!(
        eventually(|| seen
            .all()
            .iter()
            .any(|s| s.http_method == "DELETE" && s.session.as_ref() == Some(&session)))
        .await,
        "the idle caller session was closed: {:?}",
        seen.of("alice")
    );
    // The next call opens a new one.
    let reply = modern_with_headers(
        &gw.url(),
        Some(&alice),
        &headers,
        "tools/call",
        json!({"name": "b_echo", "arguments": {"text": "back"}}),
    )
    .await;
    assert_eq!(text(&reply.body), "b: back");
    assert_eq!(
        seen.of("alice")
            .iter()
            .filter(|s| s.method == "initialize")
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_steps_use_the_callers_exchanged_token_on_both_revisions() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(
        &ca,
        &[
            ("alice", "alice-pw"),
            ("bob", "bob-pw"),
            ("gateway", "gw-pw"),
        ],
    )
    .await;
    let (url, seen) = backend("b", false).await;
    let gw = gateway_with(
        &idp,
        &ca,
        &url,
        "gw-pw",
        r#"
compositeTools:
  - name: twice
    description: echo, then echo the answer
    parameters: {type: object, properties: {text: {type: string}}}
    steps:
      - {id: one, tool: b.echo, arguments: {text: "{{ params.text }}"}}
      - {id: two, tool: b.echo, dependsOn: [one], arguments: {text: "again {{ steps.one.content.text }}"}}
"#,
    )
    .await;
    let alice = idp.caller_token("alice", "alice-pw").await;
    let bob = idp.caller_token("bob", "bob-pw").await;
    let before = seen.all().len();

    // alice on 2026-07-28, bob over a 2025-11-25 session.
    let reply = modern_as(
        &gw.url(),
        Some(&alice),
        "tools/call",
        json!({"name": "twice", "arguments": {"text": "hi"}}),
    )
    .await;
    assert_eq!(text(&reply.body), "b: again b: hi", "{:?}", reply.body);
    let mut session = vmcp_tests::stacked::LegacySession::open(&gw.url(), Some(&bob)).await;
    let reply = session
        .request(
            "tools/call",
            json!({"name": "twice", "arguments": {"text": "yo"}}),
        )
        .await;
    assert_eq!(text(&reply.body), "b: again b: yo", "{:?}", reply.body);

    // Every step reached the backend with its caller's exchanged token, never the
    // gateway's own (the shared connection's) nor the caller's.
    let calls: Vec<Seen> = seen
        .all()
        .split_off(before)
        .into_iter()
        .filter(|s| s.method == "tools/call")
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    let mut subjects = Vec::new();
    for call in &calls {
        let token = call
            .authorization
            .as_deref()
            .unwrap()
            .trim_start_matches("Bearer ");
        assert!(
            token != alice && token != bob,
            "a caller's own token reached the backend"
        );
        let claims = claims(token);
        assert_eq!(claims["aud"], "backend-b", "{claims}");
        assert_eq!(claims["act"]["sub"], "gateway", "{claims}");
        subjects.push(claims["sub"].as_str().unwrap().to_owned());
    }
    assert_eq!(subjects, ["alice", "alice", "bob", "bob"]);
    assert_eq!(idp.exchanges_of("alice").await, 1);
    assert_eq!(idp.exchanges_of("bob").await, 1);
}

/// A `token_exchange` backend is checked with the gateway's own client-credentials
/// token. Real Python SDK backends that refuse any bearer token (401, and 403)
/// show `unauthenticated` on `/status`, not merely unhealthy; one that accepts it
/// shows healthy, so the token was obtained and sent. No token reaches `/status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_refusing_the_health_check_token_show_unauthenticated() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(&ca, &[("gateway", "gw-pw")]).await;
    let (accepts, refuses, forbids) = tokio::join!(
        vmcp_tests::py_backend("accepts", &[]),
        vmcp_tests::py_backend("refuses", &["--refuse-bearer", "401"]),
        vmcp_tests::py_backend("forbids", &["--refuse-bearer", "403"]),
    );
    let ca_file = ca.ca_file();
    let gw = vmcp_tests::gateway(config(&format!(
        r#"
backends:
  - {{name: accepts, url: '{accepts}'}}
  - {{name: refuses, url: '{refuses}'}}
  - {{name: forbids, url: '{forbids}'}}
outgoingAuth:
  default:
    type: token_exchange
    tokenExchange:
      tokenUrl: '{token_url}'
      clientId: gateway
      clientSecret: gw-pw
      audience: backends
      caBundlePath: '{ca}'
operational:
  failureHandling: {{healthCheckInterval: 200ms, unhealthyThreshold: 2}}
"#,
        accepts = accepts.url,
        refuses = refuses.url,
        forbids = forbids.url,
        token_url = idp.token_url(),
        ca = ca_file.display(),
    )))
    .await;
    let health = |status: &Value, name: &str| -> Value {
        status["backends"]
            .as_array()
            .and_then(|all| all.iter().find(|b| b["name"] == name))
            .map(|b| b["health"].clone())
            .unwrap_or(Value::Null)
    };
    let settled = eventually_async(|| async {
        let (_, now) = vmcp_tests::status_json(&gw, "/status").await;
        health(&now, "refuses") == "unauthenticated"
            && health(&now, "forbids") == "unauthenticated"
            && health(&now, "accepts") == "healthy"
    })
    .await;
    let (code, status) = vmcp_tests::status_json(&gw, "/status").await;
    assert_eq!(code, 200);
    assert!(settled, "{status}");
    assert_eq!(health(&status, "accepts"), "healthy", "{status}");
    assert_eq!(health(&status, "refuses"), "unauthenticated", "{status}");
    assert_eq!(health(&status, "forbids"), "unauthenticated", "{status}");
    assert!(
        idp.stats().await["client_credentials"].as_u64() >= Some(1),
        "the gateway fetched its client-credentials token"
    );
    for backend in status["backends"].as_array().unwrap() {
        assert_eq!(backend["auth_type"], "token_exchange", "{backend}");
    }
    assert!(!status.to_string().contains("gw-pw"), "{status}");
    // Still refused a few checks later: a refusal is not a blip.
    let checks = |status: &Value, name: &str| {
        status["backends"]
            .as_array()
            .and_then(|all| all.iter().find(|b| b["name"] == name))
            .and_then(|b| b["consecutive_failures"].as_u64())
            .unwrap_or(0)
    };
    let before = checks(&status, "refuses");
    assert!(
        eventually_async(|| async {
            let (_, now) = vmcp_tests::status_json(&gw, "/status").await;
            checks(&now, "refuses") > before && health(&now, "refuses") == "unauthenticated"
        })
        .await,
        "later checks keep it unauthenticated"
    );
}

/// Poll an async `check` until it holds (bounded by ~10 s).
async fn eventually_async<F: std::future::Future<Output = bool>>(
    mut check: impl FnMut() -> F,
) -> bool {
    for _ in 0..200 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Per-caller connections on the fast path: one gateway exchanging callers' tokens
/// for a 2026-07-28 backend and passing `X-Tenant` through, mounted behind the
/// stack twice (`Vmcp::service()` and `without_fast_path()`). Each caller's call
/// answers alike on both, and the fast side answered it;
/// the backend saw each caller's own exchanged token and tenant, never the caller's
/// token; a token the backend revokes is exchanged again and the call retried once
/// on the fast side too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_caller_connections_are_served_on_the_fast_path_as_by_the_handler() {
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(
        &ca,
        &[
            ("alice", "alice-pw"),
            ("bob", "bob-pw"),
            ("gateway", "gw-pw"),
        ],
    )
    .await;
    let (url, seen) = backend("b", false).await;
    let ca_file = ca.ca_file();
    let vmcp = vmcp_service::Vmcp::start(config(&format!(
        r#"
backends: [{{name: b, url: '{url}'}}]
passthroughHeaders: [X-Tenant]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp, caBundlePath: '{ca}'}}
outgoingAuth:
  backends:
    b:
      type: token_exchange
      tokenExchange: {{tokenUrl: '{token_url}', clientId: gateway, clientSecret: gw-pw, audience: backend-b, caBundlePath: '{ca}'}}
"#,
        issuer = idp.issuer,
        ca = ca_file.display(),
        token_url = idp.token_url(),
    )))
    .await
    .expect("gateway starts");
    let paths = vmcp_tests::stacked::two_stacks(&vmcp).await;
    let vmcp_tests::stacked::TwoStacks {
        fast,
        slow,
        fast_url,
        slow_url,
        ..
    } = &paths;
    let alice = idp.caller_token("alice", "alice-pw").await;
    let bob = idp.caller_token("bob", "bob-pw").await;

    for (who, token, tenant) in [("alice", &alice, "acme"), ("bob", &bob, "globex")] {
        let headers = [("X-Tenant", tenant), ("X-Not-Allowed", "1")];
        let before = seen.of(who).len();
        let mut answers = Vec::new();
        for url in [fast_url, slow_url] {
            let served = fast.fast_path_answers();
            let reply = modern_with_headers(
                url,
                Some(token),
                &headers,
                "tools/call",
                json!({"name": "b_echo", "arguments": {"text": who}}),
            )
            .await;
            assert_eq!(reply.status, 200, "{who} on {url}: {:?}", reply.body);
            answers.push((reply.raw, fast.fast_path_answers() - served));
        }
        assert_eq!(
            answers[0].0, answers[1].0,
            "{who}: the two paths answer alike"
        );
        assert_eq!(
            (answers[0].1, answers[1].1),
            (1, 0),
            "{who}: the fast mount answered on the fast path, the other did not"
        );
        // Both calls reached the backend with this caller's exchanged token and
        // tenant, and nothing else of the request.
        let calls: Vec<Seen> = seen.of(who)[before..]
            .iter()
            .filter(|s| s.method == "tools/call")
            .cloned()
            .collect();
        assert_eq!(calls.len(), 2, "{who}: {calls:?}");
        for call in &calls {
            let bearer = call
                .authorization
                .as_deref()
                .unwrap()
                .trim_start_matches("Bearer ");
            assert_ne!(
                bearer,
                token.as_str(),
                "{who}'s own token reached the backend"
            );
            let claims = claims(bearer);
            assert_eq!(
                (claims["aud"].as_str(), claims["sub"].as_str()),
                (Some("backend-b"), Some(who)),
                "{claims}"
            );
            assert_eq!(call.tenant.as_deref(), Some(tenant), "{call:?}");
            assert!(!call.other, "{call:?}");
        }
    }
    assert_eq!(
        idp.exchanges_of("alice").await,
        1,
        "one exchange each, shared by both mounts"
    );
    assert_eq!(idp.exchanges_of("bob").await, 1);

    // The backend revokes Alice's exchanged token: the fast path exchanges again and
    // retries once; Alice only sees success.
    let current = seen
        .of("alice")
        .last()
        .unwrap()
        .authorization
        .clone()
        .unwrap();
    seen.refused
        .lock()
        .unwrap()
        .insert(current.trim_start_matches("Bearer ").to_owned());
    let before = seen.all().len();
    let served = fast.fast_path_answers();
    // (The same passed-through headers: the same caller connection as before.)
    let reply = modern_with_headers(
        fast_url,
        Some(&alice),
        &[("X-Tenant", "acme"), ("X-Not-Allowed", "1")],
        "tools/call",
        json!({"name": "b_echo", "arguments": {"text": "again"}}),
    )
    .await;
    assert_eq!(text(&reply.body), "b: again", "{:?}", reply.body);
    assert_eq!(fast.fast_path_answers() - served, 1);
    assert_eq!(idp.exchanges_of("alice").await, 2);
    let after: Vec<Seen> = seen.all().split_off(before);
    let tries: Vec<bool> = after
        .iter()
        .filter(|s| s.method == "tools/call")
        .map(|s| s.authorization.as_ref() == Some(&current))
        .collect();
    assert_eq!(
        tries,
        [true, false],
        "refused once, retried once: {after:?}"
    );
    assert_eq!(slow.fast_path_answers(), 0);
}
