//! A request rewrite the service asks the parse layer to apply before any later
//! layer reads the request: the optimizer's `call_tool` becomes the `tools/call` of
//! the tool it wraps, so authentication, authorization, audit, telemetry, rate
//! limiting and routing all see the real tool name and arguments (one decision
//! path, not a copy of it), and its `find_tool` is a gateway-local call every
//! caller may make (its results are filtered per caller by the service).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

use crate::context::ParsedMcpRequest;

/// A parsed request the service replaced.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The request as later layers and the service see it.
    pub parsed: ParsedMcpRequest,
    /// Its body (the same JSON-RPC id and `_meta`).
    pub body: Bytes,
}

/// What a [`Rewrite`] made of a request.
#[derive(Debug, Clone)]
pub enum Rewrite {
    /// Another request in its place.
    Replaced(Box<Rewritten>),
    /// A call of a gateway-local tool that every caller may make: it is admitted
    /// (the service decides per caller what it answers).
    Local,
}

/// The marker the parse layer inserts on a [`Rewrite::Local`] request: the
/// authorization layer admits it.
#[derive(Debug, Clone, Copy)]
pub struct LocalCall;

/// Rewrites requests; see the [module docs](self).
pub trait RequestRewrite: Send + Sync {
    /// The rewrite of `parsed` (its raw `body`), or `None` to leave it as it is.
    fn rewrite(&self, parsed: &ParsedMcpRequest, body: &[u8]) -> Option<Rewrite>;
}

/// Make the 2026-07-28 `Mcp-Name` header (when the client sent one) name the
/// rewritten target, so the header/body consistency checks after this one hold.
pub fn retarget_headers(headers: &mut HeaderMap, parsed: &ParsedMcpRequest) {
    if headers.contains_key("mcp-name")
        && let Some(value) = parsed.target().and_then(|t| HeaderValue::from_str(t).ok())
    {
        headers.insert("mcp-name", value);
    }
}
