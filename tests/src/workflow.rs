//! An in-process rmcp backend for composite tool tests. Every call is recorded;
//! tools behave so a test can see what a workflow did:
//!
//! - `stamp {label}` records when it started, waits until the number of stamps
//!   armed with [`FlowBackend::expect_together`] have all started (at most 10 s),
//!   and records when it ended: overlapping intervals prove concurrency, and a
//!   sequential caller would leave them disjoint.
//! - `flaky {key}` fails (`isError`) on its first two calls per key, then succeeds.
//! - `slow {ms}` answers after `ms` milliseconds.
//! - `list {n}` returns `{items: ["i0", …]}` as structured content.
//! - `typed {count: integer, flag: boolean, nested: {ratio: number, ids: [integer]}}`
//!   refuses (`isError`) any argument of the wrong JSON type, else echoes them.
//! - `echo {text}` returns `flow: <text>`; `fail` always fails.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool's own name.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
}

/// One `stamp` call's interval, relative to the backend's start.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The `label` argument.
    pub label: String,
    /// When the call started.
    pub start: Duration,
    /// When it answered.
    pub end: Duration,
}

#[derive(Default)]
struct State {
    calls: Mutex<Vec<Call>>,
    flaky: Mutex<HashMap<String, u32>>,
    stamps: Mutex<Vec<Stamp>>,
    together: Mutex<usize>,
    started: tokio::sync::watch::Sender<usize>,
}

/// The handler.
#[derive(Clone)]
struct Flow {
    state: Arc<State>,
    epoch: Instant,
}

/// A running flow backend; stopped on drop.
pub struct FlowBackend {
    addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
}

impl Drop for FlowBackend {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FlowBackend {
    /// Serve on a free loopback port.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Serve on loopback `port` (0: a free one), e.g. a port a gateway was
    /// configured with before the backend came up.
    pub async fn start_on(port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State::default());
        let flow = Flow {
            state: state.clone(),
            epoch: Instant::now(),
        };
        let stop = CancellationToken::new();
        let service: StreamableHttpService<Flow, LocalSessionManager> = StreamableHttpService::new(
            move || Ok(flow.clone()),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .with_cancellation_token(stop.child_token()),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled_owned().await })
                .await;
        });
        Self { addr, state, stop }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The calls of `tool`.
    pub fn calls_of(&self, tool: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.tool == tool)
            .collect()
    }

    /// Every `stamp` interval so far.
    pub fn stamps(&self) -> Vec<Stamp> {
        self.state
            .stamps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The next `n` stamps each wait (up to 10 s) until all `n` have started.
    pub fn expect_together(&self, n: usize) {
        *self
            .state
            .together
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = n;
        self.state.started.send_replace(0);
    }
}

fn tool(name: &str, schema: Value) -> Tool {
    Tool::new(
        name.to_owned(),
        format!("{name} on flow"),
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    )
}

fn tools() -> Vec<Tool> {
    let text =
        |k: &str| json!({"type": "object", "properties": {k: {"type": "string"}}, "required": [k]});
    vec![
        tool("stamp", text("label")),
        tool("flaky", text("key")),
        tool("echo", text("text")),
        tool("fail", json!({"type": "object"})),
        tool(
            "slow",
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
        ),
        tool(
            "list",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ),
        tool(
            "typed",
            json!({"type": "object", "properties": {
                "count": {"type": "integer"},
                "flag": {"type": "boolean"},
                "nested": {"type": "object", "properties": {
                    "ratio": {"type": "number"},
                    "ids": {"type": "array", "items": {"type": "integer"}}
                }}
            }, "required": ["count", "flag", "nested"]}),
        ),
    ]
}

fn ok(value: Value) -> CallToolResponse {
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    result.structured_content = Some(value);
    result.into()
}

fn error(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

impl Flow {
    async fn stamp(&self, label: String) -> CallToolResponse {
        let start = self.epoch.elapsed();
        let together = *self
            .state
            .together
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.state.started.send_modify(|n| *n += 1);
        let mut started = self.state.started.subscribe();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            started.wait_for(|n| *n >= together),
        )
        .await;
        let end = self.epoch.elapsed();
        self.state
            .stamps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Stamp {
                label: label.clone(),
                start,
                end,
            });
        ok(json!({"label": label}))
    }

    fn typed(args: &Map<String, Value>) -> CallToolResponse {
        let nested = args.get("nested");
        let well_typed = args.get("count").is_some_and(Value::is_i64)
            && args.get("flag").is_some_and(Value::is_boolean)
            && nested
                .and_then(|n| n.get("ratio"))
                .is_some_and(Value::is_number)
            && nested
                .and_then(|n| n.get("ids"))
                .and_then(Value::as_array)
                .is_some_and(|ids| ids.iter().all(Value::is_i64));
        if well_typed {
            ok(Value::Object(args.clone()))
        } else {
            error(format!(
                "typed: wrong argument types: {}",
                Value::Object(args.clone())
            ))
        }
    }
}

impl ServerHandler for Flow {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("flow", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = params.arguments.clone().unwrap_or_default();
        self.state
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Call {
                tool: params.name.to_string(),
                arguments: Value::Object(args.clone()),
            });
        let text = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Ok(match params.name.as_ref() {
            "stamp" => self.stamp(text("label")).await,
            "flaky" => {
                let key = text("key");
                let n = {
                    let mut counts = self.state.flaky.lock().unwrap_or_else(|e| e.into_inner());
                    let n = counts.entry(key).or_default();
                    *n += 1;
                    *n
                };
                if n <= 2 {
                    error(format!("flaky failure {n}"))
                } else {
                    ok(json!({"attempt": n}))
                }
            }
            "echo" => ok(json!({"text": format!("flow: {}", text("text"))})),
            "fail" => error("failed on purpose".into()),
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ok(json!({"slept_ms": ms}))
            }
            "list" => {
                let n = args.get("n").and_then(Value::as_u64).unwrap_or(0);
                ok(json!({"items": (0..n).map(|i| format!("i{i}")).collect::<Vec<_>>()}))
            }
            "typed" => Self::typed(&args),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        })
    }
}
