//! End-to-end tests: the gateway over real HTTP with real MCP peers.
//!
//! One test binary (each binary links the whole stack); one module per behaviour.

mod aggregation;
mod audit;
mod auth;
mod authz;
mod bounded_waits;
mod conflicts;
mod failures;
mod filtering;
mod hostile;
mod live;
mod pagination;
mod pipeline;
mod session_binding;
mod session_lifetime;
mod status_auth;
mod stdio;
mod tls;
mod ui;
