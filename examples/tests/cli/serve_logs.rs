//! What `vmcp serve` says and answers around a session's end and a backend's
//! failure, seen from outside: the real binary, its stderr, real clients.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_tests::stacked::LegacySession;
use vmcp_tests::tls::{TestCa, serve_tls_on_loopback};
use vmcp_tests::{free_port, py_client_with_stderr};

use super::serve::{Serve, Server};

/// A `vmcp serve` whose stderr goes to a file; `RUST_LOG` is cleared so the
/// default filter is what is tested.
async fn start(name: &str, args: &[&str]) -> Server {
    let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Serve::new()
        .args(args)
        .env_remove("RUST_LOG")
        .stderr_to(dir.join("stderr.log"))
        .start()
        .await
}

/// SIGTERM, a graceful exit, and everything it logged.
async fn terminate(mut server: Server) -> String {
    let status = server.terminate(Duration::from_secs(20)).await;
    let log = server.logs();
    assert!(status.success(), "graceful exit, got {status}:\n{log}");
    log
}

fn assert_no_error_line(log: &str) {
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "ERROR lines on a clean run:\n{log}");
    assert!(log.contains("vmcp stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_end_cleanly_and_sigterm_with_a_client_logs_no_error() {
    let server = start("legacy-end", &[]).await;
    let url = server.url();

    // The Python SDK closes its session with DELETE and complains unless the answer
    // is 200, 204 or 405.
    let (report, stderr) =
        py_client_with_stderr(&url, "legacy", json!([{"op": "list_tools"}])).await;
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    assert!(
        !stderr.contains("termination failed"),
        "the SDK client saw its DELETE fail:\n{stderr}"
    );

    // The same by hand: DELETE ends the session, which is then unknown (404).
    let http = reqwest::Client::new();
    let session = LegacySession::open_with(&http, &url, None).await;
    let deleted = session.delete().await;
    assert!([200, 204].contains(&deleted), "DELETE answered {deleted}");
    let after = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session.id())
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 404, "the ended session is gone");

    // SIGTERM with a Legacy client's GET stream still open.
    let stream = LegacySession::open_with(&http, &url, None)
        .await
        .stream()
        .await;
    let log = terminate(server).await;
    drop(stream);
    assert_no_error_line(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_clients_logs_no_error_and_json_lines_are_json() {
    let log = terminate(start("json", &["--log-format", "json"]).await).await;
    assert_no_error_line(&log);
    let mut messages = Vec::new();
    for line in log.lines() {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{log}"));
        assert!(
            event["level"].is_string() && event["timestamp"].is_string(),
            "{line}"
        );
        messages.push(event["message"].as_str().unwrap_or_default().to_owned());
    }
    assert!(
        messages.iter().any(|m| m.starts_with("vmcp listening on")),
        "{log}"
    );

    let log = terminate(start("text", &[]).await).await;
    assert_no_error_line(&log);
}

/// A gateway whose one backend, `ghost` at `url`, cannot be reached: after several
/// retries `/status` says `reason` and the log has exactly one WARN naming the
/// backend with the same words, and no Rust noise.
async fn one_warning_in_words(label: &str, url: &str, reason: &str) {
    let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("vmcp.yaml");
    std::fs::write(
        &config,
        format!(
            "backends:\n  - {{name: ghost, url: '{url}'}}\n\
             operational:\n  failureHandling: {{healthCheckInterval: 200ms, statusReportingInterval: 200ms}}\n"
        ),
    )
    .unwrap();
    let server = start(label, &["-c", config.to_str().unwrap()]).await;

    // Wait for several retries, so "once" means something.
    let status_url = server.at("/status");
    let mut ghost = Value::Null;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let status: Value = reqwest::get(&status_url)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ghost = status["backends"][0].clone();
        if ghost["consecutive_failures"].as_u64().unwrap_or(0) >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // polling, not synchronising
    }
    assert!(
        ghost["consecutive_failures"].as_u64().unwrap_or(0) >= 4,
        "the backend was retried: {ghost}"
    );
    assert_eq!(ghost["name"], "ghost");
    assert_eq!(ghost["last_error"], reason, "{ghost}");

    let log = terminate(server).await;
    // Without OIDC, startup warns once that Legacy session ids are bearer secrets
    // (docs/security.md); every other warning is about the backend.
    let bearer = "treat session ids as bearer secrets";
    assert_eq!(log.matches(bearer).count(), 1, "{log}");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && !l.contains(bearer))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning for one state change:\n{log}"
    );
    assert!(
        warnings[0].contains("ghost") && warnings[0].contains(reason),
        "{log}"
    );
    for noise in [
        "reqwest",
        "hyper",
        "rmcp::",
        "Error {",
        "Os {",
        "BEGIN CERTIFICATE",
    ] {
        assert!(!log.contains(noise), "{noise:?} in the log:\n{log}");
    }
    assert_no_error_line(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_backend_is_one_warning_in_words_and_so_is_its_status() {
    // Nothing listens on a port that was just free: connection refused.
    let dead = free_port();
    one_warning_in_words(
        "refused",
        &format!("http://127.0.0.1:{dead}/mcp"),
        "connection refused",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_one_warning_in_words_and_so_is_its_status() {
    // An HTTPS backend whose certificate comes from a CA generated here, which the
    // gateway does not trust (no caBundlePath): the handshake fails on every retry.
    let ca = TestCa::generate("untrusted test CA");
    let cert = ca.server_cert("ghost");
    let router =
        axum::Router::new().route("/mcp", axum::routing::any(|| async { "never reached" }));
    let (addr, stop) = serve_tls_on_loopback(router, &cert).await;
    one_warning_in_words(
        "untrusted",
        &format!("https://{addr}/mcp"),
        "certificate not trusted: unknown issuer",
    )
    .await;
    stop.cancel();
}
