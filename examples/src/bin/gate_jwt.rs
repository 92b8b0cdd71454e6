//! Only the JWT layer and the Cedar gate, in front of a plain rmcp server.
//!
//! The server here is an ordinary rmcp `StreamableHttpService` (the demo backend:
//! tools `echo`, `add`, `whoami`), not the aggregator. Four layers go in front of
//! it, composed by hand with `ServiceBuilder`:
//!
//! 1. [`AuthLayer::jwt`]: bearer JWTs from an OIDC issuer (401 with a
//!    `WWW-Authenticate` challenge otherwise);
//! 2. [`McpParseLayer`]: the one parse of the body;
//! 3. [`AuthorizationLayer`]: the Cedar decision for `tools/call`;
//! 4. [`GateLayer`]: a denied call is answered 403 before the server sees it.
//!
//! ```text
//! cargo run -p vmcp-examples --bin gate-jwt -- ISSUER AUDIENCE
//! ```
//!
//! The keys come from `ISSUER/.well-known/openid-configuration`. Callers in the
//! `admins` group may call any tool; everyone else only `echo`. The server listens
//! on `http://127.0.0.1:8081/mcp`; the protected-resource metadata is at
//! `/.well-known/oauth-protected-resource`. The server does not filter its own
//! `tools/list` (it does not read the admission handle), so only calls are gated.

use std::sync::Arc;

use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tower::ServiceBuilder;
use vmcp_examples::demo::{DemoBackend, DemoSpec};
use vmcp_layers::auth::{AuthLayer, JwtSettings, JwtValidator, ResourceMetadata, metadata_router};
use vmcp_layers::authz::AuthorizationLayer;
use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, sources};
use vmcp_layers::gate::GateLayer;
use vmcp_layers::parse::McpParseLayer;
use vmcp_layers::recovery::RecoveryLayer;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let (Some(issuer), Some(audience)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: gate-jwt ISSUER AUDIENCE");
    };

    // A plain rmcp server.
    let backend = DemoBackend::new(DemoSpec::new("plain", &["echo", "add", "whoami"]));
    let server: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            Default::default(),
        );

    let validator = Arc::new(JwtValidator::new(
        JwtSettings::new(&issuer, audience),
        reqwest::Client::new(),
    ));
    let metadata = ResourceMetadata {
        issuer,
        ..ResourceMetadata::default()
    };
    let policies = vec![
        r#"permit(principal in THVGroup::"admins", action == Action::"call_tool", resource);"#
            .to_owned(),
        r#"permit(principal, action == Action::"call_tool", resource == Tool::"echo");"#.to_owned(),
    ];
    let cedar = CedarAuthorizer::from_sources(
        &sources("policies", &policies, &[]),
        CedarSettings::default(),
    )?;

    let gated = ServiceBuilder::new()
        .layer(RecoveryLayer::new())
        .layer(AuthLayer::jwt(validator, None))
        .layer(McpParseLayer::new())
        .layer(AuthorizationLayer::new(Arc::new(cedar)))
        .layer(GateLayer::new())
        .service(server);
    let app = axum::Router::new()
        .route_service("/mcp", gated)
        .merge(metadata_router(&metadata, "/mcp"));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
    tracing::info!("gated MCP server on http://127.0.0.1:8081/mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
