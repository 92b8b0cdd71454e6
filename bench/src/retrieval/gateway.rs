//! `find_tool` end to end: a gateway with the optimizer on, in this process, in front
//! of one backend serving the replicated catalog; each search a Modern (stateless)
//! `tools/call find_tool` over loopback HTTP, timed from request to parsed answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use rmcp::model::{
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A backend that lists `tools` (it is never called: only searched).
#[derive(Clone)]
struct Listing(Arc<Vec<Tool>>);

impl ServerHandler for Listing {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("catalog", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.as_ref().clone()))
    }
}

/// Serve `router` on a free loopback port (for as long as the process runs).
async fn serve(router: axum::Router) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// The latency of `find_tool` for each query, `rounds` times, through a gateway
/// over `tools`; and how long the first search (which builds the index) took.
pub async fn find_tool_latency(
    tools: Vec<Tool>,
    queries: &[&str],
    rounds: usize,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let count = tools.len();
    let listing = Listing(Arc::new(tools));
    let backend: StreamableHttpService<Listing, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(listing.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let backend = serve(axum::Router::new().nest_service("/mcp", backend)).await?;
    let yaml = format!(
        "backends:\n  - name: c\n    url: http://{backend}/mcp\noptimizer: {{maxToolsToReturn: 8}}\n"
    );
    let config = vmcp_service::config::load_str(&yaml)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .config;
    let vmcp = vmcp_service::Vmcp::start(config)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let listed = vmcp.aggregator().catalog().tools().len();
    ensure!(
        listed == count,
        "the gateway lists {listed} of {count} tools"
    );
    let gateway = serve(axum::Router::new().nest_service("/mcp", vmcp.service())).await?;
    let url = format!("http://{gateway}/mcp");
    let http = reqwest::Client::new();
    let find = |query: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "find_tool",
            "arguments": {"tool_description": query},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "vmcp-retrieval-bench", "version": "1"}
            }
        }});
        let request = http
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", "find_tool")
            .json(&body);
        async move {
            let text = request.send().await?.text().await?;
            // A JSON body, or one SSE `data:` event.
            let json = text
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .unwrap_or(&text);
            let value: Value = serde_json::from_str(json.trim()).context("find_tool answer")?;
            let found = value["result"]["structuredContent"]["tools"]
                .as_array()
                .with_context(|| format!("find_tool answered without tools: {text}"))?
                .len();
            anyhow::Ok(found)
        }
    };
    let started = Instant::now();
    find(queries.first().copied().unwrap_or("file")).await?;
    let first = started.elapsed();
    let mut times = Vec::with_capacity(queries.len() * rounds);
    for _ in 0..rounds {
        for query in queries {
            let started = Instant::now();
            std::hint::black_box(find(query).await?);
            times.push(started.elapsed());
        }
    }
    Ok((first, times))
}
