//! Backends: their clients (streamable HTTP, legacy SSE, stdio child processes), their
//! health, the registry of them, and ownership of the reserved `_meta` namespace at
//! the backend edge.

pub(crate) mod bridge;
pub(crate) mod callers;
mod client;
mod credentials;
mod event;
pub(crate) mod exchange;
mod health;
pub mod hints;
mod http_clients;
pub(crate) mod meta;
pub(crate) mod reason;
mod registry;
pub(crate) mod relay;
pub mod sse;
pub(crate) mod stdio;

pub use bridge::ClientCaps;
pub use callers::Caller;
pub use client::{
    BackendCapabilities, BackendClient, BackendError, BackendEvent, BackendEventKind, CallBudget,
    OpenError,
};
pub(crate) use client::{CallAnswer, Peer, Received};
pub use exchange::ExchangeError;
pub use health::{
    BackendHealth, CallerKey, CircuitState, HealthSettings, HealthSnapshot, HealthStatus,
};
pub use registry::BackendRegistry;
