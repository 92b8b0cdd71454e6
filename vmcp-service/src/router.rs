//! Routing: which backend serves a request, under which of its own names.
//!
//! Every name translation from the advertised catalog back to a backend's own name
//! happens here, together with stripping the reserved `_meta` keys the client sent,
//! so the forwarding code only ever sees requests already shaped for the backend.

use std::sync::Arc;

use regex::Regex;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams,
    ReadResourceRequestParams, Reference, RequestMetaObject,
};

use crate::backend::meta::strip_reserved;
use crate::catalog::Catalog;

/// A request translated for its backend.
#[derive(Debug, Clone)]
pub struct Routed<P> {
    /// The backend that serves it.
    pub backend: Arc<str>,
    /// The parameters, under the backend's own names.
    pub params: P,
}

/// Clean the client's `_meta` for the backend hop: drop reserved keys and the
/// progress token (the backend connection mints its own).
fn backend_meta(meta: Option<RequestMetaObject>) -> Option<RequestMetaObject> {
    let mut meta = meta?;
    strip_reserved(&mut meta.0.0);
    meta.0.0.remove("progressToken");
    (!meta.0.0.is_empty()).then_some(meta)
}

/// The longest client-supplied name repeated in an error (and so in logs): a 1 MiB
/// tool name must not become a 1 MiB answer and log line.
const SHOWN_NAME_CHARS: usize = 128;

/// `name`, cut to [`SHOWN_NAME_CHARS`] characters with an ellipsis.
fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(SHOWN_NAME_CHARS) {
        None => name.into(),
        Some((cut, _)) => format!("{}…", &name[..cut]).into(),
    }
}

fn unknown(kind: &str, name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown {kind}: {}", shown(name)), None)
}

/// Route `tools/call` by advertised name. Hidden and unknown tools give the same
/// `-32602`, so the answer reveals nothing about what is hidden.
pub fn route_tool(
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
pub fn route_prompt(
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
pub fn route_resource(
    catalog: &Catalog,
    mut params: ReadResourceRequestParams,
) -> Result<Routed<ReadResourceRequestParams>, ErrorData> {
    let backend = catalog
        .resource_owner(&params.uri)
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!("unknown resource: {}", shown(&params.uri)),
                Some(serde_json::json!({ "uri": shown(&params.uri) })),
            )
        })?
        .clone();
    params.meta = backend_meta(params.meta);
    Ok(Routed { backend, params })
}

/// Route `completion/complete`. `Ok(None)` means nobody can complete it (the caller
/// answers with an empty completion, as the spec allows).
pub fn route_completion(
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

/// An RFC 6570 URI template compiled for matching expanded URIs.
///
/// Supports the expressions resource templates use in practice: `{var}` (one path
/// segment), `{+var}` and `{#var}` (reserved expansion, may span segments),
/// `{/var}` (path segments), and `{?a,b}` / `{&a}` (an optional query tail).
#[derive(Debug, Clone)]
pub struct UriTemplate {
    regex: Regex,
}

/// Why a template could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid URI template: {0}")]
pub struct TemplateError(String);

impl UriTemplate {
    /// Compile a template.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        let mut pattern = String::from("^");
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            pattern.push_str(&regex::escape(&rest[..open]));
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| TemplateError(format!("unclosed '{{' in {template:?}")))?
                + open;
            let expr = &rest[open + 1..close];
            if expr.is_empty() {
                return Err(TemplateError(format!("empty expression in {template:?}")));
            }
            pattern.push_str(match expr.as_bytes()[0] {
                b'+' | b'#' => "(?:.*)",
                b'/' => "(?:/[^/?#]*)*",
                b'?' | b'&' => "(?:[?&][^#]*)?",
                b'.' => "(?:\\.[^/?#.]*)*",
                b';' => "(?:;[^/?#]*)*",
                _ => "(?:[^/?#]+)",
            });
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err(TemplateError(format!("unmatched '}}' in {template:?}")));
        }
        pattern.push_str(&regex::escape(rest));
        pattern.push('$');
        Regex::new(&pattern)
            .map(|regex| Self { regex })
            .map_err(|e| TemplateError(e.to_string()))
    }

    /// Whether `uri` is an expansion of this template.
    pub fn matches(&self, uri: &str) -> bool {
        self.regex.is_match(uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_are_cut_in_errors() {
        let long = "é".repeat(1024 * 1024);
        let error = unknown("tool", &long);
        assert!(error.message.len() < 400, "{}", error.message.len());
        assert!(error.message.ends_with('…'));
        assert_eq!(unknown("tool", "gh_x").message, "unknown tool: gh_x");
    }

    #[test]
    fn simple_expressions_match_one_segment() {
        let t = UriTemplate::parse("py://a/items/{id}").unwrap();
        assert!(t.matches("py://a/items/42"));
        assert!(!t.matches("py://a/items/"));
        assert!(!t.matches("py://a/items/4/2"));
        assert!(!t.matches("py://b/items/42"));
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert!(t.matches("test://template/7/data"));
    }

    #[test]
    fn operators_and_literals() {
        let t = UriTemplate::parse("file:///{+path}").unwrap();
        assert!(t.matches("file:///a/b/c.txt"));
        let t = UriTemplate::parse("db://x{?limit,offset}").unwrap();
        assert!(t.matches("db://x"));
        assert!(t.matches("db://x?limit=3"));
        let t = UriTemplate::parse("a.b+c://{x}").unwrap();
        assert!(t.matches("a.b+c://y"));
        assert!(!t.matches("aXb+c://y"));
        assert!(UriTemplate::parse("x://{oops").is_err());
        assert!(UriTemplate::parse("x://{}").is_err());
    }
}
