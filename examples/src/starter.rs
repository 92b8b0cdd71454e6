//! The embedded default configuration and the commented starter written by `init`.

use vmcp_service::config::composite::CompositeToolConfig;
use vmcp_service::config::{BackendConfig, VmcpConfig};

use crate::demo::{DemoSpec, RunningDemo, spawn};

/// The commented starter configuration `vmcp init` writes.
pub const STARTER_YAML: &str = r#"# yaml-language-server: $schema=./vmcp.schema.json
# vmcp configuration. Keys follow the reference vMCP's file where it has one.
# Check it with: vmcp validate --config vmcp.yaml
# Editor completion: vmcp schema > vmcp.schema.json (the line above points at it).
name: my-vmcp                  # advertised as serverInfo.name
groupRef: default              # reported on the status surface

backends:                      # inline backends
  - name: github               # unique; the {workload} of prefixes
    url: http://127.0.0.1:18101/mcp
    transport: streamable-http # streamable-http (default; both MCP revisions) | sse (legacy HTTP+SSE)
  - name: jira
    url: http://127.0.0.1:18102/sse
    transport: sse
    metadata: {env: dev}

aggregation:
  conflictResolution: prefix   # prefix (default) | priority | manual
  conflictResolutionConfig:
    prefixFormat: "{workload}_"  # {workload} is replaced by the backend name
    # priorityOrder: [github, jira]   # required for priority: listed backends keep bare names
  defaultToolVisibility: allow # allow | deny (deny: only backends listed under tools advertise tools)
  excludeAllTools: false       # true hides every tool (they stay routable internally)
  tools:
    - workload: github
      # filter: [create_pr, list_issues]   # advertise only these
      overrides:
        create_pr:
          name: open_pull_request
          description: Open a GitHub pull request
          annotations: {destructiveHint: false}
    # - workload: jira
    #   excludeAll: true

operational:
  timeouts:
    default: 30s               # bound on one backend call
    discovery: 10s             # bound on one backend's listing during aggregation
    # perWorkload: {github: 45s}

# Composite tools: workflows advertised as ordinary tools (docs/composite-tools.md).
# Each step is authorized as its own tool for the caller, and audited.
# compositeTools:
#   - name: triage_issue
#     description: Fetch a Jira issue, then open a pull request for it
#     parameters:
#       type: object
#       properties: {issue_key: {type: string}, repo: {type: string}}
#       required: [issue_key, repo]
#     timeout: 10m             # the whole workflow (default 30m)
#     steps:
#       - id: fetch
#         tool: jira.get_issue # <backend>.<its own tool name>, or an advertised name
#         arguments: {key: "{{ params.issue_key }}"}
#         onError: {action: retry, retryCount: 3, retryDelay: 2s}
#       - id: open_pr
#         tool: open_pull_request
#         dependsOn: [fetch]
#         arguments: {repo: "{{ params.repo }}", title: "{{ steps.fetch.output.summary }}"}
#     output:
#       properties:
#         pr_url: {type: string, value: "{{ steps.open_pr.output.url }}", default: ""}
"#;

/// The demo backends of the embedded default, while they run.
#[derive(Debug)]
pub struct EmbeddedDefault {
    /// The configuration pointing at the demo backends.
    pub config: VmcpConfig,
    /// The running demo backends; dropping them stops them.
    pub backends: Vec<RunningDemo>,
}

/// Start two small demo backends on free loopback ports and a configuration that
/// aggregates them. Both offer an `echo` tool, so prefix conflict resolution shows.
pub async fn embedded_default() -> std::io::Result<EmbeddedDefault> {
    let alpha = spawn(
        DemoSpec {
            resources: vec!["demo://alpha/readme".into()],
            templates: vec!["demo://alpha/notes/{id}".into()],
            prompts: vec!["summarize".into()],
            ..DemoSpec::new("alpha", &["echo", "add"])
        },
        0,
    )
    .await?;
    let beta = spawn(
        DemoSpec {
            resources: vec!["demo://beta/readme".into()],
            prompts: vec!["summarize".into()],
            ..DemoSpec::new("beta", &["echo", "upper"])
        },
        0,
    )
    .await?;
    let backend = |name: &str, demo: &RunningDemo| BackendConfig {
        name: name.to_owned(),
        url: demo.url(),
        ..BackendConfig::default()
    };
    let config = VmcpConfig {
        name: Some("vmcp-demo".into()),
        group_ref: Some("demo".into()),
        backends: vec![backend("alpha", &alpha), backend("beta", &beta)],
        composite_tools: vec![shout()],
        ..VmcpConfig::default()
    };
    Ok(EmbeddedDefault {
        config,
        backends: vec![alpha, beta],
    })
}

/// The embedded default's composite tool: a workflow over both demo backends.
fn shout() -> CompositeToolConfig {
    serde_json::from_value(serde_json::json!({
        "name": "shout",
        "description": "echo on alpha, then upper-case the answer on beta (a composite tool)",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "annotations": {"title": "Shout"},
        "steps": [
            {"id": "echo", "tool": "alpha_echo", "arguments": {"text": "{{ params.text }}"}},
            {"id": "upper", "tool": "beta.upper", "dependsOn": ["echo"],
             "arguments": {"text": "{{ steps.echo.content.text }}"}}
        ]
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_starter_config_is_valid() {
        let loaded = vmcp_service::config::load_str(super::STARTER_YAML).unwrap();
        assert_eq!(loaded.config.backends.len(), 2);
        assert!(loaded.ignored_keys.is_empty(), "{:?}", loaded.ignored_keys);
    }

    #[test]
    fn the_embedded_composite_is_valid() {
        let shout = super::shout();
        assert_eq!(shout.steps.len(), 2);
        let config = vmcp_service::config::VmcpConfig {
            backends: ["alpha", "beta"]
                .map(|name| vmcp_service::config::BackendConfig {
                    name: name.into(),
                    url: "http://127.0.0.1:1/mcp".into(),
                    ..Default::default()
                })
                .into(),
            composite_tools: vec![shout],
            ..Default::default()
        };
        vmcp_service::config::validate(&config).unwrap();
    }
}
