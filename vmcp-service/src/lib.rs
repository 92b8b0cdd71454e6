//! The aggregating MCP service of vmcp.
//!
//! [`Vmcp`] connects to many backend MCP servers, merges their tools, resources,
//! resource templates, prompts and completions into one conflict-resolved
//! [`catalog::Catalog`], and serves it as one MCP endpoint ([`VmcpService`], a tower
//! `Service`) on both MCP revisions, routing each call to the owning backend under
//! the backend's own name.
//!
//! ```no_run
//! use vmcp_service::config::{BackendConfig, VmcpConfig};
//! use vmcp_service::{StartError, Vmcp};
//!
//! # async fn run() -> Result<(), StartError> {
//! let config = VmcpConfig {
//!     backends: vec![BackendConfig {
//!         name: "github".into(),
//!         url: "http://127.0.0.1:3001/mcp".into(),
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! // Validates the configuration first (the same errors as `config::validate`).
//! let gateway = Vmcp::start(config).await?;
//! let app: axum::Router = axum::Router::new()
//!     .nest_service("/mcp", gateway.service())
//!     .merge(gateway.status_router());
//! # let _ = app; Ok(()) }
//! ```
//!
//! The public surface is what an embedder uses: [`Vmcp`] and [`VmcpService`],
//! [`config`] (the YAML model, loading and validation), [`status`] (the `/status`
//! document and reporters), the error types ([`StartError`], [`ConfigError`],
//! [`backend::BackendError`]), and read access to the live state ([`Aggregator`],
//! [`catalog::Catalog`], [`backend::BackendRegistry`], [`Sessions`]). Routing,
//! pagination, naming, notification propagation and the MCP handler are internal.

mod admin;
mod aggregator;
pub mod backend;
mod bare;
mod caller_caps;
pub mod catalog;
mod code_mode;
mod composite;
pub mod config;
mod connections;
pub mod discovery;
mod edge;
mod handler;
pub mod integrity;
mod listen;
mod names;
mod optimizer;
/// The optimizer's search outside a gateway (the retrieval benchmark).
pub use optimizer::retrieval as tool_retrieval;
mod pagination;
mod params;
mod propagation;
mod rate_limit;
pub mod readiness;
pub mod redis_store;
mod reload;
mod replica;
mod rewake;
mod router;
mod seal;
mod serve;
mod service;
mod session_binding;
mod session_lifetime;
mod sessions;
mod shared_sessions;
pub mod status;
mod status_view;
mod templates;
pub mod ui;
mod visibility;

// README's Rust snippets compile as doctests (`cargo test --doc`), so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use aggregator::{Aggregator, CatalogChange, CatalogProvider};
pub use config::{ConfigError, VmcpConfig};
pub use reload::ReloadError;
pub use rewake::Rewake;
pub use serve::{Serve, serve};
pub use service::{StartError, Vmcp, VmcpBody, VmcpService};
pub use sessions::Sessions;

/// The parsers that take hostile input, for the fuzz targets in `tests/fuzz` only;
/// not part of the supported API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::catalog::UriTemplate;
    pub use crate::names::{is_valid_name, sanitize};
    pub use crate::pagination::page;
    pub use vmcp_layers::context::ListKind;
}
