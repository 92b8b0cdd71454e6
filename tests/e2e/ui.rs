//! The status page at /ui, rendered by the gateway and driven in headless Chromium.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use vmcp_examples::starter::embedded_default;
use vmcp_tests::{everything_command, gateway, peers_dir, repo_root};

/// The next JSON line the driver prints (bounded).
async fn next_step(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the browser driver answered within 120s")
        .expect("read the driver's output")
        .expect("the driver printed a step (see its stderr above)");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver printed non-JSON ({e}): {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_embedded_default_and_updates_live_in_chromium() {
    let demo = embedded_default().await.expect("demo backends");
    let mut config = demo.config.clone();
    config.ui.enabled = true;
    config.operational.failure_handling.health_check_interval = Some(Duration::from_secs(1));
    config.operational.failure_handling.unhealthy_threshold = Some(1);
    let gw = gateway(config).await;
    let url = format!("http://{}/ui", gw.addr);

    // The server side: strict CSP with a fresh nonce that the script and style carry.
    let response = reqwest::get(&url).await.expect("GET /ui");
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'nonce-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .unwrap()
        .to_owned();
    let html = response.text().await.unwrap();
    assert!(
        html.contains(&format!("<script nonce=\"{nonce}\">")),
        "{html}"
    );
    assert!(!html.contains("127.0.0.1"), "the page shows no backend URL");
    let second = reqwest::get(&url).await.unwrap();
    assert_ne!(
        second.headers()["content-security-policy"]
            .to_str()
            .unwrap(),
        csp,
        "a nonce per response"
    );

    // The browser side.
    let screenshot = std::env::var_os("VMCP_UI_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("vmcp-ui-{}.png", std::process::id()))
        });
    let (node, _) = everything_command();
    let mut driver = Command::new(node)
        .arg(repo_root().join("tests/peers/ui_driver.cjs"))
        .arg(peers_dir())
        .arg(&url)
        .arg("beta")
        .arg(&screenshot)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the browser driver");
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let loaded = next_step(&mut lines).await;
    assert_eq!(loaded["step"], "loaded", "{loaded}");
    let main = loaded["main"].as_str().unwrap();
    for expected in [
        "data-backend=\"alpha\" data-health=\"healthy\"",
        "data-backend=\"beta\" data-health=\"healthy\"",
        "data-tool=\"alpha_echo\"",
        "data-tool=\"alpha_add\"",
        "data-tool=\"beta_echo\"",
        "data-tool=\"beta_upper\"",
        "<code>alpha_summarize</code>",
        "demo://alpha/readme",
        "demo://alpha/notes/{id}",
        // Both backends offer `echo`: a shared name, resolved by the prefix.
        "tool <code>echo</code> is offered by <code>alpha</code>, <code>beta</code>",
        "2026-07-28",
        "streamable-http",
        // The composite tool is a row too (issue 23 item 10), with its steps.
        "data-tool=\"shout\" data-composite=\"true\"",
        "alpha_echo → beta.upper",
    ] {
        assert!(
            main.contains(expected),
            "missing {expected:?} in the rendered page:\n{main}"
        );
    }
    // Every advertised tool has its row: the count above the table is the rows'.
    let advertised = loaded["advertised"].as_str().unwrap_or_default();
    assert_eq!(
        advertised,
        loaded["toolRows"].to_string(),
        "tools advertised vs rows: {loaded}"
    );
    assert_eq!(advertised, "5", "{loaded}");

    // Stop beta: the page must show it unhealthy by itself (no reload).
    demo.backends[1].stop();
    let after = next_step(&mut lines).await;
    assert_eq!(after["step"], "unhealthy", "{after}");
    assert_eq!(after["reloaded"], false, "the page was not reloaded");
    assert_eq!(
        after["errors"],
        Value::Array(vec![]),
        "console errors (CSP?): {after}"
    );
    let main = after["main"].as_str().unwrap();
    assert!(
        main.contains("data-backend=\"alpha\" data-health=\"healthy\""),
        "{main}"
    );
    assert!(
        !main.contains("data-tool=\"beta_echo\""),
        "beta's tools left the catalog: {main}"
    );
    let status = tokio::time::timeout(Duration::from_secs(30), driver.wait())
        .await
        .expect("driver exits")
        .unwrap();
    assert!(status.success());
    assert!(screenshot.exists(), "screenshot written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_is_off_unless_enabled() {
    let demo = embedded_default().await.expect("demo backends");
    let gw = gateway(demo.config.clone()).await;
    let response = reqwest::get(format!("http://{}/ui", gw.addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

/// Issue 31 item 8 in the browser: a caller who is not an operator, whose token the
/// page and its event stream carry, sees only what its own `tools/list` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_sees_only_its_own_view_in_chromium() {
    use serde_json::json;
    use vmcp_examples::demo::{DemoSpec, spawn};
    use vmcp_layers::headers::HeaderValidationLayer;
    use vmcp_tests::idp::{Idp, SigningKey};

    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let vault = spawn(DemoSpec::new("vault", &["read_secret"]), 0)
        .await
        .unwrap();
    let config = vmcp_tests::config(&format!(
        r#"
backends: [{{name: gh, url: '{}'}}, {{name: vault, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
  authz:
    type: cedar
    policies: ['permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");']
ui: {{enabled: true}}
status:
  operators: {{claim: roles, values: [ops]}}
"#,
        gh.url(),
        vault.url(),
        idp.issuer
    ));
    let vmcp = vmcp_service::Vmcp::start(config)
        .await
        .expect("gateway starts");
    let stack = vmcp
        .stack(Default::default(), HeaderValidationLayer::new())
        .expect("stack builds");
    let (addr, _stop) =
        vmcp_tests::serve_on_loopback(stack.router().merge(vmcp.status_router())).await;
    let alice = key.sign(&idp.claims("alice", json!({})));

    let (node, _) = everything_command();
    let mut driver = Command::new(node)
        .arg(repo_root().join("tests/peers/ui_driver.cjs"))
        .arg(peers_dir())
        .arg(format!("http://{addr}/ui"))
        .arg("-")
        .env("VMCP_UI_TOKEN", &alice)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the browser driver");
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let loaded = next_step(&mut lines).await;
    assert_eq!(loaded["step"], "loaded", "{loaded}");
    assert_eq!(loaded["errors"], Value::Array(vec![]), "{loaded}");
    let main = loaded["main"].as_str().unwrap();
    assert!(main.contains("data-tool=\"gh_echo\""), "{main}");
    assert!(main.contains("data-backend=\"gh\""), "{main}");
    for hidden in ["vault", "gh_add", "read_secret"] {
        assert!(!main.contains(hidden), "alice sees {hidden:?}: {main}");
    }
    assert_eq!(loaded["advertised"], "1", "{loaded}");
    assert_eq!(loaded["toolRows"], 1, "{loaded}");
    let status = tokio::time::timeout(Duration::from_secs(30), driver.wait())
        .await
        .expect("driver exits")
        .unwrap();
    assert!(status.success());
}
