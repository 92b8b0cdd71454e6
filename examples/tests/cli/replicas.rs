//! Three `vmcp serve` processes behind a real HAProxy (round-robin, no
//! stickiness), sharing one real redis-server, with real JWTs. The Python SDK
//! client's Legacy session is served by all three; the replica holding its GET
//! stream is SIGKILLed while it runs a slow call of the client: that call fails
//! with an error, and the client goes on (its stream reconnects to another
//! replica, which delivers `resources/updated`), without a new `initialize`.
//! Another subject cannot use the session on any replica, the per-caller cap holds
//! across replicas, the record's TTL slides (`PTTL`). The balancer's
//! configuration is the one docs/scaling.md shows.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::haproxy::{HaProxy, config as haproxy_config};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::redis::RedisServer;
use vmcp_tests::{py_backend, python, repo_root};

use crate::serve::{Serve, Server};

const UPDATED: &str = "notifications/resources/updated";

/// `vmcp_requests_total{mcp_method="tools/call"}` of one replica.
/// (`/metrics` is guarded like `/status`: a valid token of the `/mcp` issuer).
async fn tool_calls(server: &Server, token: &str) -> u64 {
    let response = reqwest::Client::new()
        .get(server.at("/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), 200, "/metrics");
    let text = response.text().await.expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix("vmcp_requests_total{mcp_method=\"tools/call\"} "))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

/// One raw Legacy POST: its status and body.
async fn post(url: &str, token: &str, session: Option<&str>, body: Value) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&body);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let text = tokio::time::timeout(Duration::from_secs(5), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (status, text)
}

/// Wait (bounded) until `path` exists: the client reached that point.
async fn reached(path: &Path, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client did not reach {} within {within:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn call(n: i64) -> Value {
    json!({"op": "call_tool", "name": "py_add", "arguments": {"a": n, "b": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_haproxy_serve_one_session_through_a_kill() {
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-replicas", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let token = |subject: &str| key.sign(&idp.claims(subject, json!({})));
    let (alice, bob) = (token("alice"), token("bob"));
    let redis = RedisServer::start().await;
    let py = py_backend("py", &["--forwarding-tools"]).await;
    let demo = spawn(
        DemoSpec {
            resources: vec!["sub://one".into(), "sub://two".into()],
            ..DemoSpec::new("sub", &[])
        },
        0,
    )
    .await
    .unwrap();
    let config = dir.join("vmcp.yaml");
    std::fs::write(
        &config,
        format!(
            "backends: [{{name: py, url: '{}'}}, {{name: sub, url: '{}'}}]\n\
             incomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n\
             sessionStorage: {{provider: redis, address: '{}', keyPrefix: 'rp:'}}\n\
             operational: {{sessions: {{maxPerIdentity: 1, ttl: 60s}}}}\n\
             telemetry: {{enablePrometheusMetricsPath: true}}\n",
            py.url,
            demo.url(),
            idp.issuer,
            redis.address()
        ),
    )
    .unwrap();
    let mut replicas = Vec::new();
    for i in 0..3 {
        let log = dir.join(format!("replica-{i}.log"));
        replicas.push(Some(
            Serve::new().config(&config).stderr_to(log).start().await,
        ));
    }
    let ports: Vec<u16> = replicas.iter().flatten().map(|s| s.port).collect();
    let proxy = HaProxy::start(&ports).await;

    let at = |name: &str| dir.join(name).display().to_string();
    let mut ops: Vec<Value> = (1..=6).map(call).collect();
    ops.extend([
        json!({"op": "subscribe", "uri": "sub://one"}),
        json!({"op": "subscribe", "uri": "sub://two"}),
        json!({"op": "signal", "path": at("subscribed")}),
        json!({"op": "wait_notification", "method": UPDATED, "uri": "sub://one", "timeout": 20}),
        json!({"op": "signal", "path": at("heard-one")}),
        json!({"op": "wait_file", "path": at("slow-go"), "timeout": 60}),
        json!({"op": "call_tool", "name": "py_slow", "arguments": {"tag": "inflight", "seconds": 8}}),
        json!({"op": "wait_file", "path": at("killed"), "timeout": 60}),
        json!({"op": "wait_notification", "method": UPDATED, "uri": "sub://two", "timeout": 20}),
        json!({"op": "signal", "path": at("heard-two")}),
        json!({"op": "wait_file", "path": at("measured"), "timeout": 60}),
    ]);
    ops.extend((10..16).map(call));
    ops.extend([
        json!({"op": "signal", "path": at("called")}),
        json!({"op": "wait_file", "path": at("close"), "timeout": 60}),
    ]);
    let mut client = tokio::process::Command::new(python())
        .arg(repo_root().join("tests/peers/py_client.py"))
        .args([&proxy.url(), "legacy"])
        .env("PY_CLIENT_BEARER", &alice)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start py_client.py");
    let mut stdin = client.stdin.take().unwrap();
    stdin
        .write_all(Value::Array(ops).to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);

    reached(&dir.join("subscribed"), Duration::from_secs(60)).await;
    // Round-robin, no affinity: each replica served some of the six calls.
    let mut before = Vec::new();
    for server in replicas.iter().flatten() {
        before.push(tool_calls(server, &alice).await);
    }
    assert_eq!(before.iter().sum::<u64>(), 6, "per replica: {before:?}");
    assert!(
        before.iter().all(|n| *n >= 1),
        "all three served: {before:?}"
    );

    let keys = redis.cli(&["KEYS", "rp:session:*"]).await;
    let record: Vec<&str> = keys.lines().collect();
    assert_eq!(record.len(), 1, "one session: {keys}");
    let record = record[0].to_owned();
    let session = record.trim_start_matches("rp:session:").to_owned();
    let pttl = || async { redis.cli(&["PTTL", &record]).await.parse::<i64>().unwrap() };
    let first_ttl = pttl().await;
    assert!((1..=60_000).contains(&first_ttl), "PTTL {first_ttl}");

    // Bob, holding Alice's session id, on every replica: an unknown session.
    let unknown = "00000000-0000-0000-0000-000000000000";
    let bobs_call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "py_add", "arguments": {"a": 1, "b": 1}}});
    for server in replicas.iter().flatten() {
        let url = server.url();
        let on_alices = post(&url, &bob, Some(&session), bobs_call.clone()).await;
        let on_unknown = post(&url, &bob, Some(unknown), bobs_call.clone()).await;
        assert_eq!(on_alices, on_unknown, "Bob on {url}");
        assert_eq!(on_alices.0, 404);
    }
    // Alice's second session, asked of each replica in turn: over her cap of one.
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "second", "version": "1"}}});
    for _ in 0..3 {
        let (status, text) = post(&proxy.url(), &alice, None, initialize.clone()).await;
        assert_eq!(status, 503, "over the cap across replicas: {text}");
    }

    // Bob's calls counted too: the baseline of the calls after the kill.
    let mut base = Vec::new();
    for server in replicas.iter().flatten() {
        base.push(tool_calls(server, &alice).await);
    }

    // The subscription taken on one replica reaches the stream held by another.
    let control = demo.control().clone();
    let heard = |name: &'static str, uri: &'static str| {
        let (control, path) = (control.clone(), dir.join(name));
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while !path.exists() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the client heard {uri} within 20 s"
                );
                control.resource_updated(uri).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    heard("heard-one", "sub://one").await;

    // SIGKILL the replica holding the client's GET stream (its one open stream)
    // while it runs a slow call of the client: round-robin is steered with
    // requests of our own until the replica before it got the last one.
    let servers = proxy.servers().await;
    let streaming: Vec<usize> = (0..servers.len())
        .filter(|i| servers[*i].current > 0)
        .collect();
    assert_eq!(
        streaming.len(),
        1,
        "one replica holds the GET stream: {servers:?}"
    );
    let victim = streaming[0];
    let before_victim = (victim + servers.len() - 1) % servers.len();
    for _ in 0..servers.len() {
        let totals: Vec<u64> = proxy.servers().await.iter().map(|s| s.total).collect();
        let status = reqwest::get(proxy.at("/health")).await.unwrap().status();
        assert_eq!(status, 200);
        let after: Vec<u64> = proxy.servers().await.iter().map(|s| s.total).collect();
        if after[before_victim] > totals[before_victim] {
            break;
        }
    }
    std::fs::write(dir.join("slow-go"), "1").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while proxy.servers().await[victim].current < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow call runs on the GET stream's replica: {:?}",
            proxy.servers().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut dead = replicas[victim].take().unwrap();
    let _ = dead.child.start_kill();
    let _ = dead.child.wait().await;
    std::fs::write(dir.join("killed"), "1").unwrap();
    // Never sent before the kill: only a replica alive now can deliver it.
    heard("heard-two", "sub://two").await;

    // The record's TTL slides with the calls after the kill: read before them with
    // Redis's clock, and after them it has run down by less than the time passed.
    // (Compared bare, a slide just before the first read could not show: the TTL is
    // back under it before the next read.)
    let pttl_at = || async {
        let script = "local t = redis.call('TIME') \
            return {redis.call('PTTL', KEYS[1]), t[1] * 1000 + math.floor(t[2] / 1000)}";
        let out = redis.cli(&["EVAL", script, "1", &record]).await;
        let read: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(read.len(), 2, "PTTL and TIME: {out:?}");
        (read[0], read[1])
    };
    let (before_calls, at) = pttl_at().await;
    assert!(before_calls > 0, "PTTL {before_calls}");
    std::fs::write(dir.join("measured"), "1").unwrap();
    reached(&dir.join("called"), Duration::from_secs(60)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (now, now_at) = pttl_at().await;
        // Both read in milliseconds, truncated: 2 ms of slack.
        if now + (now_at - at) > before_calls + 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record's TTL slid with use (from {before_calls}, now {now}, {} ms on)",
            now_at - at
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The two survivors served the calls after the kill; still the one session.
    let mut after = Vec::new();
    for (i, server) in replicas.iter().enumerate() {
        if let Some(server) = server {
            after.push(tool_calls(server, &alice).await - base[i]);
        }
    }
    assert_eq!(after.iter().sum::<u64>(), 6, "survivors: {after:?}");
    assert!(
        after.iter().all(|n| *n >= 1),
        "both survivors served: {after:?}"
    );
    assert_eq!(
        redis.cli(&["KEYS", "rp:session:*"]).await,
        record,
        "no new initialize"
    );
    std::fs::write(dir.join("close"), "1").unwrap();

    let out = tokio::time::timeout(Duration::from_secs(120), client.wait_with_output())
        .await
        .expect("py_client.py finished")
        .expect("py_client.py ran");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the client's JSON report");
    let results = report["results"].as_array().expect("results");
    assert_eq!(report["protocol"], "2025-11-25");
    assert_eq!(results.len(), 25, "{report}");
    let calls: Vec<&Value> = results[..6].iter().chain(&results[17..23]).collect();
    for (call, n) in calls.iter().zip((1..=6).chain(10..16)) {
        assert_eq!(call["isError"], false, "{report}");
        assert_eq!(call["text"], (n + 1).to_string(), "{report}");
    }
    // Only the call in flight on the killed replica failed, with an error (and
    // the client went on).
    let message = results[12]["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "a clean error: {report}");
    eprintln!("the call in flight at the kill: {message}");
    let others = results.iter().enumerate().filter(|(i, _)| *i != 12);
    assert!(
        others.clone().all(|(_, r)| r.get("error").is_none()),
        "nothing else failed: {report}"
    );

    // The client closed the session it opened (its DELETE left the tombstone).
    assert_eq!(
        redis
            .cli(&["EXISTS", &format!("rp:session-deleted:{session}")])
            .await,
        "1"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The HAProxy configuration docs/scaling.md shows is the one this test runs.
#[test]
fn the_documented_haproxy_config_is_the_tested_one() {
    let page = std::fs::read_to_string(repo_root().join("docs/scaling.md")).unwrap();
    let shown = haproxy_config(
        "*:8080",
        "127.0.0.1:8404",
        &[
            "10.0.0.11:8080".into(),
            "10.0.0.12:8080".into(),
            "10.0.0.13:8080".into(),
        ],
    );
    assert!(
        page.contains(&format!("```haproxy\n{shown}```")),
        "docs/scaling.md must show:\n{shown}"
    );
}
