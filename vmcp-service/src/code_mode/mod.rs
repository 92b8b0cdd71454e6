//! Code mode (docs/code-mode.md): `tools/list` also advertises
//! [`EXECUTE_TOOL_SCRIPT`], which runs a Starlark script calling the caller's tools
//! as functions.
//!
//! - The script runs in [`sandbox`] (no `load()`, no I/O, bounded steps, time,
//!   memory and output) on a thread of its own; each tool call is bridged back to
//!   the runtime by the handler (`handler::code_mode`).
//! - `execute_tool_script` itself is a gateway-local call (the feature flag is the
//!   grant, [`rewrite`]); every call the script makes is admitted, audited, rate
//!   limited, routed and connected as a direct call of that tool by its real name.
//! - A backend tool called `execute_tool_script` would be shadowed by this one and
//!   skip its own admission: the catalog build logs it as an error, and `tools/list`
//!   and calls of `execute_tool_script` refuse to answer until it is renamed or
//!   filtered out ([`collision`]).

pub(crate) mod names;
pub(crate) mod rewrite;
pub(crate) mod sandbox;

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::json;

use crate::catalog::Catalog;
use crate::config::{CodeModeConfig, VmcpConfig};

pub use crate::config::EXECUTE_TOOL_SCRIPT;

/// The code mode configuration, when code mode is on.
pub(crate) fn enabled(config: &VmcpConfig) -> Option<&CodeModeConfig> {
    config.code_mode.as_ref().filter(|c| c.enabled)
}

/// The advertised tool.
pub(crate) fn tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "script": {
                "type": "string",
                "description": "Starlark source. Each tool you can call is a function taking \
                                its arguments as keywords (names with characters other than \
                                letters, digits and _ have them replaced by _); \
                                parallel([lambda: tool(...), ...]) runs calls concurrently; \
                                `data` holds the data argument; `return` ends the script \
                                with its result."
            },
            "data": {
                "type": "object",
                "description": "Values the script reads as the global `data`."
            }
        },
        "required": ["script"]
    });
    let schema = match schema {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    };
    Tool::new(
        EXECUTE_TOOL_SCRIPT,
        "Run a Starlark script that calls the available tools as functions and returns \
         one combined result, instead of one tool call per turn.",
        schema,
    )
}

/// The backend that advertises a tool named [`EXECUTE_TOOL_SCRIPT`], if one does.
pub(crate) fn collision(catalog: &Catalog) -> Option<Arc<str>> {
    catalog
        .tool_entries()
        .iter()
        .find(|e| e.tool.name == EXECUTE_TOOL_SCRIPT)
        .map(|e| e.route.backend.clone())
}

/// The refusal while a backend advertises the reserved name (logged each time: it
/// is a configuration error the operator must fix).
pub(crate) fn collision_error(backend: &str) -> rmcp::ErrorData {
    let message = format!(
        "backend {backend:?} advertises a tool named {EXECUTE_TOOL_SCRIPT:?}, which code mode \
         reserves; rename it (aggregation.tools overrides) or filter it out"
    );
    tracing::error!("{message}");
    rmcp::ErrorData::internal_error(message, None)
}

/// Log, at each catalog build, a backend tool that collides with the script tool.
pub(crate) fn check_catalog(config: &VmcpConfig, catalog: &Catalog) {
    if enabled(config).is_some()
        && let Some(backend) = collision(catalog)
    {
        tracing::error!(
            backend = %backend,
            "a backend advertises a tool named {EXECUTE_TOOL_SCRIPT:?}, which code mode \
             reserves: tools/list and execute_tool_script refuse to answer until it is \
             renamed or filtered out"
        );
    }
}

/// `builder` with code mode's rewrite when `config` turns code mode on, in front of
/// the optimizer's (which it replaces in the builder, so apply this after
/// `optimizer::stacked`).
pub(crate) fn stacked(
    builder: vmcp_layers::stack::StackBuilder,
    config: &VmcpConfig,
    optimizer: Arc<dyn vmcp_layers::rewrite::RequestRewrite>,
) -> vmcp_layers::stack::StackBuilder {
    if enabled(config).is_none() {
        return builder;
    }
    // The optimizer's rewrite is always installed (it follows the live config), so
    // code mode's chains to it.
    builder.rewrite(Arc::new(rewrite::CodeModeRewrite {
        next: Some(optimizer),
    }))
}
