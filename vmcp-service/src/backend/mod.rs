//! Backends: their clients (streamable HTTP, legacy SSE, stdio child processes), their
//! health, the registry of them, and ownership of the reserved `_meta` namespace at
//! the backend edge.

mod client;
mod event;
mod health;
pub(crate) mod meta;
pub(crate) mod reason;
mod registry;
pub mod sse;
pub(crate) mod stdio;

pub use client::{
    BackendCapabilities, BackendClient, BackendError, BackendEvent, BackendEventKind, CallBudget,
    OpenError,
};
pub use health::{
    BackendHealth, CallerKey, CircuitState, HealthSettings, HealthSnapshot, HealthStatus,
};
pub use registry::BackendRegistry;
