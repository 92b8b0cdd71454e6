//! What a backend announces: list changes, resource updates, connection and health
//! changes, fanned out to whoever keeps derived state.

use std::sync::Arc;

/// A change a backend announced, fanned out to whoever keeps derived state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendEvent {
    /// The backend that sent it.
    pub backend: Arc<str>,
    /// What changed.
    pub kind: BackendEventKind,
}

/// The kinds of [`BackendEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendEventKind {
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// `notifications/resources/list_changed` (covers templates too).
    ResourcesChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// `notifications/resources/updated` for a URI.
    ResourceUpdated(String),
    /// A connection was (re)established.
    Connected,
    /// The connection was lost or could not be opened.
    Disconnected,
    /// The backend's health status changed.
    HealthChanged,
}
