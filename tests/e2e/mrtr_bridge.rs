//! A 2026-07-28 backend's `input_required` (MRTR) through the gateway, to both client
//! revisions: a Legacy caller is asked over its own session by the gateway, which
//! retries the backend call with the answers; a Modern caller gets `input_required`
//! unchanged and retries itself. Real Python SDK clients (`tests/peers/py_asked.py`,
//! their elicitation, sampling and roots callbacks) through the gateway to the conformance
//! fixture, an rmcp server reached on 2026-07-28, served over loopback HTTP.
//!
//! Every answer carries the answering client's name, and the backend's results quote
//! the answer they received, so "the answer reached the backend" is read from what the
//! backend returns. The Python SDK backend (`py_backend.py --asking-tools`, its
//! resolvers) is a second, independent Modern backend for the same round trips.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vmcp_conformance_fixture::RunningFixture;
use vmcp_tests::{Gateway, config, gateway, py_backend};

/// The conformance fixture on loopback and a gateway fronting it with bare names.
async fn fixture_behind_gateway(extra: &str) -> (RunningFixture, Gateway) {
    let fixture = vmcp_conformance_fixture::serve(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("fixture serves");
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: fixture, url: '{}'}}\naggregation:\n  conflictResolution: priority\n  conflictResolutionConfig: {{priorityOrder: [fixture]}}\n{extra}",
        fixture.url()
    )))
    .await;
    (fixture, gw)
}

/// Run `tests/peers/py_asked.py` against `url` with `plan`.
async fn clients(url: &str, plan: Value) -> Vec<Value> {
    let out = vmcp_tests::run_py_plan("py_asked.py", url, &plan).await;
    out["clients"].as_array().expect("clients").clone()
}

/// The texts of a client's calls (panicking on a call that failed).
fn texts(client: &Value) -> Vec<String> {
    client["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            c["text"]
                .as_str()
                .unwrap_or_else(|| panic!("call failed: {c}"))
                .to_owned()
        })
        .collect()
}

/// `(method, text)` of every question a client was asked.
fn asked(client: &Value) -> Vec<(String, String)> {
    client["asked"]
        .as_array()
        .expect("asked")
        .iter()
        .map(|q| {
            (
                q["method"].as_str().unwrap_or("?").to_owned(),
                q["text"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

fn q(method: &str, text: &str) -> (String, String) {
    (method.to_owned(), text.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_caller_answers_a_modern_backends_elicitation_sampling_and_roots() {
    let (_fixture, gw) = fixture_behind_gateway("").await;
    let out = clients(
        &gw.url(),
        json!({"clients": [{"mode": "legacy", "name": "ann", "answers": ["elicitation", "sampling", "roots"],
        "calls": [
            {"tool": "test_sampling", "arguments": {"prompt": "haiku please"}},
            {"tool": "test_elicitation", "arguments": {"message": "your name?"}},
            {"tool": "test_input_required_result_list_roots"},
            {"prompt": "test_input_required_result_prompt"},
            // Two rounds, the second asked after the first answer, requestState
            // (HMAC-sealed by the backend) carried between them by the gateway.
            {"tool": "test_input_required_result_multi_round"}
        ]}]}),
    )
    .await;
    let ann = &out[0];
    assert_eq!(ann["protocol"], "2025-11-25", "{ann}");
    let results = texts(ann);
    assert_eq!(results[0], "LLM response: ann sampled: haiku please");
    assert_eq!(
        results[1],
        r#"User response: action=accept, content={"response":"ann says yes"}"#
    );
    assert_eq!(results[2], "Found 1 root(s)");
    assert_eq!(results[3], "Prompt with context: ann says yes");
    assert_eq!(
        results[4], "Multi-round complete for ann says yes who likes ann says yes",
        "the backend completed after the gateway's second retry"
    );
    assert_eq!(
        asked(ann),
        vec![
            q("sampling/createMessage", "haiku please"),
            q("elicitation/create", "your name?"),
            q("roots/list", ""),
            q("elicitation/create", "What context should the prompt use?"),
            q("elicitation/create", "Step 1: What is your name?"),
            q("elicitation/create", "Step 2: What is your favorite color?"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_legacy_callers_are_asked_only_their_own_questions() {
    let (_fixture, gw) = fixture_behind_gateway("").await;
    let plan = |name: &str| {
        let calls: Vec<Value> = (0..3)
            .flat_map(|i| {
                [
                    json!({"tool": "test_elicitation", "arguments": {"message": format!("{name} question {i}")}}),
                    json!({"tool": "test_sampling", "arguments": {"prompt": format!("{name} prompt {i}")}}),
                ]
            })
            .collect();
        json!({"mode": "legacy", "name": name, "answers": ["elicitation", "sampling"], "calls": calls})
    };
    let out = clients(&gw.url(), json!({"clients": [plan("amy"), plan("bob")]})).await;
    for (client, name, other) in [(&out[0], "amy", "bob"), (&out[1], "bob", "amy")] {
        let mut expected_asked = Vec::new();
        let mut expected_results = Vec::new();
        for i in 0..3 {
            expected_asked.push(q("elicitation/create", &format!("{name} question {i}")));
            expected_asked.push(q("sampling/createMessage", &format!("{name} prompt {i}")));
            expected_results.push(format!(
                r#"User response: action=accept, content={{"response":"{name} says yes"}}"#
            ));
            expected_results.push(format!("LLM response: {name} sampled: {name} prompt {i}"));
        }
        assert_eq!(
            asked(client),
            expected_asked,
            "{name} was asked {other}'s questions?"
        );
        assert_eq!(
            texts(client),
            expected_results,
            "{name}'s answers reached its calls"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_caller_gets_input_required_through_and_answers_it_itself() {
    let (_fixture, gw) = fixture_behind_gateway("").await;
    let out = clients(
        &gw.url(),
        json!({"clients": [{"mode": "2026-07-28", "name": "max", "answers": ["elicitation", "sampling"],
            "calls": [
                {"tool": "test_sampling", "arguments": {"prompt": "a limerick"}},
                {"tool": "test_elicitation", "arguments": {"message": "ok?"}},
                {"tool": "test_input_required_result_multi_round"}
            ]}]}),
    )
    .await;
    let max = &out[0];
    assert_eq!(max["protocol"], "2026-07-28", "{max}");
    let results = texts(max);
    assert_eq!(results[0], "LLM response: max sampled: a limerick");
    assert_eq!(
        results[1],
        r#"User response: action=accept, content={"response":"max says yes"}"#
    );
    // The backend's sealed requestState came back to it untouched across two rounds.
    assert!(
        results[2].starts_with("Multi-round complete"),
        "{}",
        results[2]
    );
    assert_eq!(asked(max).len(), 4, "{max}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_caller_is_never_asked_for_what_it_did_not_declare() {
    let (_fixture, gw) = fixture_behind_gateway("").await;
    let out = clients(
        &gw.url(),
        json!({"clients": [{"mode": "legacy", "name": "eve", "answers": ["elicitation"],
        "calls": [
            // The hop declares eve's capabilities (elicitation only), so the backend
            // does not ask for sampling (SEP-2322) and says so itself.
            {"tool": "test_sampling", "arguments": {"prompt": "x"}},
            // This one asks for sampling whatever was declared: the gateway refuses
            // to ask eve and ends the call with an error naming the capability.
            {"tool": "test_input_required_result_sampling"}
        ]}]}),
    )
    .await;
    let eve = &out[0];
    let calls = eve["calls"].as_array().expect("calls");
    let first = calls[0]["text"].as_str().expect("a result");
    assert!(first.starts_with("Sampling not supported"), "{first}");
    let error = calls[1]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{eve}"));
    assert!(error.contains("did not declare the `sampling`"), "{error}");
    assert!(asked(eve).is_empty(), "{eve}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_caller_that_never_answers_ends_within_the_call_timeout() {
    let (_fixture, gw) = fixture_behind_gateway("operational:\n  timeouts: {default: 3s}\n").await;
    let started = Instant::now();
    let out = clients(
        &gw.url(),
        json!({"clients": [{"mode": "legacy", "name": "sam", "answers": ["elicitation"], "stall": true,
            "calls": [{"tool": "test_elicitation", "arguments": {"message": "hello?"}}]}]}),
    )
    .await;
    let elapsed = started.elapsed();
    let sam = &out[0];
    assert_eq!(asked(sam), vec![q("elicitation/create", "hello?")]);
    let error = sam["calls"][0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{sam}"));
    assert!(error.contains("did not answer"), "{error}");
    // 3 s budget; generous bound for a loaded machine, well under the client's own 30 s.
    assert!(elapsed < Duration::from_secs(25), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_backend_gets_both_revisions_answers() {
    let py = py_backend("pyb", &["--asking-tools"]).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: pyb, url: '{}'}}\naggregation:\n  conflictResolution: priority\n  conflictResolutionConfig: {{priorityOrder: [pyb]}}\n",
        py.url
    )))
    .await;
    let plan = |mode: &str, name: &str| {
        json!({"mode": mode, "name": name, "answers": ["elicitation", "sampling", "roots"], "calls": [
            {"tool": "sample", "arguments": {"prompt": format!("{name} prompt")}},
            {"tool": "ask", "arguments": {"question": format!("{name} question")}},
            {"tool": "roots"}
        ]})
    };
    let out = clients(
        &gw.url(),
        json!({"clients": [plan("legacy", "leo"), plan("2026-07-28", "mia")]}),
    )
    .await;
    for (client, protocol, name) in [
        (&out[0], "2025-11-25", "leo"),
        (&out[1], "2026-07-28", "mia"),
    ] {
        assert_eq!(client["protocol"], protocol, "{client}");
        assert_eq!(
            texts(client),
            vec![
                format!("pyb got: {name} sampled: {name} prompt"),
                format!("pyb heard: {name} says yes"),
                format!("pyb sees: file:///{name}"),
            ]
        );
        assert_eq!(
            asked(client),
            vec![
                q("sampling/createMessage", &format!("{name} prompt")),
                q("elicitation/create", &format!("{name} question")),
                q("roots/list", ""),
            ]
        );
    }
}
