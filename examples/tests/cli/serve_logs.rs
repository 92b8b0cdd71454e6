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

/// What a hostile client puts in names, ids and methods: a forged log line with a
/// carriage return, ANSI colours and a terminal title sequence.
const FORGED: &str =
    "x\r\n2026-12-04T00:00:00.000000Z  INFO vmcp: FORGED \x1b[31mred\x1b]0;title\x07";

/// POST `method` with `params` and `id` as a Legacy session's request (`session`
/// `Some`) or a Modern one; the body is read to its end, so the audit line is written.
async fn hostile_post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    id: &str,
    method: &str,
    mut params: Value,
) -> u16 {
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    match session {
        Some(session) => {
            request = request
                .header("MCP-Protocol-Version", "2025-11-25")
                .header("Mcp-Session-Id", session);
        }
        None => {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "1"}
            });
            // The header a Modern request must carry: printable, so not the forged
            // name itself (rmcp refuses the mismatch, which is logged and audited too).
            request = request
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "x".repeat(method.len().min(64)))
                .header("Mcp-Name", "y".repeat(64));
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = request.json(&body).send().await.expect("POST");
    let status = response.status().as_u16();
    let _ = response.bytes().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_names_ids_and_methods_neither_forge_nor_inflate_the_log_or_the_audit() {
    let demo = vmcp_examples::demo::spawn(
        vmcp_examples::demo::DemoSpec {
            prompts: vec!["greet".into()],
            resources: vec!["demo://readme".into()],
            ..vmcp_examples::demo::DemoSpec::new("gh", &["echo"])
        },
        0,
    )
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-hostile", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, audit) = (dir.join("stderr.log"), dir.join("audit.log"));
    let _ = std::fs::remove_file(&audit);
    let config = dir.join("vmcp.yaml");
    std::fs::write(
        &config,
        format!(
            "backends: [{{name: gh, url: '{}'}}]\naudit: {{logFile: '{}'}}\n",
            demo.url(),
            audit.display()
        ),
    )
    .unwrap();
    // `info` lets rmcp's own service lines through (the default filter has them
    // off): they write the request id as the client sent it.
    let server = Serve::new()
        .config(&config)
        .env("RUST_LOG", "info")
        .stderr_to(&log)
        .start()
        .await;
    let url = server.url();
    let http = reqwest::Client::new();
    let session = LegacySession::open_with(&http, &url, None).await;
    let big = format!("{FORGED}{}", "y".repeat(1 << 20));
    let argument = json!({"name": "a", "value": "b"});
    let named = [
        ("tools/call", json!({"name": big})),
        ("prompts/get", json!({"name": big})),
        ("resources/read", json!({"uri": big})),
        ("resources/subscribe", json!({"uri": big})),
        ("resources/unsubscribe", json!({"uri": big})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": big}, "argument": argument}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": big}, "argument": argument}),
        ),
    ];
    let unknown_method = format!("nope/{big}");
    let size = || {
        let len = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        len(&log) + len(&audit)
    };
    for modern in [false, true] {
        let revision = if modern { "2026-07-28" } else { "2025-11-25" };
        let session = (!modern).then(|| session.id());
        // subscribe/unsubscribe are Legacy methods; a Modern client's are refused.
        let cases = named
            .iter()
            .map(|(method, params)| (*method, params.clone(), FORGED))
            .chain([(unknown_method.as_str(), json!({}), big.as_str())]);
        for (method, params, id) in cases {
            let before = size();
            for _ in 0..5 {
                let status = hostile_post(&http, &url, session, id, method, params.clone()).await;
                assert!(status < 500, "{revision} {:.30}: HTTP {status}", method);
            }
            let grown = size() - before;
            assert!(
                grown < 20_000,
                "{revision} {:.30}: 5 calls with 1 MiB names added {grown} bytes of log and audit",
                method
            );
        }
    }
    let _ = session.delete().await;
    let text = terminate(server).await;

    // Every line is one event of vmcp's: nothing the client sent starts a line, and
    // no control character of the client's reaches the file (colours are off: the
    // log is not a terminal).
    assert!(
        !text.contains(['\r', '\x1b', '\x07']),
        "a control character in the log"
    );
    for line in text.lines() {
        assert!(
            line.starts_with("20") && !line.starts_with("2026-12-04T00:00:00.000000Z"),
            "a forged line: {line:.300}"
        );
    }
    // rmcp's line with the id was written, escaped and cut.
    assert!(
        text.contains(r"id=x\r\n2026-12-04T00:00:00.000000Z  INFO vmcp: FORGED \u{1b}[31mred\u{1b}]0;title\u{7}"),
        "{text:.3000}"
    );
    assert!(text.lines().all(|l| l.len() < 12_000), "a long line");

    // The audit names the target cut, with its length.
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let length = big.len() as u64;
    for method in [
        "tools/call",
        "prompts/get",
        "resources/read",
        "resources/subscribe",
        "completion/complete",
    ] {
        assert!(
            records.iter().any(|r| r["target"]["method"] == method
                && r["target"]["name_bytes"] == length
                && r["target"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(FORGED) && n.chars().count() == 256)),
            "{method}: no record with the name cut to 256 characters and its length"
        );
    }
    assert!(
        records
            .iter()
            .any(|r| r["target"]["method_bytes"] == unknown_method.len() as u64),
        "the unknown method is cut with its length"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Poll the server's log until `done` holds (bounded).
async fn wait_log(server: &Server, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&server.logs()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}:\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // polling, not synchronising
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_and_a_stdio_exit_are_one_line_each_in_words() {
    let py = vmcp_tests::py_backend("py", &["--forwarding-tools"]).await;
    let (node, entry) = vmcp_tests::everything_command();
    let dir = std::env::temp_dir().join(format!("vmcp-logs-{}-abandon", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("vmcp.yaml");
    std::fs::write(
        &config,
        format!(
            "backends:\n  - {{name: py, url: '{}'}}\n  - {{name: ev, transport: stdio, command: '{}', args: ['{}', stdio]}}\n",
            py.url,
            node.display(),
            entry.display()
        ),
    )
    .unwrap();
    let server = start("abandon", &["-c", config.to_str().unwrap()]).await;
    let url = server.url();
    let http = reqwest::Client::new();

    // A Legacy call on rmcp's path (it wants progress), abandoned twice: by
    // `notifications/cancelled`, and by ending the session while it runs.
    for (id, how) in [(7, "cancel"), (8, "delete")] {
        let session = LegacySession::open_with(&http, &url, None).await;
        let call = http
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", session.id())
            .json(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "py_slow", "arguments": {"tag": how, "seconds": 30},
                "_meta": {"progressToken": how}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(call.status(), 200);
        let abandoned = move |log: &str| log.matches("the caller cancelled it").count() >= id - 6;
        if how == "cancel" {
            let sent = http
                .post(&url)
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2025-11-25")
                .header("Mcp-Session-Id", session.id())
                .json(
                    &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "bored"}}),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(sent.status(), 202);
        } else {
            assert!([200, 204].contains(&session.delete().await));
        }
        wait_log(&server, "the abandoned call is logged", abandoned).await;
        drop(call);
    }

    // The stdio child exits (killed): it is restarted.
    let status = || async {
        let status: Value = reqwest::get(server.at("/status"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        status["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == "ev")
            .cloned()
            .unwrap()
    };
    let pid = status().await["process"]["pid"].as_u64().expect("ev runs");
    assert!(
        std::process::Command::new("kill")
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ev = status().await;
        if ev["process"]["restarts"] == 1 && ev["health"] == "healthy" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "ev came back: {ev}");
        tokio::time::sleep(Duration::from_millis(100)).await; // polling, not synchronising
    }
    let log = terminate(server).await;

    let cancelled: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the caller cancelled it"))
        .collect();
    assert_eq!(cancelled.len(), 2, "one line per abandoned call:\n{log}");
    for line in &cancelled {
        assert!(
            line.contains(" INFO ") && line.contains("tools/call py_slow"),
            "{line}"
        );
    }
    let bearer = "treat session ids as bearer secrets";
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && !l.contains(bearer))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning for the exit:\n{log}");
    assert!(
        warnings[0].contains(r#"stdio backend "ev" exited after"#),
        "{log}"
    );
    for noise in ["ErrorData", "rmcp::", "during drain", "Transport closed"] {
        assert!(!log.contains(noise), "{noise:?} in the log:\n{log}");
    }
    assert_no_error_line(&log);
}
