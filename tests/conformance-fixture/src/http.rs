//! Serving the fixture over Streamable HTTP: one `/mcp` endpoint, both revisions,
//! stopped when the [`RunningFixture`] handle drops. Used by the binary and by anything
//! that embeds the fixture in-process.

use std::net::SocketAddr;

use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::Fixture;

/// A fixture serving on loopback; stopped on drop.
#[derive(Debug)]
pub struct RunningFixture {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl RunningFixture {
    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A token that stops the server when cancelled.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }
}

impl Drop for RunningFixture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve the fixture at `/mcp` on `addr` (port 0 picks a free one).
pub async fn serve(addr: SocketAddr) -> std::io::Result<RunningFixture> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let fixture = Fixture::new();
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    Ok(RunningFixture { addr, stop })
}
