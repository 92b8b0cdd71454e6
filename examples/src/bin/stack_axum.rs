//! The full vmcp layer stack in an existing axum application.
//!
//! Builds a configuration in code with one backend, anonymous callers, a Cedar
//! policy that only allows read-only tools, an audit log on standard output and a
//! Prometheus `/metrics` endpoint, then merges the stack's routes into an app that
//! has its own `/hello` route:
//!
//! ```text
//! cargo run -p vmcp-examples --bin stack-axum -- [BACKEND_URL]
//! ```
//!
//! `BACKEND_URL` defaults to `http://127.0.0.1:3001/mcp`. The app listens on
//! `http://127.0.0.1:8080`: MCP at `/mcp`, metrics at `/metrics`, and `/hello`.
//! `stack.layers()` is logged at start, outermost first.

use std::sync::Arc;

use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_service::Vmcp;
use vmcp_service::config::{
    AuditConfig, AuthzConfig, AuthzType, BackendConfig, IncomingAuth, IncomingAuthConfig,
    TelemetryConfig, VmcpConfig, validate,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let backend_url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:3001/mcp".to_owned());

    let config = VmcpConfig {
        name: Some("embedded".to_owned()),
        backends: vec![BackendConfig {
            name: "backend".to_owned(),
            url: backend_url,
            ..BackendConfig::default()
        }],
        incoming_auth: Some(IncomingAuthConfig {
            auth: IncomingAuth::Anonymous,
            authz: Some(AuthzConfig {
                kind: AuthzType::Cedar.into(),
                policies: vec![
                    r#"permit(principal, action == Action::"call_tool", resource)
                       when { context.annotations has readOnlyHint && context.annotations.readOnlyHint };"#
                        .to_owned(),
                    r#"permit(principal, action in [Action::"get_prompt", Action::"read_resource"], resource);"#
                        .to_owned(),
                ],
                ..AuthzConfig::default()
            }),
        }),
        audit: Some(AuditConfig::default()),
        telemetry: Some(TelemetryConfig {
            enable_prometheus_metrics_path: true,
            ..TelemetryConfig::default()
        }),
        ..VmcpConfig::default()
    };
    // A config built in code skips the loader, so validate it (policies included).
    validate(&config)?;

    let gateway = Arc::new(Vmcp::start(config).await?);
    let stack = gateway.stack(Default::default(), HeaderValidationLayer::new())?;
    tracing::info!(layers = ?stack.layers(), "request pipeline");

    let app = axum::Router::new()
        .route(
            "/hello",
            axum::routing::get(|| async { "hello from the app\n" }),
        )
        .merge(stack.router());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    tracing::info!("app on http://127.0.0.1:8080 (/hello, /mcp, /metrics)");
    let stopping = gateway.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stopping.shutdown().await;
        })
        .await?;
    Ok(())
}
