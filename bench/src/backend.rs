//! The in-process backend: a lean rmcp server whose every tool echoes its `text`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A backend with `tools` tools: `echo`, then `tool_001`, `tool_002`, … Every tool
/// answers `"<tool>: <text>"`.
#[derive(Clone)]
pub struct Backend {
    name: Arc<str>,
    tools: Arc<Vec<Tool>>,
    index: Arc<HashMap<String, usize>>,
}

impl Backend {
    /// A backend called `name` with `count` tools (at least one, `echo`).
    pub fn new(name: &str, count: usize) -> Self {
        let schema = json!({"type": "object",
            "properties": {"text": {"type": "string", "description": "What to echo"}},
            "required": ["text"]});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        let tools: Vec<Tool> = (0..count.max(1))
            .map(|i| {
                let name = if i == 0 {
                    "echo".to_owned()
                } else {
                    format!("tool_{i:03}")
                };
                let description = format!("{name}: echoes its text argument");
                Tool::new(name, description, schema.clone())
            })
            .collect();
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.to_string(), i))
            .collect();
        Self {
            name: Arc::from(name),
            tools: Arc::new(tools),
            index: Arc::new(index),
        }
    }
}

impl ServerHandler for Backend {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.name.to_string(), "1.0.0"))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.index.get(name).map(|&i| self.tools[i].clone())
    }

    async fn list_tools(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.index.contains_key(params.name.as_ref()) {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", params.name),
                None,
            ));
        }
        let text = params
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or_default();
        let mut result =
            CallToolResult::success(vec![ContentBlock::text(format!("{}: {text}", params.name))]);
        // 2026-07-28 requires resultType on every result; rmcp strips it for 2025-11-25.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(result.into())
    }
}

/// A backend serving on loopback until dropped.
pub struct RunningBackend {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl RunningBackend {
    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for RunningBackend {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `backend` on `127.0.0.1:0` with rmcp's default HTTP settings (no SSE
/// keep-alive timer) and `TCP_NODELAY`. Must run inside the backend runtime.
pub async fn spawn(backend: Backend) -> std::io::Result<RunningBackend> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Responses go out in several writes (headers, SSE events); without TCP_NODELAY,
    // Nagle's algorithm holds the last one for the client's delayed ACK (~40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let stop = CancellationToken::new();
    let service: StreamableHttpService<Backend, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(backend.clone()),
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
    Ok(RunningBackend { addr, stop })
}
