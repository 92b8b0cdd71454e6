//! Composite tools: multi-step workflows from `compositeTools`, advertised as
//! ordinary tools and run by the gateway.
//!
//! - [`Workflows`] is the set compiled from one configuration. The aggregator adds
//!   each composite to every catalog it builds, so every session lists the same
//!   composites (they come from configuration, never from session state).
//! - [`executor`] runs one call: a graph of `dependsOn` edges, independent steps in
//!   parallel, conditions, retries, forEach, timeouts.
//! - Each step calls its tool through a [`StepCaller`] (the handler): the same
//!   routing, authorization (the caller's admission decision under the step tool's
//!   own name), telemetry and audit as a direct call.
//!
//! Config model and static checks: `config::composite`; templates: `templates`.

mod annotations;
mod coerce;
mod done;
pub(crate) mod executor;
pub(crate) mod gate;
mod output;
pub(crate) mod paused;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, CompositeProblem, ToolEntry};
use crate::config::VmcpConfig;
use crate::config::composite::{CompositeToolConfig, ToolRef};

/// The composites of one configuration.
#[derive(Debug, Default)]
pub(crate) struct Workflows {
    by_name: BTreeMap<String, Arc<Workflow>>,
}

/// One composite tool.
#[derive(Debug)]
pub(crate) struct Workflow {
    pub(crate) config: CompositeToolConfig,
    /// The configured backend names (to read `<backend>.<tool>` step references).
    backends: Vec<String>,
}

impl Workflows {
    /// The composites of `config` (already validated).
    pub(crate) fn from_config(config: &VmcpConfig) -> Self {
        let backends: Vec<String> = config.backends.iter().map(|b| b.name.clone()).collect();
        let by_name = config
            .composite_tools
            .iter()
            .map(|c| {
                let workflow = Workflow {
                    config: c.clone(),
                    backends: backends.clone(),
                };
                (c.name.clone(), Arc::new(workflow))
            })
            .collect();
        Self { by_name }
    }

    /// The composite called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Workflow>> {
        self.by_name.get(name)
    }

    /// Every step tool that is not in `catalog` (a backend that does not offer it,
    /// is down, or filtered it out): the step fails when it runs. One problem each,
    /// naming the composite, the step and the tool.
    pub(crate) fn missing_step_tools(&self, catalog: &Catalog) -> Vec<CompositeProblem> {
        self.by_name
            .values()
            .flat_map(|w| {
                crate::config::composite_step_tools(&w.config.steps)
                    .into_iter()
                    .filter(|(_, tool)| w.resolve(catalog, tool).is_none())
                    .map(|(step, tool)| CompositeProblem::MissingStepTool {
                        composite: w.config.name.clone(),
                        step: step.to_owned(),
                        tool: tool.to_owned(),
                        backend: match ToolRef::parse(tool, w.backends.iter().map(String::as_str)) {
                            ToolRef::Qualified { backend, .. } => Some(Arc::from(backend)),
                            ToolRef::Advertised(_) => None,
                        },
                    })
            })
            .collect()
    }

    /// Each composite as advertised over `catalog`: annotations derived from the
    /// step tools found there.
    pub(crate) fn advertise(&self, catalog: &Catalog) -> Vec<Tool> {
        self.by_name.values().map(|w| w.tool(catalog)).collect()
    }
}

impl Workflow {
    /// The catalog entry a step's `tool` names, hidden tools included.
    pub(crate) fn resolve<'c>(&self, catalog: &'c Catalog, tool: &str) -> Option<&'c ToolEntry> {
        match ToolRef::parse(tool, self.backends.iter().map(String::as_str)) {
            ToolRef::Qualified { backend, original } => catalog
                .tool_entries()
                .iter()
                .find(|e| &*e.route.backend == backend && e.route.name == original),
            ToolRef::Advertised(name) => catalog.tool_any(name),
        }
    }

    /// Every tool step's (step id, entry), forEach inner steps included; `None` where
    /// the tool is not in the catalog.
    pub(crate) fn step_entries<'c>(
        &self,
        catalog: &'c Catalog,
    ) -> Vec<(&str, Option<&'c ToolEntry>)> {
        crate::config::composite_step_tools(&self.config.steps)
            .into_iter()
            .map(|(id, tool)| (id, self.resolve(catalog, tool)))
            .collect()
    }

    fn tool(&self, catalog: &Catalog) -> Tool {
        let entries = self.step_entries(catalog);
        let floor = annotations::floor(
            entries
                .iter()
                .map(|(_, e)| e.and_then(|e| e.tool.annotations.as_ref())),
        );
        let (annotations, refused) = annotations::merge(floor, self.config.annotations.as_ref());
        for hint in refused {
            tracing::error!(
                composite = %self.config.name,
                "annotations.{hint} claims the composite is safer than its steps' tools; the derived value is advertised"
            );
        }
        let input_schema = self.config.parameters.clone().unwrap_or_else(|| {
            json!({"type": "object"})
                .as_object()
                .cloned()
                .unwrap_or_default()
        });
        let mut tool = json!({
            "name": self.config.name,
            "description": self.config.description,
            "inputSchema": input_schema,
            "annotations": annotations,
        });
        if let Some(output) = &self.config.output {
            tool["outputSchema"] = Value::Object(output::schema(output));
        }
        serde_json::from_value(tool).unwrap_or_else(|e| {
            tracing::error!(composite = %self.config.name, "composite tool not representable: {e}");
            Tool::default()
        })
    }
}

/// The caller's answer to an elicitation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Elicited {
    /// `accept`, `decline` or `cancel`.
    pub(crate) action: String,
    /// The accepted content.
    pub(crate) content: Option<Map<String, Value>>,
}

/// How an elicitation step's question was handled.
#[derive(Debug)]
pub(crate) enum Ask {
    /// The caller answered now (2025-11-25: over its session).
    Answered(Elicited),
    /// The caller answers on its retry (2026-07-28: `input_required`); the run pauses
    /// once nothing else can progress.
    Later,
    /// This caller cannot answer: why (counts as a decline).
    Unavailable(String),
}

/// One step as the audit log records it.
#[derive(Debug, Clone)]
pub(crate) struct StepRecord<'a> {
    pub(crate) workflow_id: &'a str,
    pub(crate) composite: &'a str,
    pub(crate) step: &'a str,
    pub(crate) tool: Option<&'a str>,
    pub(crate) backend: Option<&'a str>,
    /// `success`, `failure`, `skipped`, `denied`, `timeout` or `cancelled`.
    pub(crate) outcome: &'static str,
    pub(crate) duration: Duration,
    pub(crate) attempts: u32,
}

/// How steps reach the outside world: the handler implements this with the same
/// routing, authorization, telemetry and audit as a direct call.
pub(crate) trait StepCaller: Send + Sync + 'static {
    /// Whether the caller may call this tool directly: with `arguments`, the decision
    /// a direct call with them gets (policies may read them); without, the
    /// argument-free decision (the check before the run starts).
    fn authorize(&self, entry: &ToolEntry, arguments: Option<&Map<String, Value>>) -> bool;
    /// A step starts: its telemetry scope (a span, whose children are the step's
    /// backend calls), if telemetry is on.
    fn observe_step(&self, step: &str) -> Option<Box<dyn vmcp_layers::context::StepScope>>;
    /// Call the tool on its backend, observed by `calls` (the step's scope; the
    /// request's without one); `Err` describes a failure that is not a tool result
    /// (unreachable backend, JSON-RPC error).
    fn call(
        &self,
        entry: ToolEntry,
        arguments: Map<String, Value>,
        calls: Option<vmcp_layers::context::BackendCalls>,
    ) -> BoxFuture<'static, Result<CallToolResult, String>>;
    /// Ask the caller, waiting at most `within` for its answer.
    fn elicit(
        &self,
        message: String,
        schema: Map<String, Value>,
        within: Duration,
    ) -> BoxFuture<'static, Ask>;
    /// Write one step's audit line.
    fn audit(&self, record: &StepRecord<'_>);
}
