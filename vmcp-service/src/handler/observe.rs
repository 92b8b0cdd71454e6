//! Backend calls as telemetry sees them: a span per call, ended with its outcome,
//! and the span's `traceparent` in the backend request's `_meta`.

use rmcp::RoleServer;
use rmcp::model::RequestMetaObject;
use rmcp::service::RequestContext;
use vmcp_layers::context::{BackendCallScope, BackendCalls};

use super::admission::extension;
use crate::backend::BackendError;

/// One backend call, observed when telemetry is on.
pub(super) struct ObservedCall(Option<Box<dyn BackendCallScope>>);

impl ObservedCall {
    /// A backend call starts: open its span and put the span's `traceparent` into the
    /// backend request's `_meta`.
    pub(super) fn start(
        ctx: &RequestContext<RoleServer>,
        backend: &str,
        method: &str,
        name: Option<&str>,
        meta: &mut Option<RequestMetaObject>,
    ) -> Self {
        Self::start_with(extension::<BackendCalls>(ctx), backend, method, name, meta)
    }

    /// [`ObservedCall::start`] with the request's observer already in hand.
    pub(super) fn start_with(
        calls: Option<&BackendCalls>,
        backend: &str,
        method: &str,
        name: Option<&str>,
        meta: &mut Option<RequestMetaObject>,
    ) -> Self {
        let Some(calls) = calls else {
            return Self(None);
        };
        let scope = calls.0.start(backend, method, name);
        if let Some(traceparent) = scope.traceparent() {
            meta.get_or_insert_with(RequestMetaObject::default)
                .0
                .set_traceparent(traceparent);
        }
        Self(Some(scope))
    }

    /// The caller cancelled the call before the backend answered.
    pub(super) fn cancelled(self) {
        if let Some(scope) = self.0 {
            scope.end(Some("cancelled by the caller"));
        }
    }

    /// The call ended without a backend answer, for `reason` (e.g. the gateway could
    /// not get a Legacy caller's answer to the backend's `input_required`).
    pub(super) fn failed(self, reason: &str) {
        if let Some(scope) = self.0 {
            scope.end(Some(reason));
        }
    }

    /// The call ended with `result`.
    pub(super) fn end<T>(self, result: &Result<T, BackendError>) {
        if let Some(scope) = self.0 {
            let error = result.as_ref().err().map(ToString::to_string);
            scope.end(error.as_deref());
        }
    }
}
