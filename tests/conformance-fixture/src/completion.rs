//! `completion/complete`: the suite completes an argument of
//! `test_prompt_with_arguments` and the `{id}` of the resource template; both get fixed
//! candidates filtered by the typed prefix.

use rmcp::ErrorData;
use rmcp::model::{CompleteRequestParams, CompleteResult, Reference};
use serde_json::json;

use crate::complete;
use crate::resources::TEMPLATE;

/// `completion/complete`.
pub(crate) fn complete_argument(
    params: CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    let candidates: &[&str] = match &params.r#ref {
        Reference::Prompt(p) if p.name == "test_prompt_with_arguments" => {
            &["paris", "park", "party"]
        }
        Reference::Resource(r) if r.uri == TEMPLATE => &["1", "2", "123"],
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|v| v.starts_with(params.argument.value.as_str()))
        .collect();
    complete(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
}
