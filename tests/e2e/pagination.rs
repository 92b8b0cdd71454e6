//! Gateway-side pagination on the Modern edge (and the Legacy edge through a client).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_service::config::BackendConfig;
use vmcp_tests::{config, gateway, modern, py_client};

fn tool_names(result: &Value) -> Vec<String> {
    result["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn spec(name: &str, n: usize) -> DemoSpec {
    let tools: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    DemoSpec {
        tools,
        ..DemoSpec::new(name, &[])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_pages_survive_a_backend_joining_between_pages() {
    let a = spawn(spec("a", 4), 0).await.unwrap();
    let m = spawn(spec("m", 4), 0).await.unwrap();
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: a, url: '{}'}}\n  - {{name: m, url: '{}'}}\naggregation: {{pageSize: 3}}\n",
        a.url(),
        m.url()
    )))
    .await;

    let (status, first) = modern(&gw.url(), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["result"]["resultType"], "complete");
    assert_eq!(first["result"]["cacheScope"], "private");
    assert_eq!(first["result"]["ttlMs"], 0);
    let mut seen = tool_names(&first);
    assert_eq!(seen, ["a_t0", "a_t1", "a_t2"]);
    let mut cursor = first["result"]["nextCursor"].as_str().unwrap().to_owned();

    // Two backends join: "0first" sorts before the cursor, "z" after it.
    let early = spawn(spec("0first", 2), 0).await.unwrap();
    let late = spawn(spec("z", 2), 0).await.unwrap();
    for (name, url) in [("0first", early.url()), ("z", late.url())] {
        gw.vmcp
            .registry()
            .upsert(BackendConfig {
                name: name.into(),
                url,
                ..Default::default()
            })
            .await;
    }
    let mut catalog_ready = false;
    for _ in 0..200 {
        if gw.vmcp.aggregator().catalog().tools().len() == 12 {
            catalog_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(catalog_ready, "the joined backends reach the catalog");

    let mut pages = 1;
    loop {
        let (status, page) = modern(&gw.url(), "tools/list", json!({"cursor": cursor})).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let names = tool_names(&page);
        assert!(names.len() <= 3, "page size honoured: {names:?}");
        seen.extend(names);
        match page["result"].get("nextCursor") {
            Some(Value::String(next)) => cursor = next.clone(),
            None => break,
            Some(other) => panic!("nextCursor must be a string or absent, got {other}"),
        }
        assert!(pages < 20, "pagination terminates");
    }
    let expected: Vec<String> = [
        "a_t0", "a_t1", "a_t2", "a_t3", "m_t0", "m_t1", "m_t2", "m_t3", "z_t0", "z_t1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        seen, expected,
        "every item after the cursor exactly once, the late joiner included"
    );
    let unique: BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no duplicates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cursors_are_invalid_params() {
    let a = spawn(
        DemoSpec {
            prompts: vec!["p1".into(), "p2".into()],
            ..spec("a", 5)
        },
        0,
    )
    .await
    .unwrap();
    let gw = gateway(config(&format!(
        "backends: [{{name: a, url: '{}'}}]\naggregation: {{pageSize: 2}}\n",
        a.url()
    )))
    .await;
    let (_, first) = modern(&gw.url(), "tools/list", json!({})).await;
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_owned();
    let oversized = "A".repeat(10_000);
    for (method, bad) in [
        ("tools/list", "not a cursor!"),
        ("tools/list", "e30"),
        ("tools/list", oversized.as_str()),
        ("prompts/list", cursor.as_str()),
    ] {
        let (_, response) = modern(&gw.url(), method, json!({"cursor": bad})).await;
        assert_eq!(
            response["error"]["code"], -32602,
            "{method} {bad:.20}: {response}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_gateway_pages_on_both_revisions() {
    let a = spawn(spec("a", 7), 0).await.unwrap();
    let gw = gateway(config(&format!(
        "backends: [{{name: a, url: '{}'}}]\naggregation: {{pageSize: 3}}\n",
        a.url()
    )))
    .await;
    for mode in ["legacy", "2026-07-28"] {
        let report = py_client(&gw.url(), mode, json!([{"op": "list_tools"}])).await;
        let result = &report["results"][0];
        assert_eq!(result["pages"], 3, "{mode}: {result}");
        assert_eq!(result["tools"].as_array().unwrap().len(), 7, "{mode}");
    }
}
