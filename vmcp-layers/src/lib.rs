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
//! 4. [`auth`]: authentication (anonymous or OIDC/JWT) and MCP parsing.
//! 5. [`discovery`]: the caller's capability view.
//! 6. [`annotations`] (with authorization): the target tool's annotations.
//! 7. [`authz`] (optional): the Cedar admission decision.
//! 8. [`backend_enrichment`] (with audit or telemetry): the serving backend.
//! 9. [`telemetry`] (optional): OpenTelemetry spans and metrics, Prometheus text.
//! 10. [`gate`] (with authorization): denied calls answered 403.

pub mod annotations;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod backend_enrichment;
pub mod body;
pub mod context;
pub mod discovery;
pub mod gate;
pub mod headers;
pub mod jsonrpc;
pub mod recovery;
pub mod stack;
mod strict_json;
pub mod telemetry;

pub use context::{BackendTarget, Identity, McpRevision, ParsedMcpRequest};
