//! The optimizer's semantic tier end to end, with a real small embedding model
//! (all-MiniLM-L6-v2 in tests/peers/py_embed.py) on an ephemeral port: a paraphrase
//! keyword search misses is found by the hybrid ranking (both revisions, both
//! endpoint protocols, `embeddingHeaders` sent, `semanticDistanceThreshold`
//! applied); the endpoint killed → keyword results, exactly one WARN and a counted
//! fallback, then hybrid again once it is back; a tool a backend adds is found by
//! the hybrid ranking without a restart, and only it is embedded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoList, DemoSpec, spawn};
use vmcp_tests::embed::{py_embed_on, seen};
use vmcp_tests::logs::Captured;
use vmcp_tests::stacked::{StackedGateway, modern_as, stacked_gateway};
use vmcp_tests::{EverythingMode, config, everything, py_client};

const MODES: [&str; 2] = ["legacy", "2026-07-28"];
/// No word of it is in server-everything's tools; its meaning is the gzip tool's.
const PARAPHRASE: &str = "zip a directory";
const GZIP: &str = "everything_gzip-file-as-resource";
/// The WARN of an outage (semantic.rs).
const OUTAGE_WARN: &str = "find_tool answers with keyword search until it is back";

fn find(description: &str) -> Value {
    json!({"op": "call_tool", "name": "find_tool",
           "arguments": {"tool_description": description}})
}

fn names(structured: &Value) -> Vec<String> {
    structured["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("find_tool result without tools: {structured}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `find_tool` over the Modern revision, without a session: the names found.
async fn search(gw: &StackedGateway, description: &str) -> Vec<String> {
    let reply = modern_as(
        &gw.url(),
        None,
        "tools/call",
        json!({"name": "find_tool", "arguments": {"tool_description": description}}),
    )
    .await;
    names(&reply.body["result"]["structuredContent"])
}

/// Search `description` until `done` holds for the names found (within `within`).
async fn search_until(
    gw: &StackedGateway,
    description: &str,
    within: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let found = search(gw, description).await;
        if done(&found) || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn yaml(backends: &str, optimizer: &str) -> String {
    format!(
        "name: eng\nbackends:\n{backends}telemetry: {{enablePrometheusMetricsPath: true}}\n\
         optimizer:\n  maxToolsToReturn: 5\n{optimizer}"
    )
}

async fn fallbacks(gw: &StackedGateway) -> u64 {
    let text = reqwest::get(gw.at("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("vmcp_optimizer_keyword_fallbacks_total "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_finds_a_paraphrase_keyword_search_misses() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let embed = py_embed_on(0, &[]).await;
    let backends = format!("  - {{name: everything, url: '{}'}}\n", ev.url);
    let keyword = stacked_gateway(config(&yaml(&backends, ""))).await;
    // OpenAI's protocol, with a header; a threshold that keeps only close matches.
    let hybrid = stacked_gateway(config(&yaml(
        &backends,
        &format!(
            "  embeddingService: '{}'\n  embeddingProvider: openai\n  embeddingModel: all-MiniLM-L6-v2\n  \
             embeddingHeaders: {{X-Embed-Key: k-123}}\n  embeddingServiceTimeout: 20s\n  \
             semanticDistanceThreshold: '0.75'\n",
            embed.url
        ),
    )))
    .await;

    assert!(
        !search(&keyword, PARAPHRASE)
            .await
            .contains(&GZIP.to_owned()),
        "keyword search does not find the paraphrase"
    );
    // The tools are embedded in the background after the first search.
    let found = search_until(&hybrid, PARAPHRASE, Duration::from_secs(60), |f| {
        !f.is_empty()
    })
    .await;
    assert_eq!(found, [GZIP], "hybrid, the threshold drops the far tools");
    for mode in MODES {
        let report = py_client(
            &hybrid.url(),
            mode,
            json!([find(PARAPHRASE), find("compressing files")]),
        )
        .await;
        let r = &report["results"];
        assert_eq!(names(&r[0]["structured"]), [GZIP], "{mode}: {}", r[0]);
        // A keyword match stays first.
        assert_eq!(names(&r[1]["structured"])[0], GZIP, "{mode}: {}", r[1]);
    }
    let seen = seen(&embed).await;
    assert_eq!(seen["headers"]["x-embed-key"], "k-123", "{seen}");
    assert_eq!(fallbacks(&hybrid).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_degrades_to_keyword_with_one_warn_then_hybrid_again() {
    let logs = Captured::install();
    let ev = everything(EverythingMode::StreamableHttp).await;
    let mut embed = py_embed_on(0, &[]).await;
    let port = embed.port;
    let gw = stacked_gateway(config(&yaml(
        &format!("  - {{name: everything, url: '{}'}}\n", ev.url),
        &format!(
            "  embeddingService: '{}'\n  embeddingProvider: tei\n  embeddingServiceTimeout: 20s\n",
            embed.url
        ),
    )))
    .await;
    let hybrid_found = |f: &[String]| f.first().is_some_and(|n| n == GZIP);
    let found = search_until(&gw, PARAPHRASE, Duration::from_secs(60), hybrid_found).await;
    assert_eq!(found.first().map(String::as_str), Some(GZIP), "{found:?}");

    // (A loaded machine may have timed out the first embedding: that was an outage.)
    let before = logs.lines_with(OUTAGE_WARN);
    embed.child.kill().await.unwrap();
    // Searches for longer than the retry pause (5 s): the dead endpoint is tried
    // more than once, and every answer is the keyword tier's.
    let down = Instant::now();
    let mut searches = 0;
    while down.elapsed() < Duration::from_secs(7) {
        assert!(search(&gw, PARAPHRASE).await.is_empty(), "keyword results");
        assert_eq!(search(&gw, "compressing files").await[0], GZIP);
        searches += 2;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        logs.lines_with(OUTAGE_WARN) - before,
        1,
        "one WARN per outage: {}",
        logs.text()
    );
    let counted = fallbacks(&gw).await;
    assert!(
        counted >= 2 && counted <= searches,
        "{counted} of {searches}"
    );

    let _embed = py_embed_on(port, &[]).await;
    let found = search_until(&gw, PARAPHRASE, Duration::from_secs(30), hybrid_found).await;
    assert_eq!(
        found.first().map(String::as_str),
        Some(GZIP),
        "hybrid again"
    );
    assert_eq!(logs.lines_with(OUTAGE_WARN) - before, 1, "{}", logs.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_times_out_into_keyword_results() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let embed = py_embed_on(0, &["--delay-ms", "3000"]).await;
    let gw = stacked_gateway(config(&yaml(
        &format!("  - {{name: everything, url: '{}'}}\n", ev.url),
        &format!(
            "  embeddingService: '{}'\n  embeddingServiceTimeout: 500ms\n",
            embed.url
        ),
    )))
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while fallbacks(&gw).await == 0 && Instant::now() < deadline {
        // Keyword results meanwhile, each within the timeout's reach.
        let started = Instant::now();
        assert_eq!(search(&gw, "compressing files").await[0], GZIP);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "bounded by the timeout"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        fallbacks(&gw).await > 0,
        "the timeout counted as a fallback"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_backend_adds_is_found_by_hybrid_and_only_it_is_embedded() {
    let gh = spawn(DemoSpec::new("gh", &["echo", "add", "upper"]), 0)
        .await
        .unwrap();
    let embed = py_embed_on(0, &[]).await;
    let gw = stacked_gateway(config(&yaml(
        &format!("  - {{name: gh, url: '{}'}}\n", gh.url()),
        &format!("  embeddingService: '{}'\n", embed.url),
    )))
    .await;
    // No keyword matches it: results mean the hybrid ranking is on.
    let before = search_until(&gw, PARAPHRASE, Duration::from_secs(60), |f| !f.is_empty()).await;
    assert!(!before.is_empty() && !before.contains(&"gh_archive_folder".to_owned()));

    gh.control()
        .change(DemoList::Tools, |spec| {
            spec.tools.push("archive_folder".into())
        })
        .await;
    let after = search_until(&gw, PARAPHRASE, Duration::from_secs(60), |f| {
        f.first().is_some_and(|n| n == "gh_archive_folder")
    })
    .await;
    assert_eq!(after[0], "gh_archive_folder", "{after:?}");

    // Each tool's text was embedded once: the catalog change embedded the new one.
    let texts: Vec<String> = seen(&embed).await["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    for tool in ["gh echo", "gh add", "gh upper", "gh archive folder"] {
        let times = texts
            .iter()
            .filter(|t| t.starts_with(&format!("{tool}. ")))
            .count();
        assert_eq!(times, 1, "{tool}: {texts:?}");
    }
}
