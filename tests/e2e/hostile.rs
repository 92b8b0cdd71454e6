//! Hostile request bodies over real HTTP, against the bare service and the full
//! stack: each gets a clean 4xx with a JSON-RPC error (a body that never fully
//! arrives too: no answer at all fails), nothing panics, and the next request is
//! served.

use std::net::SocketAddr;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vmcp_examples::demo::{DemoSpec, RunningDemo, spawn};
use vmcp_tests::stacked::{modern_as, stacked_gateway};
use vmcp_tests::{config, gateway};

async fn backend() -> (RunningDemo, String) {
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let yaml = format!("backends: [{{name: gh, url: '{}'}}]", gh.url());
    (gh, yaml)
}

/// POST `body` as a Modern request; the status and the JSON-RPC error code, if any.
async fn post(url: &str, body: Vec<u8>) -> (u16, Option<i64>, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .body(body)
        .send()
        .await
        .expect("POST to the gateway");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    // A JSON body, or the first `data:` line of an event stream.
    let json = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text);
    let code = serde_json::from_str::<Value>(json.trim())
        .ok()
        .and_then(|v| v["error"]["code"].as_i64());
    let shown: String = text.chars().take(200).collect();
    (status, code, shown)
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

/// Each hostile body, with the JSON-RPC code the answer must carry.
fn hostile() -> Vec<(&'static str, Vec<u8>, i64)> {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":{}{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let mut invalid_utf8 =
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":""#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    vec![
        ("10,000-level nesting", deep.into_bytes(), -32700),
        ("invalid UTF-8", invalid_utf8, -32700),
        ("not JSON", b"{\"jsonrpc\":".to_vec(), -32700),
        (
            "batch",
            format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{META}}}}}]"#)
                .into_bytes(),
            -32600,
        ),
        (
            "id: null",
            format!(r#"{{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{{"_meta":{META}}}}}"#)
                .into_bytes(),
            -32600,
        ),
        (
            "object id",
            format!(r#"{{"jsonrpc":"2.0","id":{{"a":1}},"method":"tools/list","params":{{"_meta":{META}}}}}"#)
                .into_bytes(),
            -32600,
        ),
        (
            "duplicate method key",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{{"_meta":{META}}}}}"#)
                .into_bytes(),
            -32600,
        ),
        ("a JSON string", br#""tools/list""#.to_vec(), -32600),
    ]
}

/// A request head announcing more body than is sent, then a half-close: the HTTP
/// status of the answer, which must come (a gateway that just closed the connection
/// would leave the client without an answer).
async fn content_length_lie(addr: SocketAddr) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\":"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tcp.read_to_end(&mut answer),
    )
    .await
    .expect("the gateway answers or closes a truncated body");
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to a truncated body: {text:?}"))
}

async fn still_serves(url: &str, after: &str) {
    let reply = modern_as(url, None, "tools/list", json!({})).await;
    assert_eq!(
        reply.status, 200,
        "the request after {after}: {:?}",
        reply.body
    );
    assert!(reply.body["result"]["tools"].is_array(), "after {after}");
}

/// POST an over-limit body: the HTTP status, or the I/O error that cut the upload
/// (broken pipe or reset; any other failure panics).
async fn oversized(url: &str, body: Vec<u8>) -> Result<u16, std::io::ErrorKind> {
    let sent = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) => Ok(response.status().as_u16()),
        Err(error) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
            while let Some(e) = source {
                if let Some(io) = e.downcast_ref::<std::io::Error>()
                    && matches!(
                        io.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    )
                {
                    return Err(io.kind());
                }
                source = e.source();
            }
            panic!("POST of an over-limit body: {error:?}");
        }
    }
}

/// A Modern `tools/list` with an `Origin` header: the HTTP status.
async fn with_origin(url: &str, origin: &str) -> u16 {
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{META}}}}}"#);
    reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .header("Origin", origin)
        .body(body)
        .send()
        .await
        .expect("POST to the gateway")
        .status()
        .as_u16()
}

async fn check(mode: &str, url: &str, addr: SocketAddr) {
    // DNS rebinding: a foreign page's Origin is refused, a loopback one served.
    assert_eq!(
        with_origin(url, "https://evil.example").await,
        403,
        "{mode}: evil Origin"
    );
    assert_eq!(
        with_origin(url, "http://localhost:5173").await,
        200,
        "{mode}: loopback Origin"
    );
    for (what, body, code) in hostile() {
        let (status, got, text) = post(url, body).await;
        assert_eq!(
            (status, got),
            (400, Some(code)),
            "{mode}: {what} must be HTTP 400 with JSON-RPC {code}; got {status} {text}"
        );
        still_serves(url, what).await;
    }
    // 8 MiB of string: over the 8 MiB body limit, refused before it is parsed.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":"{}"}}}}"#,
        "a".repeat(8 * 1024 * 1024)
    );
    // The gateway answers 413 from Content-Length without reading the body and
    // closes the connection; a client still uploading may see the close (broken pipe,
    // reset) before it reads the 413. Either way the body was refused unread.
    match oversized(url, huge.into_bytes()).await {
        Ok(status) => assert_eq!(status, 413, "{mode}: an 8 MiB string"),
        Err(error) => eprintln!(
            "{mode}: an 8 MiB string: the gateway closed the upload before the client read its answer ({error}); counted as refused"
        ),
    }
    still_serves(url, "an 8 MiB string").await;

    let status = content_length_lie(addr).await;
    assert!(
        (400..500).contains(&status),
        "{mode}: a Content-Length lie must be a 4xx, got {status}"
    );
    still_serves(url, "a Content-Length lie").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_clean_errors_on_the_bare_service() {
    let (_gh, yaml) = backend().await;
    let mut cfg = config(&yaml);
    cfg.ui.enabled = true;
    let gw = gateway(cfg).await;
    check("bare", &gw.url(), gw.addr).await;

    // /status names backends and errors: a rebinding page's Host is refused.
    let get = |path: &str, host: &str| {
        reqwest::Client::new()
            .get(format!("http://{}{path}", gw.addr))
            .header("Host", host)
            .send()
    };
    assert_eq!(get("/status", "evil.example").await.unwrap().status(), 403);
    assert_eq!(
        get("/status", "evil.example:80").await.unwrap().status(),
        403
    );
    let local = format!("127.0.0.1:{}", gw.addr.port());
    assert_eq!(get("/status", &local).await.unwrap().status(), 200);
    assert_eq!(get("/status", "localhost").await.unwrap().status(), 200);
    // So does the status page, which shows the same backends and errors.
    assert_eq!(get("/ui", "evil.example").await.unwrap().status(), 403);
    assert_eq!(
        get("/ui/events", "evil.example").await.unwrap().status(),
        403
    );
    assert_eq!(get("/ui", &local).await.unwrap().status(), 200);
    // Liveness and readiness stay open to anything that can reach the port.
    assert_eq!(get("/health", "evil.example").await.unwrap().status(), 200);
    assert_eq!(get("/readyz", "evil.example").await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_clean_errors_on_the_full_stack() {
    let (_gh, yaml) = backend().await;
    let gw = stacked_gateway(config(&yaml)).await;
    check("stack", &gw.url(), gw.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_of_the_wrong_type_are_invalid_params_not_an_unknown_method() {
    let (_gh, yaml) = backend().await;
    let bare = gateway(config(&yaml)).await;
    let stacked = stacked_gateway(config(&yaml)).await;
    for (mode, url) in [("bare", bare.url()), ("stack", stacked.url())] {
        for (case, method, params) in [
            (
                "numeric requestState",
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "x"}, "requestState": 5}),
            ),
            (
                "object requestState",
                "prompts/get",
                json!({"name": "p", "requestState": {"a": 1}}),
            ),
            (
                "array inputResponses",
                "tools/call",
                json!({"name": "gh_echo", "arguments": {}, "requestState": "s", "inputResponses": []}),
            ),
        ] {
            let reply = modern_as(&url, None, method, params).await;
            assert_eq!(
                reply.body["error"]["code"], -32602,
                "{mode} {case}: {} {:?}",
                reply.status, reply.body
            );
            // The reason after the colon is serde's, bounded (it may quote input).
            let message = reply.body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(&format!("invalid params for {method}")),
                "{mode} {case}: {message}"
            );
        }
        // A method that does not exist is still -32601, naming it.
        let reply = modern_as(&url, None, "tools/frobnicate", json!({})).await;
        assert_eq!(
            reply.body["error"]["code"], -32601,
            "{mode}: {:?}",
            reply.body
        );
        still_serves(&url, "params of the wrong type").await;
    }
}
