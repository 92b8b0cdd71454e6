//! The Cedar gate alone in front of a plain rmcp server, built from the lean crate:
//!
//! ```text
//! cargo run -p vmcp-layers --no-default-features --features cedar --example gate_cedar
//! ```
//!
//! Only what the gate needs is mounted, composed by hand with `ServiceBuilder`:
//!
//! 1. [`AuthLayer::anonymous`]: every caller is `anonymous` (the authorization layer
//!    refuses to guess an identity; without this layer it answers 500);
//! 2. [`McpParseLayer`]: the one parse of the JSON-RPC body;
//! 3. [`AuthorizationLayer`]: the Cedar decision (only `echo` may be called);
//! 4. [`GateLayer`]: a denied call is answered 403 before the server sees it.
//!
//! The same server is also mounted at `/stacked` behind the whole pipeline as one
//! tower `Layer` ([`StackBuilder::into_layer`]: recovery, header checks, anonymous
//! auth, parse, Cedar, gate):
//!
//! ```rust,ignore
//! ServiceBuilder::new().layer(stack).service(server)
//! ```
//!
//! No JWT, audit or OpenTelemetry code is compiled. The server listens on
//! `http://127.0.0.1:8082/mcp` and `/stacked`; `tools/call` of `echo` works, of
//! `shout` is 403.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tower::ServiceBuilder;
use vmcp_layers::auth::AuthLayer;
use vmcp_layers::authz::AuthorizationLayer;
use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, sources};
use vmcp_layers::gate::GateLayer;
use vmcp_layers::parse::McpParseLayer;
use vmcp_layers::stack::StackBuilder;

/// An ordinary MCP server with two tools; it knows nothing about the gate.
#[derive(Clone)]
struct Plain;

impl ServerHandler for Plain {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("plain", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = Arc::new(serde_json::Map::from_iter([(
            "type".to_owned(),
            serde_json::Value::from("object"),
        )]));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "echo the text", schema.clone()),
            Tool::new("shout", "echo the text, loudly", schema),
        ]))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = params
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let text = match params.name.as_ref() {
            "shout" => text.to_uppercase(),
            _ => text.to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server: StreamableHttpService<Plain, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Plain), Default::default(), Default::default());
    let policies = vec![
        r#"permit(principal, action == Action::"call_tool", resource == Tool::"echo");"#.to_owned(),
    ];
    let cedar = CedarAuthorizer::from_sources(
        &sources("policies", &policies, &[]),
        CedarSettings::default(),
    )?;

    let cedar = Arc::new(cedar);

    // By hand: only the layers the gate needs.
    let gated = ServiceBuilder::new()
        .layer(AuthLayer::anonymous())
        .layer(McpParseLayer::new())
        .layer(AuthorizationLayer::new(cedar.clone()))
        .layer(GateLayer::new())
        .service(server.clone());
    // The whole pipeline as one Layer; its extra routes (none here) merge beside it.
    let stack = StackBuilder::new().authorizer(cedar).into_layer();
    println!("stacked layers: {:?}", stack.layers());
    let stacked = ServiceBuilder::new().layer(stack.clone()).service(server);
    let app = axum::Router::new()
        .route_service("/mcp", gated)
        .route_service("/stacked", stacked)
        .merge(stack.routes());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8082").await?;
    println!("gated MCP server on http://127.0.0.1:8082/mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
