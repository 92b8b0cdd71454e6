//! The aggregating MCP service of vmcp.
//!
//! [`Vmcp`] connects to many backend MCP servers, merges their tools, resources,
//! resource templates, prompts and completions into one conflict-resolved
//! [`catalog::Catalog`], and serves it as one MCP endpoint ([`VmcpService`], a tower
//! `Service`) on both MCP revisions, routing each call to the owning backend under
//! the backend's own name.
//!
//! Modules, one bounded context each: [`config`] (the YAML model and validation),
//! [`backend`] (backend clients, both transports and revisions, and the registry),
//! [`aggregator`] (fan-out and keeping the catalog current), [`catalog`] (conflict
//! resolution, filtering, overrides), [`router`] (name translation and URI
//! templates), [`pagination`] (gateway cursors), [`handler`] (the MCP edge) and
//! [`service`] (the tower service and the running gateway).

pub mod aggregator;
pub mod backend;
mod bare;
pub mod catalog;
pub mod config;
pub mod handler;
pub mod health;
pub mod names;
pub mod pagination;
pub mod propagation;
pub mod router;
pub mod service;
mod session_binding;
pub mod sessions;
pub mod status;
pub mod view;

pub use config::VmcpConfig;
pub use service::{StartError, Vmcp, VmcpService};
