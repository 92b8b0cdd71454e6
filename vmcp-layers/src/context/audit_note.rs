//! A note the audit layer hands down with the request, for what its response cannot
//! carry back: a request whose response never comes (the client went away, so the
//! response future is dropped) is still audited with its method, caller and backend,
//! and a call the service cancelled on the caller's word is audited as `cancelled`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::{BackendTarget, Identity, ParsedMcpRequest};

/// Shared between the audit layer and everything inside it (request extensions).
/// The layers that learn the request, the caller and the backend write them here as
/// well as into the response; the service marks a call its caller cancelled.
#[derive(Debug, Clone, Default)]
pub struct AuditNote(Arc<Noted>);

#[derive(Debug, Default)]
struct Noted {
    parsed: OnceLock<Arc<ParsedMcpRequest>>,
    identity: OnceLock<Arc<Identity>>,
    backend: OnceLock<BackendTarget>,
    cancelled: AtomicBool,
}

impl AuditNote {
    /// The request as parsed (the first one noted counts).
    pub fn parsed(&self, parsed: &Arc<ParsedMcpRequest>) {
        let _ = self.0.parsed.set(parsed.clone());
    }

    /// The authenticated caller.
    pub fn identity(&self, identity: &Arc<Identity>) {
        let _ = self.0.identity.set(identity.clone());
    }

    /// The backend that serves the request.
    pub fn backend(&self, backend: &BackendTarget) {
        let _ = self.0.backend.set(backend.clone());
    }

    /// The caller cancelled the request (a Legacy `notifications/cancelled`), and the
    /// service stopped it: whatever the response shows, the request's audit line says
    /// `cancelled`.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`AuditNote::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Relaxed)
    }

    /// The noted request.
    pub fn parsed_request(&self) -> Option<&Arc<ParsedMcpRequest>> {
        self.0.parsed.get()
    }

    /// The noted caller.
    pub fn caller(&self) -> Option<&Arc<Identity>> {
        self.0.identity.get()
    }

    /// The noted backend.
    pub fn backend_target(&self) -> Option<&BackendTarget> {
        self.0.backend.get()
    }
}
