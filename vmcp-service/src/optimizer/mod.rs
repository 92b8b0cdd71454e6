//! The optimizer (docs/optimizer.md): `tools/list` advertises only [`FIND_TOOL`] and
//! [`CALL_TOOL`]; `find_tool` searches the catalog, `call_tool` calls a tool by name.
//!
//! - `call_tool` is rewritten into the `tools/call` it wraps before any layer reads
//!   the request ([`rewrite`]), so it is authenticated, authorized, audited, rate
//!   limited and routed as that call, by the real tool name: a forbidden tool
//!   answers exactly as a direct call of it does, and a nonexistent one as a direct
//!   call of that.
//! - `find_tool` searches one keyword index per catalog version ([`index`]), shared
//!   by every caller; each caller's admission filters the hits, so nobody learns of
//!   a tool they may not call.

pub(crate) mod index;
pub(crate) mod rewrite;
pub(crate) mod tokens;

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::json;

use crate::catalog::Catalog;
use crate::config::VmcpConfig;
use index::Index;

pub(crate) use crate::config::{CALL_TOOL, FIND_TOOL};

/// Whether `name` is one of the optimizer's own tools.
pub(crate) fn is_meta_tool(name: &str) -> bool {
    name == FIND_TOOL || name == CALL_TOOL
}

fn schema(value: serde_json::Value) -> Arc<JsonObject> {
    match value {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

/// The two tools advertised instead of the catalog's (the reference's shapes).
pub(crate) fn meta_tools() -> Vec<Tool> {
    let find = Tool::new(
        FIND_TOOL,
        "Search the available tools by what they do. Returns the best matching tools \
         (name, description, input schema) and how many tokens returning only them saved. \
         Call one with call_tool.",
        schema(json!({
            "type": "object",
            "properties": {
                "tool_description": {
                    "type": "string",
                    "description": "What the tool should do, in natural language."
                },
                "tool_keywords": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Extra keywords to match (names, nouns, verbs)."
                }
            },
            "required": ["tool_description"]
        })),
    );
    let call = Tool::new(
        CALL_TOOL,
        "Call a tool found with find_tool, by its name, with its parameters.",
        schema(json!({
            "type": "object",
            "properties": {
                "tool_name": {
                    "type": "string",
                    "description": "The tool's name, as find_tool returned it."
                },
                "parameters": {
                    "type": "object",
                    "description": "The tool's arguments, as its input schema describes them."
                }
            },
            "required": ["tool_name"]
        })),
    );
    vec![call, find]
}

/// The index of the current catalog version, shared by every caller.
#[derive(Default)]
pub(crate) struct Optimizer {
    /// The catalog the index was built from, and the index. A lock held while a
    /// build runs, so concurrent callers after a change wait for one build.
    current: tokio::sync::Mutex<Option<(Arc<Catalog>, Arc<Index>)>>,
}

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optimizer").finish_non_exhaustive()
    }
}

impl Optimizer {
    /// The index of `catalog`, built now if the catalog changed since the last one
    /// (a backend's `list_changed`, a reload, a backend joining).
    pub(crate) async fn index(
        &self,
        catalog: &Arc<Catalog>,
    ) -> Result<Arc<Index>, index::IndexError> {
        let mut current = self.current.lock().await;
        if let Some((built, index)) = current.as_ref()
            && Arc::ptr_eq(built, catalog)
        {
            return Ok(index.clone());
        }
        let tools = catalog.tools().to_vec();
        let index = tokio::task::spawn_blocking(move || Index::build(&tools))
            .await
            .map_err(|_| index::IndexError::Build("the index build was cancelled".into()))??;
        let index = Arc::new(index);
        *current = Some((catalog.clone(), index.clone()));
        Ok(index)
    }
}

/// `builder` with the optimizer's rewrite. It is always installed and follows the
/// live configuration: a reload that turns the optimizer on or off changes what
/// `find_tool`/`call_tool` mean without rebuilding the stack (a stack built by
/// `Vmcp::stack` is never rebuilt).
pub(crate) fn stacked(
    builder: vmcp_layers::stack::StackBuilder,
    aggregator: &Arc<crate::aggregator::Aggregator>,
) -> vmcp_layers::stack::StackBuilder {
    builder.rewrite(request_rewrite(aggregator))
}

/// The optimizer's request rewrite (code mode chains to it).
pub(crate) fn request_rewrite(
    aggregator: &Arc<crate::aggregator::Aggregator>,
) -> Arc<dyn vmcp_layers::rewrite::RequestRewrite> {
    Arc::new(rewrite::OptimizerRewrite::new(aggregator.clone()))
}

/// Log, once at start, that the optimizer is on and which of its keys wait for the
/// semantic tier.
pub(crate) fn announce(config: &VmcpConfig) {
    let Some(optimizer) = &config.optimizer else {
        return;
    };
    tracing::info!(
        max_tools_to_return = optimizer.max_tools(),
        "optimizer on: tools/list shows find_tool and call_tool (keyword search)"
    );
    let semantic = optimizer.semantic_keys();
    if !semantic.is_empty() {
        tracing::warn!(
            keys = ?semantic,
            "optimizer: the semantic tier is not implemented yet; these keys are accepted \
             but not used, and find_tool searches by keyword only"
        );
    }
}
