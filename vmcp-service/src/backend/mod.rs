//! Backends: their clients (streamable HTTP and legacy SSE), the registry of them,
//! and ownership of the reserved `_meta` namespace at the backend edge.

pub mod client;
pub mod meta;
pub mod reason;
pub mod registry;
pub mod sse;

pub use client::{
    BackendCapabilities, BackendClient, BackendError, BackendEvent, BackendEventKind,
};
pub use registry::BackendRegistry;
