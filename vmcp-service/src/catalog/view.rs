//! The catalog as the layers see it: a [`CatalogView`] answers which backend owns a
//! tool, prompt or resource, and a tool's annotations, for authorization, audit and
//! telemetry.

use std::sync::Arc;

use rmcp::model::Tool;
use vmcp_layers::context::{CatalogView, ToolAnnotations, ToolInfo};

use super::Catalog;

/// A tool's MCP annotations as the layers' [`ToolAnnotations`].
pub(crate) fn annotations(tool: &Tool) -> ToolAnnotations {
    tool.annotations
        .as_ref()
        .map(|a| ToolAnnotations {
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
            open_world: a.open_world_hint,
        })
        .unwrap_or_default()
}

impl CatalogView for Catalog {
    fn tool(&self, name: &str) -> Option<ToolInfo> {
        Catalog::tool(self, name).map(|entry| ToolInfo {
            backend: entry.route.backend.clone(),
            annotations: annotations(&entry.tool),
        })
    }

    fn prompt_backend(&self, name: &str) -> Option<Arc<str>> {
        self.prompt(name).map(|entry| entry.route.backend.clone())
    }

    fn resource_backend(&self, uri: &str) -> Option<Arc<str>> {
        // A template string (a `ref/resource` completion, a listed template) is
        // owned like the URIs it matches, so list and completion decide alike.
        self.completion_owner_for_resource(uri).cloned()
    }
}
