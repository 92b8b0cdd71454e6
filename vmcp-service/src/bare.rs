//! The checks the full layer stack makes at the door, made by [`VmcpService`]
//! itself when it is mounted bare (the embedded default, any `nest_service`).
//!
//! - `Origin` (DNS rebinding, required by the MCP transport spec): with no allowed
//!   origins configured in rmcp's `StreamableHttpServerConfig`, only loopback
//!   origins (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port) and those of
//!   the configuration's `allowedOrigins` (as of the last reload) pass; a request
//!   without `Origin` (any non-browser client) passes. Refused: 403. With an
//!   explicit rmcp list, rmcp enforces that list itself.
//! - A POST body is decoded once with [`ParsedMcpRequest::parse`]: malformed JSON
//!   is HTTP 400 with -32700; a batch, a non-object, a duplicate key or an id that is
//!   not a string or integer is HTTP 400 with -32600 (rmcp would answer 415 with
//!   plain text).
//!
//! Behind the stack the auth layer has inserted the caller's `Arc<Identity>`; its
//! presence means these checks already ran, so they are skipped.
//!
//! [`VmcpService`]: crate::VmcpService

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use vmcp_layers::Identity;
use vmcp_layers::context::{ParseError, ParsedMcpRequest};

/// `VmcpService`'s response body (the same type; named here so the checks do not
/// import the service that runs them).
type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// JSON-RPC "parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "invalid request".
const INVALID_REQUEST: i64 = -32600;

/// What the bare service checks, from rmcp's HTTP settings.
#[derive(Debug, Clone)]
pub(crate) struct BareChecks {
    /// Check `Origin` against loopback (rmcp has no list of its own).
    pub(crate) loopback_origins_only: bool,
    /// rmcp's body limit.
    pub(crate) body_limit: usize,
}

/// Whether the stack in front already made these checks.
pub(crate) fn behind_stack<B>(req: &Request<B>) -> bool {
    req.extensions().get::<Arc<Identity>>().is_some()
}

/// Whether `origin` is `http(s)://` a loopback host, with any port.
fn is_loopback_origin(origin: &str) -> bool {
    let origin = origin.to_ascii_lowercase();
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((host, port)) if port.is_empty() || is_port(port) => return host == "::1",
            _ => return false,
        }
    } else {
        match rest.split_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return false,
            None => rest,
        }
    };
    matches!(host, "localhost" | "127.0.0.1")
}

fn is_port(suffix: &str) -> bool {
    suffix
        .strip_prefix(':')
        .unwrap_or(suffix)
        .parse::<u16>()
        .is_ok()
}

/// Whether an `Origin` is neither loopback nor one `allowed` accepts (asked only for
/// the rare browser request from elsewhere).
fn origin_refused(headers: &HeaderMap, allowed: impl Fn(&str) -> bool) -> bool {
    headers.get_all(header::ORIGIN).iter().any(|origin| {
        !origin
            .to_str()
            .is_ok_and(|o| is_loopback_origin(o) || allowed(&o.to_ascii_lowercase()))
    })
}

fn error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Apply the checks; the request with its body buffered and, for a POST, its one
/// parse (which the fast path reuses), or the refusal. `allowed` says whether a
/// non-loopback `Origin` (lower-case) is configured.
pub(crate) async fn check<B>(
    checks: &BareChecks,
    allowed: impl Fn(&str) -> bool,
    req: Request<B>,
) -> Result<(Request<Full<Bytes>>, Option<ParsedMcpRequest>), Response<Body>>
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
{
    if checks.loopback_origins_only && origin_refused(req.headers(), allowed) {
        return Err(error(
            StatusCode::FORBIDDEN,
            INVALID_REQUEST,
            "Origin not allowed",
        ));
    }
    let (parts, body) = req.into_parts();
    let body = body.map_err(|e| e.to_string());
    let bytes = match Limited::new(body, checks.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let too_large = e.is::<http_body_util::LengthLimitError>();
            return Err(if too_large {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    INVALID_REQUEST,
                    "request body too large",
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    "request body could not be read",
                )
            });
        }
    };
    let mut parsed = None;
    if parts.method == Method::POST {
        let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
        match ParsedMcpRequest::parse(
            &bytes,
            header("mcp-protocol-version"),
            parts.headers.contains_key("mcp-session-id"),
        ) {
            Ok(request) => parsed = Some(request),
            Err(e) => {
                let code = match e {
                    ParseError::NotJson(_) => PARSE_ERROR,
                    _ => INVALID_REQUEST,
                };
                return Err(error(StatusCode::BAD_REQUEST, code, &e.to_string()));
            }
        }
    }
    Ok((Request::from_parts(parts, Full::new(bytes)), parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_with_any_port() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8443",
            "http://[::1]:80",
            "HTTP://LOCALHOST",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example:80",
            "http://localhost:99999",
            "null",
            "file://",
            "http://[::2]",
            "http://localhost@evil.example",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }
}
