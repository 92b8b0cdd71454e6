//! What `vmcp serve` says and answers around a session's end and a backend's
//! failure, seen from outside: the real binary, its stderr, real clients.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};
use vmcp_tests::{free_port, py_client_with_stderr, wait_for_port};

const VMCP: &str = env!("CARGO_BIN_EXE_vmcp");

/// A `vmcp serve` whose stderr goes to a file; `RUST_LOG` is cleared so the
/// default filter is what is tested.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    async fn start(name: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("stderr.log");
        let port = free_port();
        let child = Command::new(VMCP)
            .arg("serve")
            .args(["--port", &port.to_string()])
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        wait_for_port(port).await;
        Self { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// SIGTERM, a graceful exit, and everything it logged.
    async fn terminate(mut self) -> String {
        let pid = self.child.id().unwrap();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("exits within 20s of SIGTERM")
            .unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert!(status.success(), "graceful exit, got {status}:\n{log}");
        log
    }
}

fn assert_no_error_line(log: &str) {
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "ERROR lines on a clean run:\n{log}");
    assert!(log.contains("vmcp stopped"), "{log}");
}

/// Initialize a Legacy session by hand; its id.
async fn legacy_session(http: &reqwest::Client, url: &str) -> String {
    let init = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "logs-test", "version": "0"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text().await;
    let initialized = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .unwrap();
    assert_eq!(initialized.status(), 202, "a notification is accepted");
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_end_cleanly_and_sigterm_with_a_client_logs_no_error() {
    let server = Server::start("legacy-end", &[]).await;
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
    let session = legacy_session(&http, &url).await;
    let deleted = http
        .delete(&url)
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(
        [200, 204].contains(&deleted.status().as_u16()),
        "DELETE answered {}",
        deleted.status()
    );
    let after = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 404, "the ended session is gone");

    // SIGTERM with a Legacy client's GET stream still open.
    let session = legacy_session(&http, &url).await;
    let stream = http
        .get(&url)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200, "GET stream opened");
    let log = server.terminate().await;
    drop(stream);
    assert_no_error_line(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_clients_logs_no_error_and_json_lines_are_json() {
    let log = Server::start("json", &["--log-format", "json"])
        .await
        .terminate()
        .await;
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

    let log = Server::start("text", &[]).await.terminate().await;
    assert_no_error_line(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_backend_is_one_warning_in_words_and_so_is_its_status() {
    // Nothing listens on a port that was just free: connection refused.
    let dead = free_port();
    let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-refused", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("vmcp.yaml");
    std::fs::write(
        &config,
        format!(
            "backends:\n  - {{name: ghost, url: 'http://127.0.0.1:{dead}/mcp'}}\n\
             operational:\n  failureHandling: {{healthCheckInterval: 200ms, statusReportingInterval: 200ms}}\n"
        ),
    )
    .unwrap();
    let server = Server::start("refused", &["-c", config.to_str().unwrap()]).await;

    // Wait for several retries, so "once" means something.
    let status_url = format!("http://127.0.0.1:{}/status", server.port);
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
    assert_eq!(ghost["last_error"], "connection refused", "{ghost}");

    let log = server.terminate().await;
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
        warnings[0].contains("ghost") && warnings[0].contains("connection refused"),
        "{log}"
    );
    for noise in ["reqwest", "hyper", "rmcp::", "Error {", "Os {"] {
        assert!(!log.contains(noise), "{noise:?} in the log:\n{log}");
    }
    assert_no_error_line(&log);
}
