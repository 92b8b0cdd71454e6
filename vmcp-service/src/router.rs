//! Routing: which backend serves a request, under which of its own names.
//!
//! Every name translation from the advertised catalog back to a backend's own name
//! happens here, together with stripping the reserved `_meta` keys the client sent,
//! so the forwarding code only ever sees requests already shaped for the backend.

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams,
    ReadResourceRequestParams, Reference, RequestMetaObject,
};

use vmcp_layers::shown::shown;

use crate::backend::meta::strip_reserved;
use crate::catalog::Catalog;

/// A request translated for its backend.
#[derive(Debug, Clone)]
pub(crate) struct Routed<P> {
    /// The backend that serves it.
    pub(crate) backend: Arc<str>,
    /// The parameters, under the backend's own names.
    pub(crate) params: P,
}

/// Clean the client's `_meta` for the backend hop: drop reserved keys and the
/// progress token (the backend connection mints its own).
fn backend_meta(meta: Option<RequestMetaObject>) -> Option<RequestMetaObject> {
    let mut meta = meta?;
    strip_reserved(&mut meta.0.0);
    meta.0.0.remove("progressToken");
    (!meta.0.0.is_empty()).then_some(meta)
}

/// The error for a name nobody serves. The name is the client's: it is [`shown`]
/// (cut, escaped), since rmcp logs every error answer and a 1 MiB tool name must not
/// become a 1 MiB answer and log line.
pub(crate) fn unknown(kind: &str, name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown {kind}: {}", shown(name)), None)
}

/// Route `tools/call` by advertised name. Hidden and unknown tools give the same
/// `-32602`, so the answer reveals nothing about what is hidden.
pub(crate) fn route_tool(
    catalog: &Catalog,
    mut params: CallToolRequestParams,
) -> Result<Routed<CallToolRequestParams>, ErrorData> {
    let entry = catalog
        .tool(&params.name)
        .ok_or_else(|| unknown("tool", &params.name))?;
    params.name = entry.route.name.clone().into();
    params.meta = backend_meta(params.meta);
    Ok(Routed {
        backend: entry.route.backend.clone(),
        params,
    })
}

/// Route `prompts/get` by advertised name.
pub(crate) fn route_prompt(
    catalog: &Catalog,
    mut params: GetPromptRequestParams,
) -> Result<Routed<GetPromptRequestParams>, ErrorData> {
    let entry = catalog
        .prompt(&params.name)
        .ok_or_else(|| unknown("prompt", &params.name))?;
    params.name = entry.route.name.clone();
    params.meta = backend_meta(params.meta);
    Ok(Routed {
        backend: entry.route.backend.clone(),
        params,
    })
}

/// Route `resources/read`: exact URI, then template match. URIs are never rewritten.
pub(crate) fn route_resource(
    catalog: &Catalog,
    mut params: ReadResourceRequestParams,
) -> Result<Routed<ReadResourceRequestParams>, ErrorData> {
    let backend = catalog
        .resource_owner(&params.uri)
        .ok_or_else(|| {
            let uri = shown(&params.uri).to_string();
            ErrorData::invalid_params(
                format!("unknown resource: {uri}"),
                Some(serde_json::json!({ "uri": uri })),
            )
        })?
        .clone();
    params.meta = backend_meta(params.meta);
    Ok(Routed { backend, params })
}

/// Route `completion/complete`. `Ok(None)` means nobody can complete it (the caller
/// answers with an empty completion, as the spec allows).
pub(crate) fn route_completion(
    catalog: &Catalog,
    mut params: CompleteRequestParams,
) -> Result<Option<Routed<CompleteRequestParams>>, ErrorData> {
    let backend = match &mut params.r#ref {
        Reference::Prompt(prompt) => {
            let entry = catalog
                .prompt(&prompt.name)
                .ok_or_else(|| unknown("prompt", &prompt.name))?;
            prompt.name = entry.route.name.clone();
            entry.route.backend.clone()
        }
        Reference::Resource(resource) => match catalog.completion_owner_for_resource(&resource.uri)
        {
            Some(backend) => backend.clone(),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    if !catalog.completes(&backend) {
        return Ok(None);
    }
    params.meta = backend_meta(params.meta);
    Ok(Some(Routed { backend, params }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_are_cut_in_errors() {
        let long = "é".repeat(1024 * 1024);
        let error = unknown("tool", &long);
        assert!(error.message.len() < 700, "{}", error.message.len());
        assert!(
            error.message.ends_with("… (2097152 bytes)"),
            "{}",
            error.message
        );
        assert_eq!(
            unknown("tool", "a\nINFO forged").message,
            r"unknown tool: a\nINFO forged"
        );
        assert_eq!(unknown("tool", "gh_x").message, "unknown tool: gh_x");
    }
}
