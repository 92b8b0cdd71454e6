//! The embedded default configuration and the commented starter written by `init`.

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
        ..VmcpConfig::default()
    };
    Ok(EmbeddedDefault {
        config,
        backends: vec![alpha, beta],
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_starter_config_is_valid() {
        let loaded = vmcp_service::config::load_str(super::STARTER_YAML).unwrap();
        assert_eq!(loaded.config.backends.len(), 2);
        assert!(loaded.ignored_keys.is_empty(), "{:?}", loaded.ignored_keys);
    }
}
