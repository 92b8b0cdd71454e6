//! The gateway behind the full layer stack, and raw HTTP clients for both revisions
//! that send a bearer token and return the exact status, headers and JSON-RPC body.

use std::net::SocketAddr;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_layers::stack::Stack;
use vmcp_service::{Vmcp, VmcpConfig};

/// A gateway serving the layered stack on loopback; stopped on drop.
pub struct StackedGateway {
    /// The running gateway.
    pub vmcp: Vmcp,
    /// The assembled stack (layer order, telemetry handle) as first built; a
    /// `vmcp.reload` swaps in another.
    pub stack: Arc<Stack>,
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl StackedGateway {
    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A URL on the gateway's server.
    pub fn at(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for StackedGateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Start the gateway for `config` behind `Vmcp::reloadable_stack`.
pub async fn stacked_gateway(config: VmcpConfig) -> StackedGateway {
    let vmcp = Vmcp::start(config).await.expect("gateway starts");
    let switch = vmcp
        .reloadable_stack(Default::default(), HeaderValidationLayer::new())
        .expect("stack builds");
    let stack = switch.current();
    let (addr, stop) = crate::serve_on_loopback(switch.router()).await;
    StackedGateway {
        vmcp,
        stack,
        addr,
        stop,
    }
}

/// One gateway behind the full layer stack twice, each on loopback: around
/// `Vmcp::service()` and around `without_fast_path()`, to compare the two paths
/// behind the same layers. Stopped on drop.
pub struct TwoStacks {
    /// The service with the fast path (its `fast_path_answers` counts).
    pub fast: vmcp_service::VmcpService,
    /// The service answering everything with rmcp.
    pub slow: vmcp_service::VmcpService,
    /// The MCP endpoint of the stack around `fast`.
    pub fast_url: String,
    /// The MCP endpoint of the stack around `slow`.
    pub slow_url: String,
    stops: [CancellationToken; 2],
}

impl Drop for TwoStacks {
    fn drop(&mut self) {
        for stop in &self.stops {
            stop.cancel();
        }
    }
}

/// [`TwoStacks`] of `vmcp`.
pub async fn two_stacks(vmcp: &Vmcp) -> TwoStacks {
    let fast = vmcp.service();
    let slow = vmcp.service().without_fast_path();
    let mount = async |service| {
        let stack = vmcp
            .stack_around(service, HeaderValidationLayer::new())
            .expect("stack builds");
        let (addr, stop) = crate::serve_on_loopback(stack.router()).await;
        (format!("http://{addr}/mcp"), stop)
    };
    let (fast_url, stop_fast) = mount(fast.clone()).await;
    let (slow_url, stop_slow) = mount(slow.clone()).await;
    TwoStacks {
        fast,
        slow,
        fast_url,
        slow_url,
        stops: [stop_fast, stop_slow],
    }
}

/// What one raw request got back.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The JSON-RPC message (`Value::Null` for an empty body).
    pub body: Value,
    /// The body as received.
    pub raw: String,
}

fn parse(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    crate::parse_jsonrpc_body(text)
}

/// A raw Modern (2026-07-28) request with an optional bearer token.
pub async fn modern_as(url: &str, token: Option<&str>, method: &str, params: Value) -> Reply {
    modern_with_headers(url, token, &[], method, params).await
}

/// [`modern_as`] with extra request headers.
pub async fn modern_with_headers(
    url: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    method: &str,
    mut params: Value,
) -> Reply {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp-tests", "version": "1.2"}
    });
    if let Some(obj) = params.as_object_mut() {
        // Keys the caller set in `_meta` (e.g. its capabilities) win.
        if let (Some(Value::Object(given)), Some(defaults)) =
            (obj.remove("_meta"), meta.as_object_mut())
        {
            defaults.extend(given);
        }
        obj.insert("_meta".into(), meta);
    }
    let mut request = reqwest::Client::new()
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
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("POST to the gateway");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("response body");
    Reply {
        status,
        headers,
        body: parse(&text),
        raw: text,
    }
}

/// A raw Legacy (2025-11-25) session with an optional bearer token.
pub struct LegacySession {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    session: String,
    next_id: u64,
}

impl LegacySession {
    /// `initialize` + `notifications/initialized`.
    pub async fn open(url: &str, token: Option<&str>) -> Self {
        Self::open_with(&reqwest::Client::new(), url, token).await
    }

    /// [`LegacySession::open`] over `http`'s connections (e.g. one client for
    /// thousands of sessions).
    pub async fn open_with(http: &reqwest::Client, url: &str, token: Option<&str>) -> Self {
        let mut request = http
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "vmcp-tests-legacy", "version": "0.9"}}}),
            );
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("initialize");
        assert_eq!(response.status(), 200, "initialize");
        let session = response
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.text().await;
        let mut this = Self {
            http: http.clone(),
            url: url.to_owned(),
            token: token.map(str::to_owned),
            session,
            next_id: 1,
        };
        let reply = this
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(reply.status, 202, "notifications/initialized");
        this
    }

    /// The `Mcp-Session-Id`.
    pub fn id(&self) -> &str {
        &self.session
    }

    /// `request` with the session's headers and bearer token.
    fn with_session(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", &self.session);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Open the session's standalone GET event stream (asserting 200).
    pub async fn stream(&self) -> reqwest::Response {
        let request = self
            .with_session(self.http.get(&self.url))
            .header("Accept", "text/event-stream");
        let stream = request.send().await.expect("GET the session's stream");
        assert_eq!(stream.status(), 200, "GET stream opened");
        stream
    }

    /// End the session with DELETE; its HTTP status.
    pub async fn delete(&self) -> u16 {
        self.with_session(self.http.delete(&self.url))
            .send()
            .await
            .expect("DELETE the session")
            .status()
            .as_u16()
    }

    async fn send(&mut self, body: Value) -> Reply {
        let request = self
            .with_session(self.http.post(&self.url))
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        let response = request.send().await.expect("POST to the gateway");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("response body");
        Reply {
            status,
            headers,
            body: parse(&text),
            raw: text,
        }
    }

    /// One request in the session with the JSON-RPC id `id`.
    pub async fn request_with_id(&mut self, id: u64, method: &str, params: Value) -> Reply {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// One request in the session (id 1, 2, …).
    pub async fn request(&mut self, method: &str, params: Value) -> Reply {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }
}

/// Tool names of a `tools/list` reply, sorted.
pub fn tool_names(reply: &Reply) -> Vec<String> {
    let mut names: Vec<String> = reply.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {:?}", reply.body))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}
