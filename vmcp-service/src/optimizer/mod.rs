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

pub(crate) mod embed_client;
pub(crate) mod index;
pub mod retrieval;
pub(crate) mod rewrite;
pub(crate) mod search;
pub(crate) mod semantic;
pub(crate) mod tokens;

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::json;

use crate::catalog::Catalog;
use crate::config::{OptimizerConfig, VmcpConfig};
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
    /// The semantic tier of the live config's embedding keys, and those keys: a
    /// reload that changes them makes a new one (`None` without `embeddingService`).
    semantic: std::sync::Mutex<Option<(OptimizerConfig, Option<Arc<semantic::Semantic>>)>>,
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
        // The new catalog's tools are embedded now, off the search path.
        let semantic = self.semantic.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, Some(semantic))) = semantic.as_ref() {
            semantic.prepare(&index);
        }
        Ok(index)
    }

    /// The semantic tier `config` asks for (`None` without `embeddingService`),
    /// made again only when its embedding keys change.
    pub(crate) fn semantic(&self, config: &OptimizerConfig) -> Option<Arc<semantic::Semantic>> {
        let keys = OptimizerConfig {
            max_tools_to_return: None,
            ..config.clone()
        };
        let mut slot = self.semantic.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((built, semantic)) = slot.as_ref()
            && *built == keys
        {
            return semantic.clone();
        }
        let semantic = semantic::Semantic::from_config(config)
            .map_err(|e| tracing::warn!("optimizer: {e}; keyword search only"))
            .ok()
            .flatten()
            .map(Arc::new);
        *slot = Some((keys, semantic.clone()));
        semantic
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

/// Log, once at start, that the optimizer is on and which search it uses.
pub(crate) fn announce(config: &VmcpConfig) {
    let Some(optimizer) = &config.optimizer else {
        return;
    };
    // The endpoint's URL is not logged: it may carry credentials.
    let search = match optimizer.embedding_service {
        Some(_) => "hybrid search: keyword and embeddings",
        None => "keyword search",
    };
    tracing::info!(
        max_tools_to_return = optimizer.max_tools(),
        "optimizer on: tools/list shows find_tool and call_tool ({search})"
    );
}
