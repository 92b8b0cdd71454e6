//! The live catalog: list_changed with removals, health-driven membership, storms,
//! resource subscriptions, the status surface, and configuration reload.

use serde_json::json;
use vmcp_examples::demo::{DemoList, DemoSpec, RunningDemo, spawn};
use vmcp_service::config::BackendConfig;
use vmcp_tests::{
    EverythingMode, Listener, config, eventually, everything, free_port, gateway, py_client,
    status_json,
};

fn dynamic(name: &str, legacy_only: bool) -> DemoSpec {
    DemoSpec {
        resources: vec![format!("{name}://one")],
        prompts: vec!["p1".into()],
        legacy_only,
        ..DemoSpec::new(name, &["alpha"])
    }
}

fn fast_health() -> &'static str {
    "operational:\n  failureHandling: {healthCheckInterval: 100ms, unhealthyThreshold: 2}\n"
}

async fn single(demo: &RunningDemo, name: &str) -> vmcp_tests::Gateway {
    gateway(config(&format!(
        "backends:\n  - {{name: {name}, url: '{}'}}\n{}",
        demo.url(),
        fast_health()
    )))
    .await
}

async fn additions_and_removals(legacy_backend: bool) {
    let demo = spawn(dynamic("dyn", legacy_backend), 0).await.unwrap();
    let gw = single(&demo, "dyn").await;
    let expected = if legacy_backend {
        "2025-11-25"
    } else {
        "2026-07-28"
    };
    assert_eq!(
        gw.vmcp
            .registry()
            .get("dyn")
            .unwrap()
            .revision()
            .map(|r| r.as_str()),
        Some(expected)
    );
    let mut legacy = Listener::legacy(&gw.url()).await;
    let mut modern = Listener::modern(&gw.url(), &[]).await;
    assert!(
        eventually(|| gw.vmcp.sessions().len() == 2).await,
        "both listeners registered"
    );
    let control = demo.control();

    // Tools: add, then remove.
    control
        .change(DemoList::Tools, |s| s.tools.push("beta".into()))
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(client.tools().await, ["dyn_alpha", "dyn_beta"]);
    }
    control
        .change(DemoList::Tools, |s| s.tools.retain(|t| t != "alpha"))
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(
            client.tools().await,
            ["dyn_beta"],
            "the removal is propagated"
        );
    }

    // Resources: add, then remove.
    control
        .change(DemoList::Resources, |s| {
            s.resources.push("dyn://two".into())
        })
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("resources").await;
        assert_eq!(client.resources().await, ["dyn://one", "dyn://two"]);
    }
    control
        .change(DemoList::Resources, |s| {
            s.resources.retain(|r| r != "dyn://one")
        })
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("resources").await;
        assert_eq!(client.resources().await, ["dyn://two"]);
    }

    // Prompts: add, then remove.
    control
        .change(DemoList::Prompts, |s| s.prompts.push("p2".into()))
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("prompts").await;
        assert_eq!(client.prompts().await, ["dyn_p1", "dyn_p2"]);
    }
    control
        .change(DemoList::Prompts, |s| s.prompts.retain(|p| p != "p1"))
        .await;
    for client in [&mut legacy, &mut modern] {
        client.expect("prompts").await;
        assert_eq!(client.prompts().await, ["dyn_p2"]);
    }
    // Each change notified exactly the kind that changed, once.
    for client in [&mut legacy, &mut modern] {
        assert_eq!(client.drain(), Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_with_removals_from_a_modern_backend_reach_both_client_revisions() {
    additions_and_removals(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_with_removals_from_a_legacy_backend_reach_both_client_revisions() {
    additions_and_removals(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_and_restarted_leaves_and_rejoins_with_notifications() {
    let port = free_port();
    let demo = spawn(dynamic("pulse", false), port).await.unwrap();
    let other = spawn(DemoSpec::new("steady", &["echo"]), 0).await.unwrap();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: pulse, url: 'http://127.0.0.1:{port}/mcp'}}\n  - {{name: steady, url: '{}'}}\n{}",
        other.url(),
        fast_health()
    )))
    .await;
    let mut legacy = Listener::legacy(&gw.url()).await;
    let mut modern = Listener::modern(&gw.url(), &[]).await;
    assert!(eventually(|| gw.vmcp.sessions().len() == 2).await);
    let (_, status) = status_json(&gw, "/status").await;
    assert_eq!(status["phase"], "Ready", "{status}");

    demo.stop();
    drop(demo);
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(client.tools().await, ["steady_echo"]);
    }
    let (code, status) = status_json(&gw, "/status").await;
    assert_eq!(code, 200);
    assert_eq!(status["phase"], "Degraded", "{status}");
    assert_eq!(status["healthy"], true);
    let pulse = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "pulse")
        .unwrap();
    assert_eq!(pulse["health"], "unhealthy", "{status}");
    assert!(pulse["last_error"].as_str().is_some_and(|e| !e.is_empty()));
    assert!(
        !status.to_string().contains(&port.to_string()),
        "no backend URL on /status: {status}"
    );

    let _back = spawn(dynamic("pulse", false), port).await.unwrap();
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(client.tools().await, ["pulse_alpha", "steady_echo"]);
    }
    let (_, status) = status_json(&gw, "/status").await;
    assert_eq!(status["phase"], "Ready", "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_storm_costs_a_bounded_number_of_relistings() {
    let demo = spawn(dynamic("storm", false), 0).await.unwrap();
    let gw = single(&demo, "storm").await;
    let mut legacy = Listener::legacy(&gw.url()).await;
    assert!(eventually(|| gw.vmcp.sessions().len() == 1).await);
    assert!(
        eventually(|| demo.control().listeners() == 1).await,
        "the gateway listens to its Modern backend"
    );
    let before = gw.vmcp.aggregator().listings();
    let control = demo.control();
    let sent_before = control.sent();
    for _ in 0..1000 {
        control.announce(DemoList::Tools).await;
    }
    assert!(
        control.sent() - sent_before == 1000 && control.listeners() == 1,
        "the backend sent the whole storm on one listen stream"
    );
    // A real change after the storm must still arrive (the trailing re-list).
    control
        .change(DemoList::Tools, |s| s.tools.push("after".into()))
        .await;
    legacy.expect("tools").await;
    assert_eq!(legacy.tools().await, ["storm_after", "storm_alpha"]);
    let listings = gw.vmcp.aggregator().listings() - before;
    assert!(
        (1..=40).contains(&listings),
        "1,001 notifications cost {listings} re-listings"
    );
    assert_eq!(
        legacy.drain(),
        Vec::<String>::new(),
        "no change, no notification"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_updates_reach_subscribers_until_they_unsubscribe() {
    for legacy_backend in [false, true] {
        let demo = spawn(dynamic("sub", legacy_backend), 0).await.unwrap();
        let gw = single(&demo, "sub").await;
        let legacy = Listener::legacy(&gw.url()).await;
        let mut legacy = legacy;
        let mut modern = Listener::modern(&gw.url(), &["sub://one"]).await;
        assert!(eventually(|| gw.vmcp.sessions().len() == 2).await);
        #[allow(deprecated)]
        legacy
            .client
            .subscribe(rmcp::model::SubscribeRequestParams::new("sub://one"))
            .await
            .unwrap();
        let control = demo.control();
        control.resource_updated("sub://one").await;
        legacy.expect("updated sub://one").await;
        modern.expect("updated sub://one").await;

        #[allow(deprecated)]
        legacy
            .client
            .unsubscribe(rmcp::model::UnsubscribeRequestParams::new("sub://one"))
            .await
            .unwrap();
        control.resource_updated("sub://one").await;
        modern.expect("updated sub://one").await;
        // A later marker notification proves the legacy stream is live and the
        // update in between was not delivered to it.
        control
            .change(DemoList::Tools, |s| s.tools.push("marker".into()))
            .await;
        legacy.expect("tools").await;
        let rest = legacy.drain();
        assert!(
            !rest.iter().any(|n| n.starts_with("updated")),
            "legacy={legacy_backend}: unsubscribed session got {rest:?}"
        );
        // Unknown URIs are refused.
        #[allow(deprecated)]
        let refused = legacy
            .client
            .subscribe(rmcp::model::SubscribeRequestParams::new("nope://x"))
            .await;
        assert!(refused.is_err());
    }
}

/// rmcp acknowledges a listen stream before the handler sees it. The gateway
/// registers the stream, and subscribes the backend, as the request arrives, so an
/// update sent right after the acknowledgment reaches it. Each round's stream is
/// the only subscriber, so the backend subscription is made for it, and its
/// listener is gone once it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_right_after_a_listen_acknowledgment_is_not_missed() {
    for legacy_backend in [false, true] {
        let demo = spawn(dynamic("ack", legacy_backend), 0).await.unwrap();
        let gw = single(&demo, "ack").await;
        let control = demo.control();
        for round in 0..20 {
            let mut modern = Listener::modern(&gw.url(), &["ack://one"]).await;
            if !legacy_backend {
                // The demo is an rmcp server too: the gateway's own listen stream on
                // it is acknowledged a moment before the demo registers it. That
                // moment is the backend's (docs/live-catalog.md), not under test.
                assert!(eventually(|| control.listening_to("ack://one") == 1).await);
            }
            control.resource_updated("ack://one").await;
            modern.expect("updated ack://one").await;
            drop(modern);
            assert!(
                eventually(|| gw.vmcp.sessions().is_empty()).await,
                "legacy={legacy_backend} round {round}: a closed stream's listener stays"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_notifications_reach_a_python_client() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: ev, url: '{}'}}\n",
        ev.url
    )))
    .await;
    let uri = "demo://resource/static/document/architecture.md";
    let report = py_client(
        &gw.url(),
        "legacy",
        json!([
            {"op": "subscribe", "uri": uri},
            {"op": "call_tool", "name": "ev_toggle-subscriber-updates", "arguments": {}},
            {"op": "wait_notification", "method": "notifications/resources/updated", "timeout": 15},
            {"op": "call_tool", "name": "ev_gzip-file-as-resource",
             "arguments": {"name": "hello.txt.gz", "data": "data:text/plain;base64,SGVsbG8gdm1jcA=="}},
            {"op": "wait_notification", "method": "notifications/resources/list_changed", "timeout": 15},
            {"op": "list_resources"}
        ]),
    )
    .await;
    let r = &report["results"];
    assert_eq!(r[2]["uri"], uri, "{report}");
    assert_eq!(r[3]["isError"], false, "{report}");
    assert_eq!(
        r[4]["method"], "notifications/resources/list_changed",
        "{report}"
    );
    let uris = vmcp_tests::names(&r[5], "resources", "uri");
    assert!(uris.iter().any(|u| u.ends_with("hello.txt.gz")), "{uris:?}");

    let report = py_client(
        &gw.url(),
        "2026-07-28",
        json!([
            {"op": "listen", "resources": true, "uris": [uri]},
            {"op": "wait_notification", "method": "notifications/resources/updated", "timeout": 15}
        ]),
    )
    .await;
    let r = &report["results"];
    assert_eq!(
        r[0]["honored"]["resourceSubscriptions"],
        json!([uri]),
        "{report}"
    );
    assert_eq!(r[1]["uri"], uri, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_and_removes_backends_under_live_sessions() {
    let a = spawn(DemoSpec::new("a", &["x"]), 0).await.unwrap();
    let b = spawn(DemoSpec::new("b", &["y"]), 0).await.unwrap();
    let base = format!(
        "backends:\n  - {{name: a, url: '{}'}}\n{}",
        a.url(),
        fast_health()
    );
    let gw = gateway(config(&base)).await;
    let mut legacy = Listener::legacy(&gw.url()).await;
    let mut modern = Listener::modern(&gw.url(), &[]).await;
    assert!(eventually(|| gw.vmcp.sessions().len() == 2).await);
    let a_client = gw.vmcp.registry().get("a").unwrap();

    let mut with_b = config(&base);
    with_b.backends.push(BackendConfig {
        name: "b".into(),
        url: b.url(),
        ..Default::default()
    });
    gw.vmcp.reload(with_b).await.unwrap();
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(client.tools().await, ["a_x", "b_y"]);
    }
    assert!(
        std::sync::Arc::ptr_eq(&a_client, &gw.vmcp.registry().get("a").unwrap()),
        "an unchanged backend keeps its client"
    );

    let only_b = config(&format!(
        "backends:\n  - {{name: b, url: '{}'}}\n{}",
        b.url(),
        fast_health()
    ));
    gw.vmcp.reload(only_b).await.unwrap();
    for client in [&mut legacy, &mut modern] {
        client.expect("tools").await;
        assert_eq!(client.tools().await, ["b_y"]);
    }
    assert_eq!(gw.vmcp.sessions().len(), 2, "sessions survive reloads");
    let (_, status) = status_json(&gw, "/status").await;
    let names: Vec<_> = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].clone())
        .collect();
    assert_eq!(names, [json!("b")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_routes_answer_with_the_documented_shapes() {
    let demo = spawn(DemoSpec::new("s", &["x"]), 0).await.unwrap();
    let dead = free_port();
    let gw = gateway(config(&format!(
        "groupRef: eng\nbackends:\n  - {{name: s, url: '{}'}}\n  - {{name: gone, url: 'http://user:secret@127.0.0.1:{dead}/mcp', transport: sse}}\n",
        demo.url()
    )))
    .await;
    for path in ["/health", "/ping"] {
        assert_eq!(status_json(&gw, path).await, (200, json!({"status": "ok"})));
    }
    assert_eq!(
        status_json(&gw, "/readyz").await,
        (200, json!({"status": "ready"}))
    );
    let (code, status) = status_json(&gw, "/status").await;
    assert_eq!(code, 200);
    assert_eq!(status["group_ref"], "eng");
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["healthy"], true);
    let backends = status["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2);
    let gone = &backends[0];
    assert_eq!(gone["name"], "gone");
    assert_eq!(gone["transport"], "sse");
    assert_eq!(gone["auth_type"], "unauthenticated");
    let s = &backends[1];
    assert_eq!(s["health"], "healthy");
    assert_eq!(s["mcp_revision"], "2026-07-28");
    assert!(s["last_check"].as_str().is_some_and(|t| t.ends_with('Z')));
    let text = status.to_string();
    assert!(
        !text.contains("secret") && !text.contains("user:"),
        "{text}"
    );
}

/// One raw step of a Legacy session: POST `body` (with `session`, if any) on the
/// shared connection pool; the status, the session id header and the body.
async fn post_raw(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (u16, Option<String>, String) {
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&body);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.send().await.expect("POST to the gateway");
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, id, response.text().await.expect("body"))
}

/// rmcp registers a Legacy session with the handler (`on_initialized`) on a task of
/// its own, after it has answered `notifications/initialized`; a fast client's next
/// request could overtake it and be refused as "unknown session". Many sessions, on
/// kept-alive connections, subscribe (or set their log level) the moment their
/// handshake ends, or alongside `notifications/initialized`; every one is accepted,
/// and every subscriber then gets the backend's update on its GET stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_right_after_initialized_find_their_session_registered() {
    const SESSIONS: usize = 48;
    let demo = spawn(dynamic("race", true), 0).await.unwrap();
    let gw = single(&demo, "race").await;
    let url = gw.url();
    let http = reqwest::Client::new();
    let opened = (0..SESSIONS).map(|i| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "race", "version": "0"}}});
            let (status, session, _) = post_raw(&http, &url, None, init).await;
            assert_eq!(status, 200, "initialize");
            let session = session.expect("a session id");
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let (method, params) = if i % 4 == 3 {
                ("logging/setLevel", json!({"level": "info"}))
            } else {
                ("resources/subscribe", json!({"uri": "race://one"}))
            };
            let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
            // Half the clients wait for the 202 of `notifications/initialized`, half
            // send their request alongside it (MCP does not make them wait).
            let (status, body) = if i % 2 == 0 {
                let (status, _, _) = post_raw(&http, &url, Some(&session), initialized).await;
                assert_eq!(status, 202);
                let (status, _, body) = post_raw(&http, &url, Some(&session), request).await;
                (status, body)
            } else {
                let ((notified, _, _), (status, _, body)) = tokio::join!(
                    post_raw(&http, &url, Some(&session), initialized),
                    post_raw(&http, &url, Some(&session), request)
                );
                assert_eq!(notified, 202);
                (status, body)
            };
            (i, session, status, vmcp_tests::parse_jsonrpc_body(&body))
        })
    });
    let mut subscribers = Vec::new();
    for opened in futures::future::join_all(opened).await {
        let (i, session, status, answer) = opened.expect("session task");
        assert_eq!(status, 200, "session {i}: {answer}");
        assert!(answer["result"].is_object(), "session {i}: {answer}");
        if i % 4 != 3 {
            subscribers.push(session);
        }
    }
    assert_eq!(
        gw.vmcp.sessions().len(),
        SESSIONS,
        "each session registered once"
    );

    // Every subscriber's GET stream gets the update.
    let mut streams = Vec::new();
    for session in &subscribers {
        let response = http
            .get(&url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", session)
            .send()
            .await
            .expect("GET stream");
        assert_eq!(response.status(), 200);
        streams.push(response);
    }
    demo.control().resource_updated("race://one").await;
    for (i, mut stream) in streams.into_iter().enumerate() {
        let mut seen = String::new();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Ok(Some(chunk)) = stream.chunk().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.contains("notifications/resources/updated") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(got, Ok(true), "subscriber {i} got no update: {seen}");
    }
}
