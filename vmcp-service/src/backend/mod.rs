//! Connections from vmcp to backend MCP servers.
//!
//! Transports that rmcp does not (or no longer) provide live here.

pub mod sse;
