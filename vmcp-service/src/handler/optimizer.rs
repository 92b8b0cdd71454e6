//! The handler's side of the optimizer (`crate::optimizer`): the two advertised
//! tools, and `find_tool`'s search filtered by the caller's admission. `call_tool`
//! arrives here only when it could not be rewritten into the call it wraps.

use std::borrow::Cow;
use std::collections::HashSet;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ResultType, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value, json};

use super::VmcpHandler;
use super::admission::admitted_tools;
use crate::catalog::Catalog;
use crate::optimizer::index::query;
use crate::optimizer::{CALL_TOOL, FIND_TOOL};

/// The `find_tool` search: the free text and the keywords.
fn search_texts(arguments: &Map<String, Value>) -> Result<Vec<&str>, ErrorData> {
    let invalid = |message: &'static str| ErrorData::invalid_params(message, None);
    let Some(Value::String(description)) = arguments.get("tool_description") else {
        return Err(invalid("find_tool needs tool_description (a string)"));
    };
    let mut texts = vec![description.as_str()];
    match arguments.get("tool_keywords") {
        None | Some(Value::Null) => {}
        Some(Value::String(keyword)) => texts.push(keyword),
        Some(Value::Array(keywords)) => {
            for keyword in keywords {
                texts.push(
                    keyword
                        .as_str()
                        .ok_or_else(|| invalid("find_tool's tool_keywords must be strings"))?,
                );
            }
        }
        Some(_) => {
            return Err(invalid(
                "find_tool's tool_keywords must be an array of strings",
            ));
        }
    }
    Ok(texts)
}

/// Share of `baseline` not sent, in percent with two decimals.
fn savings(baseline: usize, returned: usize) -> f64 {
    if baseline == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
    let percent = (baseline.saturating_sub(returned)) as f64 * 100.0 / baseline as f64;
    (percent * 100.0).round() / 100.0
}

impl VmcpHandler {
    /// The optimizer's own tool named `name`, when the optimizer is on (the live
    /// config: a reload turns it on or off).
    pub(super) fn optimizer_tool(&self, name: &str) -> Option<Tool> {
        if self.aggregator.config().optimizer.is_none() || !crate::optimizer::is_meta_tool(name) {
            return None;
        }
        crate::optimizer::meta_tools()
            .into_iter()
            .find(|t| t.name == name)
    }

    /// The tools `tools/list` shows this caller: the optimizer advertises its two
    /// tools instead, to every caller.
    pub(super) fn advertised_tools<'a>(
        &self,
        ctx: &RequestContext<RoleServer>,
        catalog: &'a Catalog,
    ) -> Cow<'a, [Tool]> {
        match self.aggregator.config().optimizer {
            Some(_) => Cow::Owned(crate::optimizer::meta_tools()),
            None => admitted_tools(ctx, catalog),
        }
    }

    /// A call of `find_tool`, or of a `call_tool` that names no tool.
    pub(super) async fn call_optimizer(
        &self,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let config = self.aggregator.config();
        let Some(config) = config.optimizer.as_ref() else {
            // A reload turned the optimizer off between the check and here.
            return Err(crate::router::unknown("tool", &params.name));
        };
        if params.name == CALL_TOOL {
            return Err(ErrorData::invalid_params(
                "call_tool needs tool_name (the name of a tool find_tool returned) and \
                 parameters (an object of its arguments)",
                None,
            ));
        }
        debug_assert_eq!(params.name, FIND_TOOL);
        let arguments = params.arguments.unwrap_or_default();
        let texts = search_texts(&arguments)?;
        let catalog = self.aggregator.catalog();
        let index = self.optimizer.index(&catalog).await.map_err(|e| {
            tracing::warn!("{e}");
            ErrorData::internal_error("the tool search is unavailable", None)
        })?;
        // What this caller may call: what tools/list would show it without the
        // optimizer. Hits outside it are dropped before counting, so a caller learns
        // nothing of tools it may not call (not even how many there are).
        let visible = admitted_tools(ctx, &catalog);
        let visible: HashSet<&str> = visible.iter().map(|t| t.name.as_ref()).collect();
        let tools = index.tools();
        let baseline: usize = (0..tools.len())
            .filter(|&i| visible.contains(tools[i].name.as_ref()))
            .map(|i| index.tokens(i))
            .sum();
        let mut chosen = Vec::new();
        if let Some(fts_query) = query(&texts) {
            let fts_query: std::sync::Arc<str> = fts_query.into();
            // Pages of hits, best first, until enough of them are this caller's.
            let page = i64::try_from(config.max_tools().max(8) * 4).unwrap_or(32);
            let mut offset = 0;
            loop {
                let hits = index
                    .search_blocking(fts_query.clone(), page, offset)
                    .await
                    .map_err(|e| {
                        tracing::warn!("{e}");
                        ErrorData::internal_error("the tool search failed", None)
                    })?;
                let full = i64::try_from(hits.len()).unwrap_or(0) == page;
                chosen.extend(
                    hits.into_iter()
                        .filter(|hit| visible.contains(tools[hit.position].name.as_ref())),
                );
                if chosen.len() >= config.max_tools() || !full {
                    break;
                }
                offset += page;
            }
            chosen.truncate(config.max_tools());
        }
        let returned: usize = chosen.iter().map(|hit| index.tokens(hit.position)).sum();
        let found: Vec<Value> = chosen
            .iter()
            .map(|hit| {
                let tool = &tools[hit.position];
                json!({
                    "name": tool.name,
                    "description": tool.description.as_deref().unwrap_or_default(),
                    "input_schema": &*tool.input_schema,
                })
            })
            .collect();
        let mut result = CallToolResult::structured(json!({
            "tools": found,
            "token_metrics": {
                "baseline_tokens": baseline,
                "returned_tokens": returned,
                "savings_percent": savings(baseline, returned),
            }
        }));
        result.result_type = Some(ResultType::COMPLETE);
        Ok(CallToolResponse::Complete(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savings_are_a_rounded_share() {
        assert!((savings(1000, 125) - 87.5).abs() < f64::EPSILON);
        assert!((savings(3, 1) - 66.67).abs() < 1e-9);
        assert!(savings(0, 0).abs() < f64::EPSILON);
    }

    #[test]
    fn search_arguments_are_checked() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            search_texts(&args(
                json!({"tool_description": "a", "tool_keywords": ["b", "c"]})
            ))
            .unwrap(),
            ["a", "b", "c"]
        );
        assert!(search_texts(&args(json!({"tool_keywords": ["b"]}))).is_err());
        assert!(
            search_texts(&args(
                json!({"tool_description": "a", "tool_keywords": [1]})
            ))
            .is_err()
        );
    }
}
