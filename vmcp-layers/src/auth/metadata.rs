//! The RFC 9728 protected-resource metadata a bearer-token server announces, so a
//! client that got a 401 can find the authorization server.

use http::{HeaderMap, header};

/// What the protected-resource metadata document says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceMetadata {
    /// The authorization server (the token issuer).
    pub issuer: String,
    /// This server's resource identifier (its public MCP URL); `None` derives it
    /// from the request's `Host`.
    pub resource: Option<String>,
    /// Scopes announced (`scopes_supported`), omitted when empty.
    pub scopes: Vec<String>,
}

/// The RFC 9728 protected-resource metadata routes for `mcp_path` (e.g. `/mcp`):
/// `/.well-known/oauth-protected-resource` and
/// `/.well-known/oauth-protected-resource<mcp_path>`.
pub fn metadata_router(metadata: &ResourceMetadata, mcp_path: &str) -> axum::Router {
    let issuer = metadata.issuer.clone();
    let scopes = metadata.scopes.clone();
    let resource = metadata.resource.clone();
    let path = mcp_path.to_owned();
    let handler = move |headers: HeaderMap| {
        let resource = resource.clone().unwrap_or_else(|| {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}{path}")
        });
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": [issuer.clone()],
            "bearer_methods_supported": ["header"],
        });
        if !scopes.is_empty() {
            document["scopes_supported"] = serde_json::json!(scopes.clone());
        }
        async move { axum::Json(document) }
    };
    let suffixed = format!("/.well-known/oauth-protected-resource{mcp_path}");
    axum::Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(handler.clone()),
        )
        .route(&suffixed, axum::routing::get(handler))
}
