//! Legacy session lifetime over real HTTP: the sliding idle TTL, the absolute
//! lifetime and the cap (`operational.sessions`), and what an expired session
//! releases (its listener, and the subscription on the backend). Also: a token
//! presented on an anonymous session is no upgrade.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{Gateway, config, gateway};

/// One raw Legacy request: status, headers and body.
async fn raw(
    method: Method,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request to the gateway");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = tokio::time::timeout(Duration::from_secs(5), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (status, headers, text)
}

fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "lifetime-test", "version": "1"}}})
}

/// Open a Legacy session (initialize + initialized); its id.
async fn open(url: &str, token: Option<&str>) -> String {
    let (status, headers, body) = raw(Method::POST, url, token, None, Some(initialize())).await;
    assert_eq!(status, 200, "initialize: {body}");
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = raw(Method::POST, url, token, Some(&session), Some(initialized)).await;
    assert_eq!(status, 202, "notifications/initialized");
    session
}

async fn ping(url: &str, token: Option<&str>, session: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    raw(Method::POST, url, token, Some(session), Some(body))
        .await
        .0
}

/// Poll (without touching the session) until `check` holds or `within` passes.
async fn wait_for(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

async fn lifetime_gateway(sessions: &str, backend: &str) -> Gateway {
    gateway(config(&format!(
        "backends:\n  - {{name: sub, url: '{backend}'}}\noperational:\n  sessions: {sessions}\n"
    )))
    .await
}

fn subscribable() -> DemoSpec {
    DemoSpec {
        resources: vec!["sub://one".into()],
        legacy_only: true,
        ..DemoSpec::new("sub", &["alpha"])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_releases_its_listener_and_backend_subscription() {
    let demo = spawn(subscribable(), 0).await.unwrap();
    let gw = lifetime_gateway("{ttl: 1s}", &demo.url()).await;
    let url = gw.url();

    // A session kept busy outlives the TTL several times over.
    let busy = open(&url, None).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        assert_eq!(ping(&url, None, &busy).await, 200, "a busy session stays");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A client subscribes, then goes away without a DELETE (and without a GET
    // stream: an open stream is not idle) ...
    let subscriber = open(&url, None).await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
        "params": {"uri": "sub://one"}});
    let (status, _, body) = raw(Method::POST, &url, None, Some(&subscriber), Some(subscribe)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"result\""), "subscribed: {body}");
    assert_eq!(demo.control().subscribed(), ["sub://one"], "backend side");
    // ... so its session is closed after the TTL, and its listener and its
    // subscription on the backend go with it.
    assert!(
        wait_for(Duration::from_secs(30), || demo
            .control()
            .subscribed()
            .is_empty())
        .await,
        "the backend subscription of an expired session is released"
    );
    assert!(
        wait_for(Duration::from_secs(30), || gw.vmcp.sessions().is_empty()).await,
        "both idle sessions' listeners are released ({} left)",
        gw.vmcp.sessions().len()
    );
    assert_eq!(
        ping(&url, None, &subscriber).await,
        404,
        "an expired session is gone"
    );
    assert_eq!(
        ping(&url, None, &busy).await,
        404,
        "so is the formerly busy one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_max_lifetime_is_gone_however_busy() {
    let demo = spawn(subscribable(), 0).await.unwrap();
    let gw = lifetime_gateway("{ttl: 1h, maxLifetime: 2s}", &demo.url()).await;
    let url = gw.url();
    // Measured from before the `initialize`, so never later than the session's birth.
    let opened = Instant::now();
    let session = open(&url, None).await;
    let deadline = opened + Duration::from_secs(30);
    let mut status = 200;
    while status == 200 && Instant::now() < deadline {
        status = ping(&url, None, &session).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 404, "the session ends although it is never idle");
    assert!(
        opened.elapsed() >= Duration::from_secs(2),
        "not before its lifetime: {:?}",
        opened.elapsed()
    );
    assert!(wait_for(Duration::from_secs(10), || gw.vmcp.sessions().is_empty()).await);
}

/// One client from `ip` (a loopback address of its own): requests go out from it.
fn client_at(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A raw Legacy POST from `client`: status, headers, body.
async fn post_as(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&body);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.send().await.expect("request to the gateway");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap_or_default())
}

/// Open a session from `client`; its id, or the 503's `Retry-After` seconds.
async fn open_as(client: &reqwest::Client, url: &str) -> Result<String, u64> {
    let (status, headers, body) = post_as(client, url, None, initialize()).await;
    if status == 503 {
        assert!(
            headers.get("mcp-session-id").is_none(),
            "no session handed out"
        );
        let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON-RPC error");
        assert_eq!(error["error"]["code"], -32000, "{error}");
        return Err(headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("Retry-After in whole seconds"));
    }
    assert_eq!(status, 200, "initialize: {body}");
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = post_as(client, url, Some(&session), initialized).await;
    assert_eq!(status, 202, "notifications/initialized");
    Ok(session)
}

async fn ping_as(client: &reqwest::Client, url: &str, session: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    post_as(client, url, Some(session), body).await.0
}

/// A session's GET stream, held open while the response lives.
async fn stream_as(client: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    let response = client
        .get(url)
        .header("Accept", "text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Mcp-Session-Id", session)
        .send()
        .await
        .expect("GET stream");
    assert_eq!(response.status(), 200, "a GET stream opens");
    response
}

/// One anonymous client opening sessions as fast as it can no longer locks every
/// other client out: over its per-address cap its own idle sessions make room, at
/// the total cap the heaviest holder's do, and only when every session in the way
/// is busy is an `initialize` refused, with a `Retry-After` that says when a busy
/// session can free up (seconds, not the idle TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_anonymous_caller_cannot_lock_others_out_of_sessions() {
    let demo = spawn(subscribable(), 0).await.unwrap();
    let gw = vmcp_tests::served_gateway(config(&format!(
        "backends:\n  - {{name: sub, url: '{}'}}\noperational:\n  sessions: {{maxSessions: 6, maxPerAddress: 3, ttl: 30m}}\n",
        demo.url()
    )))
    .await;
    let url = gw.url();
    let (flood, other, third) = (
        client_at("127.0.0.2"),
        client_at("127.0.0.3"),
        client_at("127.0.0.4"),
    );

    // The flood: ten sessions, never deleted. Each is served; the oldest idle ones
    // make room.
    let mut flooded = Vec::new();
    for n in 0..10 {
        flooded.push(
            open_as(&flood, &url)
                .await
                .unwrap_or_else(|retry| panic!("flood session {n} refused ({retry}s)")),
        );
    }
    for (n, session) in flooded.iter().enumerate() {
        let expected = if n < 7 { 404 } else { 200 };
        assert_eq!(
            ping_as(&flood, &url, session).await,
            expected,
            "flood session {n}"
        );
    }

    // The flood's sessions all busy with GET streams: now it is refused, with an
    // honest Retry-After (a stream ends when its client closes it: 60 s at most).
    let mut streams = Vec::new();
    for session in &flooded[7..] {
        streams.push(stream_as(&flood, &url, session).await);
    }
    let retry = open_as(&flood, &url)
        .await
        .expect_err("every flood session busy");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    // A stream closed frees its session for the next initialize.
    drop(streams.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reopened = open_as(&flood, &url).await;
    while reopened.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reopened = open_as(&flood, &url).await;
    }
    assert!(
        reopened.is_ok(),
        "a session freed by a closed stream makes room"
    );

    // Everyone else still gets sessions, up to the total cap and past it.
    let mine: Vec<String> = futures_open(&other, &url, 3).await;
    let theirs = open_as(&third, &url)
        .await
        .expect("a third caller at the total cap");
    assert_eq!(ping_as(&third, &url, &theirs).await, 200);
    for session in &mine {
        assert_eq!(
            ping_as(&other, &url, session).await,
            200,
            "not evicted: the flood held more"
        );
    }
}

async fn futures_open(client: &reqwest::Client, url: &str, n: usize) -> Vec<String> {
    let mut sessions = Vec::new();
    for i in 0..n {
        sessions.push(
            open_as(client, url)
                .await
                .unwrap_or_else(|retry| panic!("session {i} of another caller refused ({retry}s)")),
        );
    }
    sessions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_with_every_session_busy_initialize_gets_503_with_retry_after() {
    let demo = spawn(subscribable(), 0).await.unwrap();
    let gw = lifetime_gateway("{maxSessions: 2, ttl: 10m}", &demo.url()).await;
    let url = gw.url();
    let client = reqwest::Client::new();
    let first = open(&url, None).await;
    let second = open(&url, None).await;
    let _streams = (
        stream_as(&client, &url, &first).await,
        stream_as(&client, &url, &second).await,
    );

    let (status, headers, body) = raw(Method::POST, &url, None, None, Some(initialize())).await;
    assert_eq!(status, 503, "{body}");
    let retry: u64 = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in whole seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(
        headers.get("mcp-session-id").is_none(),
        "no session handed out"
    );
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON-RPC error body");
    assert_eq!(error["error"]["code"], -32000, "{error}");

    // Nobody busy was evicted; Modern (stateless) requests are not capped.
    assert_eq!(ping(&url, None, &first).await, 200);
    assert_eq!(ping(&url, None, &second).await, 200);
    let (status, _) = vmcp_tests::modern(&url, "tools/list", json!({})).await;
    assert_eq!(status, 200, "a Modern request over the Legacy cap");

    // A DELETE frees a slot.
    let (status, _, _) = raw(Method::DELETE, &url, None, Some(&first), None).await;
    assert!((200..300).contains(&status), "DELETE: {status}");
    let third = open(&url, None).await;
    assert_eq!(ping(&url, None, &third).await, 200);
}

/// With an embedder's optional authentication in front (a valid token gives an
/// identity, no token gives none), a token presented on a session opened without
/// one is answered exactly like an unknown session: no upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_on_an_anonymous_session_is_no_upgrade() {
    use std::sync::Arc;
    use vmcp_layers::auth::{JwtSettings, JwtValidator};
    use vmcp_tests::idp::{Idp, SigningKey};

    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let demo = spawn(subscribable(), 0).await.unwrap();
    let vmcp = vmcp_service::Vmcp::start(config(&format!(
        "backends:\n  - {{name: sub, url: '{}'}}\n",
        demo.url()
    )))
    .await
    .expect("gateway starts");
    let settings = JwtSettings::new(&idp.issuer, "vmcp");
    let validator = Arc::new(JwtValidator::new(settings, reqwest::Client::new()));
    let optional_auth = axum::middleware::from_fn(
        move |mut request: axum::extract::Request, next: axum::middleware::Next| {
            let validator = validator.clone();
            async move {
                let token = request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::to_owned);
                if let Some(token) = token {
                    match validator.validate(&token).await {
                        Ok(identity) => {
                            request.extensions_mut().insert(identity);
                        }
                        Err(_) => return axum::http::StatusCode::UNAUTHORIZED.into_response(),
                    }
                }
                next.run(request).await
            }
        },
    );
    use axum::response::IntoResponse;
    let app = axum::Router::new().nest_service(
        "/mcp",
        tower::ServiceBuilder::new()
            .layer(optional_auth)
            .service(vmcp.service()),
    );
    let (addr, _stop) = vmcp_tests::serve_on_loopback(app).await;
    let url = format!("http://{addr}/mcp");
    let alice = key.sign(&idp.claims("alice", json!({})));

    let anonymous = open(&url, None).await;
    assert_eq!(
        ping(&url, None, &anonymous).await,
        200,
        "its anonymous owner"
    );
    let unknown = "00000000-0000-0000-0000-000000000000";
    for (verb, body) in [
        (
            Method::POST,
            Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})),
        ),
        (Method::GET, None),
    ] {
        let upgrade = raw(
            verb.clone(),
            &url,
            Some(&alice),
            Some(&anonymous),
            body.clone(),
        )
        .await;
        let nowhere = raw(verb.clone(), &url, Some(&alice), Some(unknown), body).await;
        assert_eq!(
            (upgrade.0, &upgrade.2),
            (nowhere.0, &nowhere.2),
            "{verb}: a token on an anonymous session == an unknown session"
        );
        assert_eq!(upgrade.0, 404, "{verb}");
    }
    // And the other way round: Alice's session takes no anonymous request.
    let hers = open(&url, Some(&alice)).await;
    assert_eq!(ping(&url, Some(&alice), &hers).await, 200);
    assert_eq!(ping(&url, None, &hers).await, 404);
    assert_eq!(
        ping(&url, None, &anonymous).await,
        200,
        "the anonymous session is unaffected"
    );
}
