//! The vmcp request pipeline as reusable tower layers.
//!
//! Every stage of the gateway's pipeline is one tower [`Layer`](tower::Layer) in its
//! own module. The layers talk to each other and to the aggregating service in
//! `vmcp-service` only through the typed request extensions of the [`context`]
//! module, so each layer can also be mounted alone in front of any MCP server.
//!
//! The stages, outermost first (the order [`stack`] assembles):
//!
//! 1. [`recovery`]: a panic becomes HTTP 500 with a JSON-RPC error body.
//! 2. [`headers`]: `Accept` on GET, `Host`/`Origin` allow-lists, body size limit.
//! 3. [`audit`] (optional): one JSON line per request outcome.
//! 4. [`auth`]: authentication (anonymous or OIDC/JWT): the caller's identity.
//! 5. [`parse`]: the JSON-RPC body buffered and decoded once.
//! 6. [`discovery`]: the caller's capability view.
//! 7. [`annotations`] (with authorization): the target tool's annotations.
//! 8. [`authz`] (optional): the Cedar admission decision.
//! 9. [`backend_enrichment`] (with audit or telemetry): the serving backend.
//! 10. [`telemetry`] (optional): OpenTelemetry spans and metrics, Prometheus text.
//! 11. [`gate`] (with authorization): denied calls answered 403.

pub mod annotations;
#[cfg(feature = "audit")]
pub mod audit;
pub mod auth;
#[cfg(feature = "cedar")]
pub mod authz;
pub mod backend_enrichment;
pub mod body;
pub mod boxed;
pub mod context;
pub mod discovery;
pub mod future;
pub mod gate;
pub mod headers;
pub mod jsonrpc;
pub mod parse;
pub mod prerequisite;
pub mod recovery;
pub mod rewrite;
pub mod shown;
pub mod stack;
mod strict_json;
pub mod switch;
#[cfg(feature = "otel")]
pub mod telemetry;
#[cfg(feature = "tls")]
pub mod tls;

pub use context::{BackendTarget, Identity, McpRevision, ParsedMcpRequest};
