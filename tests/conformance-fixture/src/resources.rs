//! The `resources/*` fixtures: `test://static-text`, `test://static-binary`,
//! `test://watched-resource` and the template `test://template/{id}/data`, with the
//! reference server's contents and SEP-2164 resource-not-found.

use rmcp::ErrorData;
use rmcp::model::{ReadResourceRequestParams, ReadResourceResponse};
use serde_json::{Value, json};

use crate::{TEST_IMAGE_BASE64, complete};

/// Every static resource, as `resources/list` JSON.
pub(crate) fn table() -> Value {
    json!([
        {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
         "description": "A static text resource for testing", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
         "description": "A static binary resource (image) for testing", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource",
         "description": "A resource clients can subscribe to", "mimeType": "text/plain"}
    ])
}

/// The one resource template's URI template (also completed by `completion/complete`).
pub(crate) const TEMPLATE: &str = "test://template/{id}/data";

/// The resource templates, as `resources/templates/list` JSON.
pub(crate) fn template_table() -> Value {
    json!([{
        "uriTemplate": TEMPLATE, "name": "template", "title": "Resource Template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json"}])
}

/// `resources/read`.
pub(crate) fn read(params: ReadResourceRequestParams) -> Result<ReadResourceResponse, ErrorData> {
    let uri = params.uri.as_str();
    let content = match uri {
        "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource."}),
        "test://static-binary" => {
            json!({"uri": uri, "mimeType": "image/png", "blob": TEST_IMAGE_BASE64})
        }
        "test://watched-resource" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
        }
        _ => match uri
            .strip_prefix("test://template/")
            .and_then(|rest| rest.strip_suffix("/data"))
            .filter(|id| !id.is_empty() && !id.contains('/'))
        {
            Some(id) => json!({"uri": uri, "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
            None => {
                // SEP-2164: rmcp turns -32002 into -32602 for 2026-07-28 requests.
                return Err(ErrorData::resource_not_found(
                    format!("Resource not found: {uri}"),
                    Some(json!({"uri": uri})),
                ));
            }
        },
    };
    Ok(complete::<rmcp::model::ReadResourceResult>(json!({"contents": [content]}))?.into())
}
