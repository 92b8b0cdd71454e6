//! End-to-end tests: the gateway over real HTTP with real MCP peers.
//!
//! One test binary (each binary links the whole stack); one module per behaviour.

mod aggregation;
mod audit;
mod auth;
mod authz;
mod authz_notify;
mod authz_verbs;
mod bounded_waits;
mod bridge;
mod code_mode;
mod composite;
mod conflicts;
mod connections;
mod edge;
mod edge_filtered;
mod edge_session;
mod failures;
mod filtering;
mod forwarding;
mod health_blame;
mod hostile;
mod integrity;
mod kube;
mod kube_discovered;
mod listen_caps;
mod live;
mod mrtr_bridge;
mod optimizer;
mod optimizer_semantic;
mod outgoing;
mod pagination;
mod passthrough;
mod pipeline;
mod rate_limit;
mod rate_limit_shared;
mod replicas;
mod replicas_asking;
mod replicas_modern;
mod session_binding;
mod session_lifetime;
mod session_storage;
mod status_auth;
mod stdio;
mod tls;
mod ui;
