//! `compositeTools:` — multi-step workflows advertised as ordinary tools (the YAML
//! model, with the reference's keys). Checked by [`check`]; run by `crate::composite`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Default bound on a whole workflow.
pub const DEFAULT_WORKFLOW_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default bound on one step (each attempt).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The most steps a composite may have.
pub const MAX_STEPS: usize = 100;
/// The most retries of one step.
pub const MAX_RETRIES: u32 = 10;
/// Default and largest `forEach.maxParallel`.
pub const DEFAULT_FOREACH_PARALLEL: usize = 10;
/// The largest `forEach.maxParallel`.
pub const MAX_FOREACH_PARALLEL: usize = 50;
/// Default `forEach.maxIterations`.
pub const DEFAULT_FOREACH_ITERATIONS: usize = 100;
/// The largest `forEach.maxIterations`.
pub const MAX_FOREACH_ITERATIONS: usize = 1000;
/// Steps of one workflow running at once.
pub const DAG_PARALLEL: usize = 10;

/// One composite tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeToolConfig {
    /// The advertised tool name (`^[a-zA-Z0-9_-]{1,64}$`).
    #[serde(default)]
    pub name: String,
    /// The advertised description.
    #[serde(default)]
    pub description: String,
    /// The input JSON Schema (an object schema); the template context's `params`.
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
    /// Bound on the whole workflow. Default 30m.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// The steps, run as a graph of `dependsOn` edges.
    #[serde(default)]
    pub steps: Vec<StepConfig>,
    /// The structured output; without it, the last step's result is returned.
    #[serde(default)]
    pub output: Option<OutputConfig>,
    /// MCP tool annotations (`title`, hints), merged over the derived floor.
    #[serde(default)]
    pub annotations: Option<Map<String, Value>>,
}

/// What a step does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum StepType {
    /// Call a tool.
    #[default]
    Tool,
    /// Ask the caller (elicitation).
    Elicitation,
    /// Call a tool once per item of a collection.
    ForEach,
}

/// One step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepConfig {
    /// Unique within the composite; templates read `steps.<id>`.
    #[serde(default)]
    pub id: String,
    /// `tool` (default), `elicitation` or `forEach`.
    #[serde(rename = "type", default)]
    pub kind: StepType,
    /// `tool`: the advertised name, or `<backend>.<original name>`.
    #[serde(default)]
    pub tool: Option<String>,
    /// `tool`: arguments; strings are templates (recursively in objects and arrays).
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// Steps that must finish first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// A template rendering `true` or `false`; `false` skips the step.
    #[serde(default)]
    pub condition: Option<String>,
    /// What a failure does (default abort).
    #[serde(default)]
    pub on_error: Option<OnErrorConfig>,
    /// The output a skipped (or failed-and-continued) step stands in with.
    #[serde(default)]
    pub default_results: Option<Value>,
    /// Bound on one attempt. Default 5m.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// `forEach`: a template rendering a JSON array.
    #[serde(default)]
    pub collection: Option<String>,
    /// `forEach`: the item's name under `forEach.` (default `item`).
    #[serde(default)]
    pub item_var: Option<String>,
    /// `forEach`: iterations at once (default 10, at most 50).
    #[serde(default)]
    pub max_parallel: Option<usize>,
    /// `forEach`: the most items (default 100, at most 1000).
    #[serde(default)]
    pub max_iterations: Option<usize>,
    /// `forEach`: the tool step run per item.
    #[serde(default)]
    pub step: Option<Box<StepConfig>>,
    /// `elicitation`: the message (a template).
    #[serde(default)]
    pub message: Option<String>,
    /// `elicitation`: the requested schema.
    #[serde(default)]
    pub schema: Option<Map<String, Value>>,
    /// `elicitation`: what a decline does (default abort).
    #[serde(default)]
    pub on_decline: Option<ElicitationResponseConfig>,
    /// `elicitation`: what a cancel does (default abort).
    #[serde(default)]
    pub on_cancel: Option<ElicitationResponseConfig>,
}

/// `onError`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnErrorConfig {
    /// `abort` (default), `continue` or `retry`.
    #[serde(default)]
    pub action: ErrorAction,
    /// Retries after the first attempt (at most 10).
    #[serde(default)]
    pub retry_count: Option<u32>,
    /// First retry delay, doubling up to 60× (default 1s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub retry_delay: Option<Duration>,
}

/// What a failed step does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ErrorAction {
    /// Stop the workflow; the call fails.
    #[default]
    Abort,
    /// Record the failure, stand in with `defaultResults`, go on.
    Continue,
    /// Try again (`retryCount`, exponential backoff), then abort.
    Retry,
}

/// `onDecline` / `onCancel` of an elicitation step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationResponseConfig {
    /// `abort` (default), `continue` or `skip_remaining`.
    #[serde(default)]
    pub action: ElicitationAction,
}

/// What a declined or cancelled elicitation does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ElicitationAction {
    /// Stop the workflow; the call fails.
    #[default]
    #[serde(rename = "abort")]
    Abort,
    /// Go on with the next steps.
    #[serde(rename = "continue")]
    Continue,
    /// Skip every step not yet started; the call succeeds.
    #[serde(rename = "skip_remaining")]
    SkipRemaining,
}

/// `output:` — the structured result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputConfig {
    /// The output's properties.
    #[serde(default)]
    pub properties: BTreeMap<String, OutputProperty>,
    /// Properties that must be present.
    #[serde(default)]
    pub required: Vec<String>,
}

/// One output property.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputProperty {
    /// `string`, `integer`, `number`, `boolean`, `object` or `array`.
    #[serde(rename = "type")]
    pub kind: OutputType,
    /// Advertised in the output schema.
    #[serde(default)]
    pub description: Option<String>,
    /// A template giving the value (coerced to `type`).
    #[serde(default)]
    pub value: Option<String>,
    /// The value when `value` fails to render or coerce.
    #[serde(default)]
    pub default: Option<Value>,
    /// Nested properties (`object` only), built like the top level.
    #[serde(default)]
    pub properties: BTreeMap<String, OutputProperty>,
}

/// The JSON type of an output property.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OutputType {
    /// A string.
    #[default]
    String,
    /// An integer.
    Integer,
    /// A number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// An object.
    Object,
    /// An array.
    Array,
}

impl OutputType {
    /// The JSON Schema spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Object => "object",
            Self::Array => "array",
        }
    }
}

impl StepConfig {
    /// The retry count, capped.
    pub fn retries(&self) -> u32 {
        match &self.on_error {
            Some(OnErrorConfig {
                action: ErrorAction::Retry,
                retry_count,
                ..
            }) => retry_count.unwrap_or(3).min(MAX_RETRIES),
            _ => 0,
        }
    }

    /// The error action (default abort).
    pub fn error_action(&self) -> ErrorAction {
        self.on_error.as_ref().map(|e| e.action).unwrap_or_default()
    }

    /// Whether the step may end without output of its own (skipped by a condition,
    /// or failed and continued).
    pub fn skippable(&self) -> bool {
        self.condition.is_some() || self.error_action() == ErrorAction::Continue
    }
}

impl CompositeToolConfig {
    /// The workflow bound, defaulted.
    pub fn workflow_timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_WORKFLOW_TIMEOUT)
    }
}

/// What a step's `tool` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRef<'a> {
    /// `<backend>.<original name>`: the backend's own tool, whatever it is advertised as.
    Qualified {
        /// The configured backend.
        backend: &'a str,
        /// The backend's own tool name.
        original: &'a str,
    },
    /// An advertised (resolved) name.
    Advertised(&'a str),
}

impl<'a> ToolRef<'a> {
    /// Read `text` against the configured backend names: `<backend>.<rest>` when some
    /// backend (the longest, as names may contain dots) matches, else advertised.
    pub fn parse(text: &'a str, backends: impl IntoIterator<Item = &'a str>) -> Self {
        backends
            .into_iter()
            .filter_map(|b| {
                let rest = text.strip_prefix(b)?.strip_prefix('.')?;
                (!rest.is_empty()).then_some((b, rest))
            })
            .max_by_key(|(b, _)| b.len())
            .map_or(ToolRef::Advertised(text), |(backend, original)| {
                ToolRef::Qualified { backend, original }
            })
    }
}
