//! The composite's step check at the HTTP door: a `tools/call` of a composite whose
//! step tools the caller may not call gets the gate's own denial (HTTP 403, JSON-RPC
//! 403, the same body as any forbidden call), before the run starts.
//!
//! The handler makes the same check again (and every step once more before it is
//! called), so the decision holds without the layer stack too.

use std::sync::Arc;

use vmcp_layers::context::{AdmissionHandle, CallKind, ParsedMcpRequest};

use super::Workflows;
use crate::catalog::{Catalog, annotations};

/// The JSON-RPC error body of a denied call with `id`, if this request calls a
/// composite with a forbidden step.
pub(crate) fn denial(
    workflows: &Workflows,
    catalog: &Catalog,
    extensions: &http::Extensions,
) -> Option<Vec<u8>> {
    let parsed = extensions.get::<Arc<ParsedMcpRequest>>()?;
    if parsed.method != "tools/call" {
        return None;
    }
    let workflow = workflows.get(parsed.name.as_deref()?)?;
    let admission = extensions.get::<AdmissionHandle>()?;
    let forbidden = workflow
        .step_entries(catalog)
        .into_iter()
        .any(|(_, entry)| {
            entry.is_some_and(|e| {
                !admission
                    .0
                    .tool(&e.tool.name, Some(&e.route.backend), &annotations(&e.tool))
            })
        });
    forbidden.then(|| {
        serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0",
            "id": parsed.id.clone().unwrap_or(serde_json::Value::Null),
            "error": {"code": vmcp_layers::jsonrpc::DENIED, "message": CallKind::Tool.denial_message()},
        }))
        .unwrap_or_default()
    })
}
