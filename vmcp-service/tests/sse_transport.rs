//! The legacy HTTP+SSE client transport against a real legacy SSE server:
//! `@modelcontextprotocol/server-everything` in `sse` mode.
//!
//! The server test runs only when `VMCP_PEERS_DIR` is set; it expects
//! `$VMCP_PEERS_DIR/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js`
//! and `node` on the `PATH`.

use std::{
    net::{Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use rmcp::{ServiceExt, model::CallToolRequestParams};
use tokio::process::{Child, Command};
use vmcp_service::backend::sse::{SseClientConfig, SseClientTransport, SseTransportError};

/// Node preload forcing `listen(port)` without a host onto 127.0.0.1: server-everything's
/// HTTP modes listen on all interfaces otherwise.
const LOOPBACK_PRELOAD: &str = r#"const net = require('net');
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (args.length === 1 || typeof args[1] === 'function') args.splice(1, 0, '127.0.0.1');
  } else if (args[0] && typeof args[0] === 'object' && !args[0].path && !args[0].host) {
    args[0] = { ...args[0], host: '127.0.0.1' };
  }
  return orig.apply(this, args);
};
"#;

const SERVER_EVERYTHING: &str =
    "node/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// A loopback port nothing listens on (at the time of the call).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

/// A running server-everything in `sse` mode; killed on drop.
struct Everything {
    child: Child,
    port: u16,
    preload: PathBuf,
}

impl Everything {
    async fn start(script: &Path) -> Self {
        let port = free_port();
        let preload = std::env::temp_dir().join(format!(
            "vmcp-sse-loopback-{}-{port}.cjs",
            std::process::id()
        ));
        std::fs::write(&preload, LOOPBACK_PRELOAD).expect("write the loopback preload");
        let child = Command::new("node")
            .arg(script)
            .arg("sse")
            .env("PORT", port.to_string())
            .env("NODE_OPTIONS", format!("-r \"{}\"", preload.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node (is it on the PATH?)");
        let mut server = Self {
            child,
            port,
            preload,
        };
        server.wait_until_listening().await;
        server
    }

    async fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server process") {
                panic!("server-everything exited before listening: {status}");
            }
            if tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on port {} within 30s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn sse_url(&self) -> String {
        format!("http://127.0.0.1:{}/sse", self.port)
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.preload);
    }
}

/// The server-everything entry point, or `None` (after saying so) to skip.
fn server_everything() -> Option<PathBuf> {
    let Some(peers) = std::env::var_os("VMCP_PEERS_DIR") else {
        eprintln!("skipping: set VMCP_PEERS_DIR to run the server-everything SSE test");
        return None;
    };
    let script = Path::new(&peers).join(SERVER_EVERYTHING);
    assert!(
        script.is_file(),
        "VMCP_PEERS_DIR is set but {} does not exist",
        script.display()
    );
    Some(script)
}

#[tokio::test]
async fn sse_server_everything_round_trip() {
    let Some(script) = server_everything() else {
        return;
    };
    let mut server = Everything::start(&script).await;

    let mut config = SseClientConfig::new(server.sse_url());
    config.connect_timeout = Duration::from_secs(10);
    let transport = SseClientTransport::connect(reqwest::Client::new(), config)
        .await
        .expect("connect to server-everything");
    assert!(
        transport.endpoint().path() == "/message"
            && transport
                .endpoint()
                .query()
                .is_some_and(|q| q.starts_with("sessionId=")),
        "unexpected endpoint {}",
        transport.endpoint()
    );
    let client = tokio::time::timeout(Duration::from_secs(10), ().serve(transport))
        .await
        .expect("initialize timed out")
        .expect("initialize");

    let info = client.peer_info().expect("peer info after initialize");
    let server_name = info.server_info.as_ref().map(|server| server.name.as_str());
    assert_eq!(server_name, Some("mcp-servers/everything"));
    eprintln!(
        "initialized with {server_name:?}, protocol version {}",
        info.protocol_version
    );

    let tools = client.list_all_tools().await.expect("list tools");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in ["echo", "get-sum"] {
        assert!(names.contains(&expected), "no {expected} in {names:?}");
    }

    let arguments = serde_json::json!({ "a": 2, "b": 3 });
    let result = client
        .call_tool(
            CallToolRequestParams::new("get-sum")
                .with_arguments(arguments.as_object().cloned().unwrap()),
        )
        .await
        .expect("call get-sum");
    let text: String = result
        .content
        .iter()
        .filter_map(|content| content.as_text())
        .map(|text| text.text.as_str())
        .collect();
    assert!(text.contains('5'), "unexpected get-sum result {text:?}");

    // The server dies: the next call must fail, not hang.
    server.child.kill().await.expect("kill server-everything");
    let after = tokio::time::timeout(Duration::from_secs(5), client.list_all_tools()).await;
    match after {
        Ok(Err(error)) => eprintln!("call after server death failed as expected: {error}"),
        Ok(Ok(tools)) => panic!("call after server death succeeded: {} tools", tools.len()),
        Err(_) => panic!("call after server death hung"),
    }
}

#[tokio::test]
async fn sse_connect_to_dead_port_fails_fast() {
    let mut config = SseClientConfig::new(format!("http://127.0.0.1:{}/sse", free_port()));
    config.connect_timeout = Duration::from_secs(5);
    let started = Instant::now();
    let error = SseClientTransport::connect(reqwest::Client::new(), config)
        .await
        .expect_err("nothing listens there");
    eprintln!("connect to a dead port failed as expected: {error}");
    assert!(
        matches!(error, SseTransportError::Connect { .. }),
        "unexpected error {error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}
