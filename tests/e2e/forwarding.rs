//! What happens during a call reaches the caller that made it, and only that caller:
//! progress in order, logs at the caller's level, and the caller's cancellation
//! reaching the backend. Real Python SDK clients (both revisions, concurrently) through
//! the gateway to the Python SDK backend (a Modern backend) and server-everything (a
//! Legacy one). Also the SEP-2549 cache hints of merged lists.

use serde_json::{Value, json};
use vmcp_tests::stacked::{modern_as, stacked_gateway};
use vmcp_tests::{EverythingMode, config, everything, gateway, py_backend};

/// Run `tests/peers/py_forwarding.py` against `url` with `plan`.
async fn clients(url: &str, plan: Value) -> Value {
    vmcp_tests::run_py_plan("py_forwarding.py", url, &plan).await
}

fn log_lines(client: &Value) -> Vec<String> {
    client["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l["level"].as_str().unwrap_or("?"),
                l["data"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// `[[p, total, message], …]` of one call.
fn progress(call: &Value) -> Vec<(f64, String)> {
    call["progress"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|p| {
            (
                p[0].as_f64().unwrap(),
                p[2].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_logs_reach_only_their_caller_at_its_level() {
    let py = py_backend("py", &["--forwarding-tools"]).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: py, url: '{}'}}\n",
        py.url
    )))
    .await;
    let steps = |tag: &str| json!({"tool": "py_steps", "arguments": {"count": 4, "tag": tag}, "progress": true});
    // Three concurrent callers on one backend: a Legacy session at info, a Modern
    // caller at debug, and a Modern caller that asked for no logs.
    let report = clients(
        &gw.url(),
        json!({"clients": [
            {"mode": "legacy", "level": "info", "calls": [steps("leg"), steps("leg2")]},
            {"mode": "2026-07-28", "level": "debug", "calls": [steps("mod"), steps("mod2")]},
            {"mode": "2026-07-28", "level": null, "calls": [steps("quiet")]}
        ]}),
    )
    .await;
    let [legacy, modern, quiet] = [0, 1, 2].map(|i| &report["clients"][i]);
    assert_eq!(legacy["protocol"], "2025-11-25", "{report}");
    assert_eq!(modern["protocol"], "2026-07-28", "{report}");

    for (client, tags) in [(legacy, ["leg", "leg2"]), (modern, ["mod", "mod2"])] {
        for (call, tag) in client["calls"].as_array().unwrap().iter().zip(tags) {
            assert_eq!(call["text"], format!("{tag} done"), "{report}");
            // Exactly this call's progress, in order, under the caller's own token.
            let expected: Vec<(f64, String)> = (1..=4)
                .map(|i| (f64::from(i), format!("{tag} step {i}")))
                .collect();
            assert_eq!(progress(call), expected, "{tag}: {report}");
        }
    }
    let call = &quiet["calls"][0];
    assert_eq!(call["text"], "quiet done", "{report}");
    assert_eq!(progress(call).len(), 4, "{report}");

    // Logs: only the caller's own, at or above its level, in order.
    let info =
        |tag: &str| -> Vec<String> { (1..=4).map(|i| format!("info {tag} info {i}")).collect() };
    let legacy_expected = [info("leg"), info("leg2")].concat();
    assert_eq!(log_lines(legacy), legacy_expected, "{report}");
    let both = |tag: &str| -> Vec<String> {
        (1..=4)
            .flat_map(|i| {
                [
                    format!("debug {tag} debug {i}"),
                    format!("info {tag} info {i}"),
                ]
            })
            .collect()
    };
    let modern_expected = [both("mod"), both("mod2")].concat();
    assert_eq!(log_lines(modern), modern_expected, "{report}");
    assert!(
        log_lines(quiet).is_empty(),
        "a Modern request without a logLevel gets no logs: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_legacy_backend_reaches_each_caller_in_order() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: ev, url: '{}'}}\n",
        ev.url
    )))
    .await;
    let long = json!({"tool": "ev_trigger-long-running-operation",
                      "arguments": {"duration": 0.6, "steps": 5}, "progress": true});
    let report = clients(
        &gw.url(),
        json!({"clients": [
            {"mode": "legacy", "calls": [long.clone(), long.clone()]},
            {"mode": "2026-07-28", "calls": [long.clone()]},
            {"mode": "2026-07-28", "calls": [long]}
        ]}),
    )
    .await;
    for client in report["clients"].as_array().unwrap() {
        for call in client["calls"].as_array().unwrap() {
            let text = call["text"].as_str().unwrap_or_default();
            assert!(
                text.starts_with("Long running operation completed"),
                "{report}"
            );
            let seen: Vec<f64> = progress(call).into_iter().map(|(p, _)| p).collect();
            assert_eq!(seen, vec![1.0, 2.0, 3.0, 4.0, 5.0], "{report}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_cancellation_reaches_the_backend() {
    let py = py_backend("py", &["--forwarding-tools"]).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: py, url: '{}'}}\n",
        py.url
    )))
    .await;
    let slow = |tag: &str| json!({"tool": "py_slow", "arguments": {"tag": tag, "seconds": 60}, "abandon_after": 1.0});
    let report = clients(
        &gw.url(),
        json!({"clients": [
            {"mode": "legacy", "calls": [slow("from-legacy")]},
            {"mode": "2026-07-28", "calls": [slow("from-modern")]}
        ]}),
    )
    .await;
    for client in report["clients"].as_array().unwrap() {
        assert_eq!(client["calls"][0]["abandoned"], true, "{report}");
    }
    // Asked of the backend itself: both calls were cancelled there, long before the
    // 60 s they would otherwise run.
    vmcp_tests::await_backend_cancellations(&py.url, &["from-legacy", "from-modern"]).await;
}

/// `tools/list` and `resources/read` hints, as a raw Modern client sees them.
async fn hints(url: &str, token: Option<&str>) -> [(Value, Value); 2] {
    let list = modern_as(url, token, "tools/list", json!({})).await.body;
    let read = modern_as(
        url,
        token,
        "resources/read",
        json!({"uri": "py://slow/static"}),
    )
    .await
    .body;
    [list, read].map(|r| {
        (
            r["result"]["ttlMs"].clone(),
            r["result"]["cacheScope"].clone(),
        )
    })
}

/// The merged `ttlMs` is the 2000 ms source's (what is left of it), not the others'.
fn assert_fresher_than_2s(ttl: &Value) {
    let ttl = ttl.as_u64().unwrap_or_else(|| panic!("ttlMs {ttl}"));
    assert!(ttl > 0 && ttl <= 2000, "ttlMs {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_lists_carry_the_strictest_cache_hints_of_their_sources() {
    let slow = py_backend("slow", &["--ttl-ms", "9000", "--cache-scope", "public"]).await;
    let fast = py_backend("fast", &["--ttl-ms", "2000", "--cache-scope", "public"]).await;
    let private = py_backend(
        "private",
        &["--ttl-ms", "60000", "--cache-scope", "private"],
    )
    .await;
    let backends = |list: &[&vmcp_tests::Peer]| {
        let names = ["slow", "fast", "private"];
        list.iter()
            .zip(names)
            .map(|(p, n)| format!("  - {{name: {n}, url: '{}'}}\n", p.url))
            .collect::<String>()
    };

    // Two public sources: the list is public, as fresh as the fresher one; a read
    // keeps its backend's own hint.
    let gw = gateway(config(&format!("backends:\n{}", backends(&[&slow, &fast])))).await;
    let [list, read] = hints(&gw.url(), None).await;
    // rmcp reports what is left of a listing's ttl when it was taken, so at most 2000.
    assert_fresher_than_2s(&list.0);
    assert_eq!(list.1, "public");
    assert_eq!(read, (json!(9000), json!("public")));
    drop(gw);

    // One private source makes the merged list private.
    let gw = gateway(config(&format!(
        "backends:\n{}",
        backends(&[&slow, &fast, &private])
    )))
    .await;
    let [list, _] = hints(&gw.url(), None).await;
    assert_fresher_than_2s(&list.0);
    assert_eq!(list.1, "private");
    drop(gw);

    // Behind per-identity authorization every list and read is the caller's own view.
    let stacked = stacked_gateway(config(&format!(
        "backends:\n{}incomingAuth:\n  type: anonymous\n  authz:\n    type: cedar\n    policies:\n      - 'permit(principal, action, resource);'\n",
        backends(&[&slow, &fast])
    )))
    .await;
    let [list, read] = hints(&stacked.url(), None).await;
    assert_fresher_than_2s(&list.0);
    assert_eq!(list.1, "private");
    assert_eq!(read, (json!(9000), json!("private")));
}
