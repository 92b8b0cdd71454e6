//! Dead, slow and dying backends: the others keep serving, errors are clean.

use std::time::{Duration, Instant};

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{config, free_port, gateway, modern, names, py_backend, py_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_silent_backends_at_startup_do_not_block_the_others() {
    let alive = spawn(DemoSpec::new("alive", &["echo"]), 0).await.unwrap();
    let dead_port = free_port();
    // A socket that accepts and never answers: the per-backend timeout must cut it.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let started = Instant::now();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: alive, url: '{}'}}\n  - {{name: dead, url: 'http://127.0.0.1:{dead_port}/mcp'}}\n  - {{name: silent, url: 'http://127.0.0.1:{silent_port}/mcp'}}\noperational:\n  timeouts: {{discovery: 2s}}\n",
        alive.url()
    )))
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "startup bounded by the discovery timeout, took {:?}",
        started.elapsed()
    );
    let mut failed = gw.vmcp.aggregator().failed_backends();
    failed.sort();
    assert_eq!(failed, ["dead", "silent"]);
    let report = py_client(
        &gw.url(),
        "auto",
        json!([{"op": "list_tools"}, {"op": "call_tool", "name": "alive_echo", "arguments": {"text": "ok"}}]),
    )
    .await;
    assert_eq!(
        names(&report["results"][0], "tools", "name"),
        ["alive_echo"]
    );
    assert_eq!(report["results"][1]["text"], "alive: ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_mid_session_gives_a_clean_error() {
    let mut py = py_backend("victim", &[]).await;
    let other = spawn(DemoSpec::new("other", &["echo"]), 0).await.unwrap();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: victim, url: '{}'}}\n  - {{name: other, url: '{}'}}\noperational:\n  timeouts: {{default: 5s}}\n  failureHandling: {{healthCheckInterval: 100ms, unhealthyThreshold: 10}}\n",
        py.url,
        other.url()
    )))
    .await;
    let (_, before) = modern(
        &gw.url(),
        "tools/call",
        json!({"name": "victim_whoami", "arguments": {}}),
    )
    .await;
    assert_eq!(before["result"]["content"][0]["text"], "victim", "{before}");

    py.kill().await;
    let started = Instant::now();
    let (status, after) = modern(
        &gw.url(),
        "tools/call",
        json!({"name": "victim_whoami", "arguments": {}}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "no hang: {:?}",
        started.elapsed()
    );
    assert_eq!(
        status, 200,
        "a JSON-RPC error, not an HTTP failure: {after}"
    );
    assert_eq!(after["error"]["code"], -32603, "{after}");
    let message = after["error"]["message"].as_str().unwrap();
    assert!(message.contains("victim"), "{message}");
    assert!(
        !message.contains("127.0.0.1"),
        "no backend address leaks: {message}"
    );

    let (_, ok) = modern(
        &gw.url(),
        "tools/call",
        json!({"name": "other_echo", "arguments": {"text": "still here"}}),
    )
    .await;
    assert_eq!(ok["result"]["content"][0]["text"], "other: still here");

    // The gateway notices the loss and drops the dead backend's tools.
    let mut gone = false;
    for _ in 0..200 {
        if gw
            .vmcp
            .aggregator()
            .catalog()
            .tool("victim_whoami")
            .is_none()
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(gone, "the dead backend's tools leave the catalog");
    let report = py_client(&gw.url(), "legacy", json!([{"op": "list_tools"}])).await;
    assert_eq!(
        names(&report["results"][0], "tools", "name"),
        ["other_echo"]
    );
}

/// Call `tool` until the catalog holds `wanted` (bounded); each call is what surfaces
/// the broken connection.
async fn poke_until(gw: &vmcp_tests::Gateway, tool: &str, wanted: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let _ = modern(
            &gw.url(),
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        )
        .await;
        if gw.vmcp.aggregator().catalog().tool(wanted).is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_changes_revision_is_reprobed() {
    use vmcp_layers::McpRevision;
    use vmcp_tests::{EverythingMode, everything_on};

    let port = free_port();
    let demo = spawn(DemoSpec::new("flip", &["whoami"]), port)
        .await
        .unwrap();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: flip, url: 'http://127.0.0.1:{port}/mcp'}}\noperational:\n  timeouts: {{default: 2s}}\n  failureHandling: {{healthCheckInterval: 100ms}}\n"
    )))
    .await;
    let backend = gw.vmcp.registry().get("flip").unwrap();
    assert_eq!(
        backend.revision(),
        Some(McpRevision::Modern),
        "rmcp serves 2026-07-28"
    );

    // Modern -> Legacy: a Legacy-only server (no server/discover) takes the address.
    // The health check's server/discover fails, so the gateway reconnects, re-probes
    // and re-lists.
    demo.stop();
    drop(demo);
    // The stopped server releases the port once its graceful shutdown ends.
    let mut legacy = None;
    for _ in 0..200 {
        let spec = DemoSpec {
            legacy_only: true,
            ..DemoSpec::new("flip", &["legacytool"])
        };
        if let Ok(server) = spawn(spec, port).await {
            legacy = Some(server);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let legacy = legacy.expect("the port is free again within 5s");
    assert!(
        poke_until(&gw, "flip_whoami", "flip_legacytool").await,
        "Legacy backend re-listed"
    );
    assert_eq!(backend.revision(), Some(McpRevision::Legacy));
    assert!(gw.vmcp.aggregator().catalog().tool("flip_whoami").is_none());

    // Another Legacy server (server-everything) takes the address: it does not know
    // our session and refuses it with an uncorrelated 400. The gateway reconnects on
    // its own (a timed-out call or a failed health check discards the session),
    // re-lists, and the backend serves again.
    legacy.stop();
    drop(legacy);
    let _legacy = everything_on(port, EverythingMode::StreamableHttp).await;
    let mut last = json!(null);
    let mut healed = false;
    for _ in 0..100 {
        let (_, answer) = modern(
            &gw.url(),
            "tools/call",
            json!({"name": "flip_get-sum", "arguments": {"a": 2, "b": 3}}),
        )
        .await;
        healed = answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains('5'));
        last = answer;
        if healed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healed, "{last}");
}
