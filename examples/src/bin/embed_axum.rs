//! Embedding vmcp in an existing axum application.
//!
//! Builds a [`VmcpConfig`] in code with one backend, starts the gateway, and mounts its
//! tower service at `/mcp` next to an ordinary application route `/hello`:
//!
//! ```text
//! cargo run -p vmcp-examples --bin embed-axum -- [BACKEND_URL]
//! ```
//!
//! `BACKEND_URL` is the streamable-HTTP MCP endpoint of the backend to aggregate
//! (default `http://127.0.0.1:3001/mcp`). The app listens on `http://127.0.0.1:8080`:
//! MCP clients connect to `http://127.0.0.1:8080/mcp`, and `GET /hello` is served by
//! the app itself. An unreachable backend does not stop startup: the gateway serves
//! an empty catalog and retries the backend in the background. Ctrl-C shuts down
//! gracefully.

use std::sync::Arc;

use axum::serve::ListenerExt;

use vmcp_service::Vmcp;
use vmcp_service::config::{BackendConfig, VmcpConfig, validate};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .init();

    let backend_url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:3001/mcp".to_owned());

    // The same model the YAML file deserializes into; unset fields take their defaults
    // (prefix conflict resolution with `{workload}_`, 30 s call timeout, …).
    let config = VmcpConfig {
        name: Some("embedded-vmcp".to_owned()),
        backends: vec![BackendConfig {
            name: "backend".to_owned(),
            url: backend_url,
            ..BackendConfig::default()
        }],
        ..VmcpConfig::default()
    };
    // A config built in code skips the loader, so validate it explicitly.
    validate(&config)?;

    // Connects to the backend, builds the first catalog, and keeps it current.
    let gateway = Arc::new(Vmcp::start(config).await?);

    let app = axum::Router::new()
        .route(
            "/hello",
            axum::routing::get(|| async { "hello from the app\n" }),
        )
        .nest_service("/mcp", gateway.service());

    // TCP_NODELAY: MCP responses leave in several writes, and with Nagle's algorithm
    // the last one waits for the client's delayed ACK (about 40 ms per request).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080")
        .await?
        .tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    tracing::info!("app on http://127.0.0.1:8080/hello, MCP on http://127.0.0.1:8080/mcp");
    let signal = {
        let gateway = gateway.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            // Shut the gateway down first: this ends its open MCP streams (a Legacy
            // client's SSE stream would otherwise keep axum's graceful shutdown
            // waiting), stops the catalog refresher and closes backend connections.
            gateway.shutdown().await;
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await?;
    Ok(())
}
