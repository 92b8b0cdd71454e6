//! JSON-RPC error responses: how a layer turns a failure into an HTTP response.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

/// JSON-RPC "invalid request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: an HTTP header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// The code of an authorization denial (the HTTP status, as the reference uses).
pub const DENIED: i64 = 403;
/// The code of an authentication failure.
pub const UNAUTHORIZED: i64 = -32001;

/// Every client-to-server method of both MCP revisions (2025-11-25 and
/// 2026-07-28), notifications included, as their schemas name them.
pub const CLIENT_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "tasks/update",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "notifications/tasks/status",
];

/// An HTTP response carrying one JSON-RPC error object.
pub fn error_response(
    status: StatusCode,
    id: Option<&Value>,
    code: i64,
    message: &str,
) -> Response<Body> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn error_body_is_a_jsonrpc_error() {
        let response = error_response(StatusCode::FORBIDDEN, Some(&json!(7)), DENIED, "no");
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            json!({"jsonrpc":"2.0","id":7,"error":{"code":403,"message":"no"}})
        );
    }
}
