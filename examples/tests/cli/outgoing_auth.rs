//! `outgoingAuth` end to end with the bundled server as a real process: a header
//! injected from an environment variable reaches a real backend (the Python SDK
//! backend echoing digests of its request headers) on both revisions, and the value appears
//! nowhere else: not in the logs (at debug level), `/status`, the audit file, or
//! the client's answers.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_tests::stacked::modern_as;
use vmcp_tests::{py_backend, py_client, sha256_hex};

use super::serve::Serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_header_from_the_environment_reaches_the_backend_and_nowhere_else() {
    let secret = format!(
        "vmcp-secret-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let vault = py_backend("vault", &["--echo-headers"]).await;
    let dir = std::env::temp_dir().join(format!("vmcp-outgoing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.log");
    let log = dir.join("vmcp.log");
    let path = dir.join("vmcp.yaml");
    std::fs::write(
        &path,
        format!(
            r#"
backends:
  - {{name: vault, url: '{}'}}
outgoingAuth:
  source: inline
  default: {{type: unauthenticated}}
  backends:
    vault:
      type: header_injection
      headerInjection: {{headerName: X-Api-Key, headerValueEnv: VMCP_TEST_VAULT_KEY}}
incomingAuth: {{type: anonymous}}
audit: {{logFile: '{}'}}
"#,
            vault.url,
            audit.display()
        ),
    )
    .unwrap();
    let mut server = Serve::new()
        .config(&path)
        .env("VMCP_TEST_VAULT_KEY", &secret)
        .env("RUST_LOG", "debug")
        .stdout_to(&log)
        .stderr_to(log.with_extension("err"))
        .start()
        .await;
    let url = server.url();

    let seen = |text: &str| -> Value { serde_json::from_str(text).expect("headers JSON") };
    let modern = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "vault_headers", "arguments": {}}),
    )
    .await;
    assert_eq!(modern.status, 200, "{:?}", modern.body);
    let headers = seen(
        modern.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(headers["x-api-key"], sha256_hex(&secret), "Modern call");

    let legacy = py_client(
        &url,
        "legacy",
        json!([{"op": "call_tool", "name": "vault_headers", "arguments": {}}]),
    )
    .await;
    let headers = seen(legacy["results"][0]["text"].as_str().unwrap());
    assert_eq!(headers["x-api-key"], sha256_hex(&secret), "Legacy call");

    assert!(
        !format!("{:?}{legacy}", modern.body).contains(&secret),
        "secret in an answer to the client"
    );

    let status = reqwest::get(server.at("/status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        status.contains("\"auth_type\":\"header_injection\""),
        "{status}"
    );
    assert!(!status.contains(&secret), "secret on /status: {status}");

    server.signal("-TERM");
    let _ = tokio::time::timeout(Duration::from_secs(10), server.child.wait()).await;
    let logs = server.logs();
    assert!(logs.contains("vault"), "debug logs were captured: {logs}");
    let leaks: Vec<String> = logs
        .lines()
        .filter(|l| l.contains(&secret))
        .map(|l| l.replace(&secret, "<SECRET>"))
        .collect();
    assert!(leaks.is_empty(), "secret in the logs: {leaks:#?}");
    let audit_lines = std::fs::read_to_string(&audit).unwrap();
    assert!(!audit_lines.is_empty(), "the audit file was written");
    assert!(!audit_lines.contains(&secret), "secret in the audit file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Token exchange with the bundled server as a real process against `oidc-provider`
/// over HTTPS: backend `good` gets an exchanged token; backend `bad`, whose exchange
/// the server refuses (no client authentication), makes the call fail with a clean
/// JSON-RPC error naming it. Neither the client secret nor the caller's token
/// appears in the debug logs, `/status` or the audit file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_exchange_failure_is_a_clean_error_and_no_secret_is_logged() {
    use vmcp_tests::oidc::OidcProvider;
    use vmcp_tests::tls::TestCa;

    let good_secret = format!("good-secret-{}", std::process::id());
    let ca = TestCa::generate("oidc test CA");
    let idp = OidcProvider::start(&ca, &[("alice", "alice-pw"), ("gateway", &good_secret)]).await;
    let good = py_backend("good", &["--echo-headers"]).await;
    let bad = py_backend("bad", &[]).await;
    let dir = std::env::temp_dir().join(format!("vmcp-exchange-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (audit, log, path) = (
        dir.join("audit.log"),
        dir.join("vmcp.log"),
        dir.join("vmcp.yaml"),
    );
    let ca_file = ca.ca_file();
    std::fs::write(
        &path,
        format!(
            r#"
backends:
  - {{name: good, url: '{good}'}}
  - {{name: bad, url: '{bad}'}}
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp, caBundlePath: '{ca}'}}
outgoingAuth:
  default:
    type: token_exchange
    tokenExchange: {{tokenUrl: '{token}', clientId: gateway, clientSecretEnv: VMCP_TEST_GOOD, audience: good, caBundlePath: '{ca}'}}
  backends:
    bad:
      type: token_exchange
      tokenExchange: {{tokenUrl: '{token}', audience: bad, caBundlePath: '{ca}'}}
audit: {{logFile: '{audit}'}}
"#,
            good = good.url,
            bad = bad.url,
            issuer = idp.issuer,
            ca = ca_file.display(),
            token = idp.token_url(),
            audit = audit.display(),
        ),
    )
    .unwrap();
    let mut server = Serve::new()
        .config(&path)
        .env("VMCP_TEST_GOOD", &good_secret)
        .env("RUST_LOG", "debug")
        .stdout_to(&log)
        .stderr_to(log.with_extension("err"))
        .start()
        .await;
    let url = server.url();
    let alice = idp.caller_token("alice", "alice-pw").await;

    let served = modern_as(
        &url,
        Some(&alice),
        "tools/call",
        json!({"name": "good_headers", "arguments": {}}),
    )
    .await;
    assert_eq!(served.status, 200, "{:?}", served.body);
    let headers: Value = serde_json::from_str(
        served.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_ne!(
        headers["authorization"],
        sha256_hex(&format!("Bearer {alice}")),
        "the caller's token reached the backend"
    );
    assert_eq!(idp.exchanges_of("alice").await, 1);

    let failed = modern_as(
        &url,
        Some(&alice),
        "tools/call",
        json!({"name": "bad_echo", "arguments": {"text": "x"}}),
    )
    .await;
    let error = &failed.body["error"];
    assert_eq!(error["code"], -32603, "{:?}", failed.body);
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "backend \"bad\": no credentials for this caller: the token endpoint refused the request (HTTP 4"
        ),
        "{:?}",
        failed.body
    );
    assert_eq!(
        idp.exchanges_of("alice").await,
        1,
        "the refused exchange issued nothing"
    );

    // Under OIDC, /status wants the same bearer token as /mcp (status.requireAuth).
    let status = reqwest::Client::new()
        .get(server.at("/status"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        status.contains("\"auth_type\":\"token_exchange\""),
        "{status}"
    );

    server.signal("-TERM");
    let _ = tokio::time::timeout(Duration::from_secs(10), server.child.wait()).await;
    let logs = server.logs();
    assert!(
        logs.contains("token obtained"),
        "debug logs were captured: {logs}"
    );
    let audit_lines = std::fs::read_to_string(&audit).unwrap();
    assert!(!audit_lines.is_empty(), "the audit file was written");
    for (what, secret) in [
        ("the client secret", good_secret.as_str()),
        ("the caller's token", alice.as_str()),
    ] {
        for (place, text) in [
            ("logs", &logs),
            ("audit file", &audit_lines),
            ("/status", &status),
        ] {
            assert!(!text.contains(secret), "{what} in the {place}");
        }
        assert!(!format!("{:?}{:?}", served.body, failed.body).contains(secret));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
