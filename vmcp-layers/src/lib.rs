//! The vmcp request pipeline as reusable tower layers.
//!
//! Every stage of the gateway's pipeline is one tower [`Layer`](https://docs.rs/tower/latest/tower/trait.Layer.html)
//! in its own module. The layers talk to each other and to the aggregating service in
//! `vmcp-service` only through the typed request extensions of the [`context`] module,
//! so each layer can also be mounted alone in front of any MCP server.

pub mod context;

pub use context::{Identity, McpRevision, ParsedMcpRequest};
