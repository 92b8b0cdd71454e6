//! Variant (c): the gateway behind the full layer stack (JWT authentication, Cedar
//! authorization, audit), measured exactly like variant (b).
//!
//! [`full_stack`] is the single place to wire it: return the axum router with the
//! layers around `vmcp.service()`, and the headers every benchmark request must carry
//! (a bearer token the JWT layer accepts). While it returns `Err`, the benchmark
//! prints the reason in place of the (c) rows and ratios.

use http::HeaderMap;
use vmcp_service::Vmcp;

/// A ready-to-serve layered gateway and what its clients must send.
pub struct Stack {
    /// The router to serve: the layers around the aggregating service at `/mcp`.
    pub router: axum::Router,
    /// Headers added to every request, e.g. `Authorization: Bearer <jwt>`.
    pub headers: HeaderMap,
}

/// Build variant (c) around `vmcp`, or say why it cannot be built.
pub fn full_stack(vmcp: &Vmcp) -> Result<Stack, String> {
    let _ = vmcp;
    Err(
        "not available: vmcp-layers does not provide the JWT, Cedar and audit layers yet \
         (bench/src/stack.rs wires them once it does)"
            .to_owned(),
    )
}
