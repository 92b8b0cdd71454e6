//! A minimal RFC 8693 token endpoint for the token-exchange variant (x).
//!
//! What is measured is the gateway's side: its per-caller token cache and its
//! per-caller backend connection. The exchange itself happens once per caller (the
//! cache is warm before measuring), so this endpoint only has to answer well-formed
//! grants; the real authorization server (`oidc-provider`) is what the end-to-end
//! tests exchange against. Every answer is a fresh opaque token valid for an hour,
//! and the endpoint counts the grants it served so the report can show the cache
//! held (one exchange for the run's caller, plus client-credentials grants of the
//! health checks).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use tokio_util::sync::CancellationToken;

/// Grants served so far, by kind.
#[derive(Debug, Default)]
pub struct Grants {
    pub exchanges: AtomicU64,
    pub client_credentials: AtomicU64,
}

/// A token endpoint serving on loopback until dropped.
pub struct TokenEndpoint {
    pub addr: SocketAddr,
    pub grants: Arc<Grants>,
    stop: CancellationToken,
}

impl TokenEndpoint {
    /// The `tokenUrl` to configure.
    pub fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve the endpoint on `127.0.0.1:0` (run inside the backend runtime: it stands for
/// an authorization server, not for the gateway).
pub async fn spawn() -> std::io::Result<TokenEndpoint> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let grants = Arc::new(Grants::default());
    let counted = grants.clone();
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move |body: bytes::Bytes| {
            let grants = counted.clone();
            async move { grant(&grants, &body) }
        }),
    );
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    Ok(TokenEndpoint { addr, grants, stop })
}

/// Answer one form-encoded grant: a token-exchange grant needs a subject token;
/// client credentials (the gateway's health checks) need nothing else here.
fn grant(grants: &Grants, body: &[u8]) -> axum::response::Response {
    let form = String::from_utf8_lossy(body);
    let has = |pair: &str| form.split('&').any(|p| p == pair);
    let has_key = |key: &str| form.split('&').any(|p| p.starts_with(key));
    let counter = if has("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange")
        && has_key("subject_token=")
    {
        &grants.exchanges
    } else if has("grant_type=client_credentials") {
        &grants.client_credentials
    } else {
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"unsupported_grant_type"}"#,
        )
            .into_response();
    };
    let n = counter.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            r#"{{"access_token":"bench-{n}","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":3600}}"#
        ),
    )
        .into_response()
}
