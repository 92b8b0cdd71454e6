//! The audit log end to end: one JSON line per outcome (allowed, denied by the gate,
//! refused by authentication), with the caller, target and backend, and no token text.

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{modern_as, stacked_gateway};
use vmcp_tests::{config, py_backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_per_outcome_without_secrets() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let yaml = format!(
        r#"
name: eng
backends: [{{name: gh, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
  authz:
    type: cedar
    policies: ['permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");']
audit:
  component: vmcp-tests
  includeRequestData: true
  logFile: '{}'
"#,
        gh.url(),
        idp.issuer,
        log.display()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let url = gw.url();
    let token = key.sign(&idp.claims("alice", json!({"email": "alice@example.com"})));

    let ok = modern_as(
        &url,
        Some(&token),
        "tools/call",
        json!({"name": "gh_echo", "arguments": {"text": "hi", "api_token": "s3cr3t"}}),
    )
    .await;
    assert_eq!(ok.status, 200);
    let denied = modern_as(
        &url,
        Some(&token),
        "tools/call",
        json!({"name": "gh_add", "arguments": {"a": 1, "b": 2}}),
    )
    .await;
    assert_eq!(denied.status, 403);
    let anonymous = modern_as(&url, None, "tools/list", json!({})).await;
    assert_eq!(anonymous.status, 401);
    let bad = modern_as(&url, Some("garbage.token.value"), "tools/list", json!({})).await;
    assert_eq!(bad.status, 401);

    // The bodies were read to their end above, so every line is written.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        !text.contains(&token),
        "the bearer token never reaches the log"
    );
    assert!(!text.contains("garbage.token.value"));
    assert!(
        !text.contains("s3cr3t"),
        "secret-looking arguments are redacted"
    );

    let allowed = &lines[0];
    assert_eq!(allowed["type"], "mcp_tool_call");
    assert_eq!(allowed["outcome"], "success");
    assert_eq!(allowed["component"], "vmcp-tests");
    assert_eq!(allowed["subjects"]["user_id"], "alice");
    assert_eq!(allowed["subjects"]["user"], "alice@example.com");
    assert_eq!(allowed["subjects"]["client_name"], "vmcp-tests");
    assert_eq!(allowed["subjects"]["client_version"], "1.2");
    assert_eq!(
        allowed["target"],
        json!({"endpoint": "/mcp", "method": "tools/call", "type": "tool", "name": "gh_echo", "backend": "gh"})
    );
    assert_eq!(allowed["metadata"]["transport"], "streamable-http");
    assert_eq!(allowed["metadata"]["protocol_version"], "2026-07-28");
    assert_eq!(allowed["metadata"]["status"], 200);
    assert!(allowed["metadata"]["response_size_bytes"].as_u64().unwrap() > 0);
    assert!(allowed["metadata"]["duration_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(allowed["data"]["request"]["arguments"]["text"], "hi");
    assert_eq!(
        allowed["data"]["request"]["arguments"]["api_token"],
        "[redacted]"
    );
    assert!(
        allowed["audit_id"]
            .as_str()
            .is_some_and(|id| id.len() == 36)
    );
    assert!(
        allowed["logged_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    let gate = &lines[1];
    assert_eq!(
        (gate["type"].as_str(), gate["outcome"].as_str()),
        (Some("mcp_tool_call"), Some("denied"))
    );
    assert_eq!(gate["target"]["name"], "gh_add");
    assert_eq!(gate["metadata"]["status"], 403);

    for unauthenticated in &lines[2..] {
        assert_eq!(unauthenticated["outcome"], "denied");
        assert_eq!(unauthenticated["metadata"]["status"], 401);
        assert!(unauthenticated["subjects"].as_object().unwrap().is_empty());
    }
    let ids: std::collections::BTreeSet<_> =
        lines.iter().map(|l| l["audit_id"].to_string()).collect();
    assert_eq!(ids.len(), 4, "audit ids are unique");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call its caller cancels is audited as `cancelled`: a Legacy caller's
/// `notifications/cancelled`, and a Modern caller closing its request. Each with and
/// without a progress token (the edge's fast path and the handler's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_audited_as_cancelled_on_both_revisions() {
    let py = py_backend("py", &["--forwarding-tools"]).await;
    let dir = std::env::temp_dir().join(format!("vmcp-audit-cancel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let yaml = format!(
        "backends: [{{name: py, url: '{}'}}]\naudit: {{logFile: '{}', eventTypes: [mcp_tool_call], includeRequestData: true}}\n",
        py.url,
        log.display()
    );
    let gw = stacked_gateway(config(&yaml)).await;
    let slow = |tag: &str, progress: bool| {
        json!({"tool": "py_slow", "arguments": {"tag": tag, "seconds": 60},
               "abandon_after": 1.0, "progress": progress})
    };
    let report = vmcp_tests::run_py_plan(
        "py_forwarding.py",
        &gw.url(),
        &json!({"clients": [
            {"mode": "legacy", "calls": [slow("legacy-plain", false), slow("legacy-progress", true)]},
            {"mode": "2026-07-28", "calls": [slow("modern-plain", false), slow("modern-progress", true)]}
        ]}),
    )
    .await;
    for client in report["clients"].as_array().unwrap() {
        for call in client["calls"].as_array().unwrap() {
            assert_eq!(call["abandoned"], true, "{report}");
        }
    }
    // A cancelled call's line is written when the gateway stops it, which follows
    // the client's cancellation asynchronously: wait (bounded) for all four.
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..200 {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l: &Value| l["target"]["name"] == "py_slow")
            .collect();
        if lines.len() >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let mut seen: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["metadata"]["protocol_version"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned(),
                l["outcome"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    seen.sort();
    let expected = |revision: &str| (revision.to_owned(), "cancelled".to_owned());
    assert_eq!(
        seen,
        [
            expected("2025-11-25"),
            expected("2025-11-25"),
            expected("2026-07-28"),
            expected("2026-07-28")
        ],
        "{lines:#?}"
    );
    for line in &lines {
        assert_eq!(line["target"]["backend"], "py", "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
