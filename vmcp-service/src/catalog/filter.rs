//! Per-backend tool overrides and visibility, applied before conflict resolution.

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::Value;

use crate::config::VmcpConfig;

/// A backend tool after overrides, with its visibility decided.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The backend's own name for the tool (what calls are routed under).
    pub original: String,
    /// The tool as it will be advertised, named by its override (not yet prefixed).
    pub tool: Tool,
    /// Whether clients see (and may call) it; hidden tools stay routable internally.
    pub advertised: bool,
}

/// Apply `aggregation.tools[workload=backend]` and the global switches to a backend's tools.
///
/// A tool is advertised unless `excludeAllTools` is set, the backend's entry says
/// `excludeAll`, its `filter` does not list the tool (by original or overridden
/// name), or `defaultToolVisibility: deny` applies to a backend without an entry.
pub fn prepare_tools(config: &VmcpConfig, backend: &str, tools: Vec<Tool>) -> Vec<Prepared> {
    let entry = config.tools_for(backend);
    let aggregation = &config.aggregation;
    let backend_visible = !aggregation.exclude_all_tools
        && !entry.is_some_and(|e| e.exclude_all)
        && (entry.is_some() || !config.default_deny());
    tools
        .into_iter()
        .map(|mut tool| {
            let original = tool.name.to_string();
            if let Some(o) = entry.and_then(|e| e.overrides.get(&original)) {
                if let Some(name) = &o.name {
                    tool.name = name.clone().into();
                }
                if let Some(description) = &o.description {
                    tool.description = Some(description.clone().into());
                }
                if let Some(set) = &o.annotations {
                    tool.annotations = Some(merge_annotations(tool.annotations.take(), set));
                }
            }
            let filtered_in = entry.and_then(|e| e.filter.as_ref()).is_none_or(|filter| {
                filter
                    .iter()
                    .any(|f| *f == original || f.as_str() == tool.name.as_ref())
            });
            Prepared {
                original,
                advertised: backend_visible && filtered_in,
                tool,
            }
        })
        .collect()
}

/// Merge override fields over the backend's annotations (validated keys only).
fn merge_annotations(
    base: Option<ToolAnnotations>,
    set: &serde_json::Map<String, Value>,
) -> ToolAnnotations {
    let mut merged = match base.map(serde_json::to_value) {
        Some(Ok(Value::Object(map))) => map,
        _ => serde_json::Map::new(),
    };
    for (key, value) in set {
        merged.insert(key.clone(), value.clone());
    }
    serde_json::from_value(Value::Object(merged)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use std::sync::Arc;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "d", Arc::new(serde_json::Map::new()))
    }

    #[test]
    fn overrides_and_filters_apply() {
        let config = load_str(
            r#"
backends: [{name: gh, url: "http://h/mcp"}, {name: jira, url: "http://h/mcp"}, {name: docs, url: "http://h/mcp"}]
aggregation:
  tools:
    - workload: gh
      filter: [create_pr, list_issues]
      overrides:
        create_pr: {name: open_pull_request, description: Open a PR, annotations: {destructiveHint: false, title: PR}}
    - workload: jira
      excludeAll: true
"#,
        )
        .unwrap()
        .config;
        let gh = prepare_tools(
            &config,
            "gh",
            vec![tool("create_pr"), tool("delete_repo"), tool("list_issues")],
        );
        assert_eq!(gh[0].tool.name, "open_pull_request");
        assert_eq!(gh[0].original, "create_pr");
        assert_eq!(gh[0].tool.description.as_deref(), Some("Open a PR"));
        let ann = gh[0].tool.annotations.as_ref().unwrap();
        assert_eq!(ann.destructive_hint, Some(false));
        assert_eq!(ann.title.as_deref(), Some("PR"));
        assert!(gh[0].advertised);
        assert!(!gh[1].advertised, "delete_repo is not in the filter");
        assert!(gh[2].advertised);
        let jira = prepare_tools(&config, "jira", vec![tool("get_issue")]);
        assert!(!jira[0].advertised);
        let docs = prepare_tools(&config, "docs", vec![tool("search")]);
        assert!(docs[0].advertised, "no entry and default allow");
    }

    #[test]
    fn default_deny_and_exclude_all_tools() {
        let config = load_str(
            "backends: [{name: a, url: 'http://h/mcp'}, {name: b, url: 'http://h/mcp'}]\naggregation:\n  defaultToolVisibility: deny\n  tools: [{workload: a}]\n",
        )
        .unwrap()
        .config;
        assert!(prepare_tools(&config, "a", vec![tool("x")])[0].advertised);
        assert!(!prepare_tools(&config, "b", vec![tool("x")])[0].advertised);
        let config = load_str(
            "backends: [{name: a, url: 'http://h/mcp'}]\naggregation: {excludeAllTools: true}\n",
        )
        .unwrap()
        .config;
        assert!(!prepare_tools(&config, "a", vec![tool("x")])[0].advertised);
    }
}
