//! Backends: their clients (streamable HTTP and legacy SSE), their health, the
//! registry of them, and ownership of the reserved `_meta` namespace at the backend
//! edge.

mod client;
mod health;
pub(crate) mod meta;
mod registry;
pub mod sse;

pub use client::{
    BackendCapabilities, BackendClient, BackendError, BackendEvent, BackendEventKind, OpenError,
};
pub use health::{BackendHealth, CircuitState, HealthSettings, HealthSnapshot, HealthStatus};
pub use registry::BackendRegistry;
