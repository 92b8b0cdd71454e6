//! Browser origins allowed at `/mcp` beyond loopback, from the configuration file's
//! `allowedOrigins` and from `vmcp serve --allowed-origin`, over real HTTP: in the
//! bare mode and behind the layer stack, an allowed `Origin` is served, any other
//! refused (403), and a SIGHUP follows the file.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::stacked::modern_with_headers;

use super::commands::temp_file;
use super::serve::Serve;

const APP: &str = "https://app.example";

/// The HTTP status of a `tools/list` from `origin`.
async fn from(url: &str, origin: &str) -> u16 {
    modern_with_headers(url, None, &[("Origin", origin)], "tools/list", json!({}))
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origins_from_the_file_in_the_bare_mode() {
    let a = spawn(DemoSpec::new("a", &["x"]), 0).await.unwrap();
    let file = |origins: &str| {
        format!(
            "backends: [{{name: a, url: '{}'}}]\nallowedOrigins: [{origins}]\n",
            a.url()
        )
    };
    let path = temp_file("origins-yaml", &file(&format!("'{APP}'")));
    let log = path.with_extension("log");
    let server = Serve::new()
        .config(&path)
        .env("RUST_LOG", "info")
        .stderr_to(&log)
        .start()
        .await;
    let url = server.url();
    assert_eq!(from(&url, APP).await, 200, "the configured origin");
    assert_eq!(from(&url, "http://localhost:3000").await, 200, "loopback");
    assert_eq!(from(&url, "https://evil.example").await, 403);

    // The list follows a reload.
    std::fs::write(&path, file("'https://other.example'")).unwrap();
    server.signal("-HUP");
    assert!(
        vmcp_tests::eventually(|| {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("configuration reloaded"))
        })
        .await,
        "reloaded"
    );
    assert_eq!(from(&url, "https://other.example").await, 200);
    assert_eq!(from(&url, APP).await, 403, "no longer allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origin_flags_behind_the_layer_stack() {
    let a = spawn(DemoSpec::new("a", &["x"]), 0).await.unwrap();
    let path = temp_file(
        "origins-flag",
        &format!(
            "backends: [{{name: a, url: '{}'}}]\nincomingAuth: {{type: anonymous}}\n",
            a.url()
        ),
    );
    let server = Serve::new()
        .config(&path)
        .args(["--allowed-origin", APP])
        .start()
        .await;
    let url = server.url();
    assert_eq!(from(&url, APP).await, 200, "the origin of the flag");
    assert_eq!(from(&url, "https://evil.example").await, 403);

    // Without the flag, the same file refuses it.
    let server = Serve::new().config(&path).start().await;
    assert_eq!(from(&server.url(), APP).await, 403);
}
