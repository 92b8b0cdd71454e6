//! One run of a composite: steps as a graph of `dependsOn` edges, each started as
//! soon as what it depends on has finished (at most [`DAG_PARALLEL`] at once), all
//! in the calling task. Dropping the run (the caller cancelled or went away, or the
//! workflow timed out) drops every step in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};

use super::coerce::coerce_arguments;
use super::{StepCaller, StepRecord, Workflow, output};
use crate::catalog::Catalog;
use crate::config::composite::{
    DAG_PARALLEL, DEFAULT_FOREACH_ITERATIONS, DEFAULT_FOREACH_PARALLEL, DEFAULT_STEP_TIMEOUT,
    ElicitationAction, ErrorAction, StepConfig, StepType,
};
use crate::templates::Template;

/// Why a run did not produce a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkflowError {
    /// A step's tool is one the caller may not call.
    #[error("call denied by authorization policy")]
    Denied,
    /// A step failed and its `onError` aborts.
    #[error("step {step:?} failed: {message}")]
    Step {
        /// The step.
        step: String,
        /// What went wrong.
        message: String,
    },
    /// The whole workflow ran out of time.
    #[error("the workflow did not finish within {0:?}")]
    TimedOut(Duration),
    /// The structured output could not be built.
    #[error(transparent)]
    Output(#[from] output::OutputError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Completed,
    Failed,
    Skipped,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// A finished step.
#[derive(Debug, Clone)]
struct Done {
    status: Status,
    output: Value,
    content: Value,
    error: Option<String>,
    /// The tool's own result, for a composite without `output` whose last step it is.
    raw: Option<CallToolResult>,
}

/// What a finished step means for the rest of the run.
enum Next {
    Go(Done),
    Abort(String),
    Denied,
    /// A declined elicitation with `skip_remaining`.
    SkipRemaining(Done),
}

/// One run of one composite for one caller.
#[derive(Clone)]
pub(crate) struct Run {
    workflow: Arc<Workflow>,
    catalog: Arc<Catalog>,
    caller: Arc<dyn StepCaller>,
    id: Arc<str>,
    started: Instant,
    start_time: Arc<str>,
}

impl Run {
    /// A run of `workflow` over `catalog`, its steps calling through `caller`.
    pub(crate) fn new(
        workflow: Arc<Workflow>,
        catalog: Arc<Catalog>,
        caller: Arc<dyn StepCaller>,
    ) -> Self {
        Self {
            workflow,
            catalog,
            caller,
            id: uuid::Uuid::new_v4().to_string().into(),
            started: Instant::now(),
            start_time: humantime::format_rfc3339_millis(SystemTime::now())
                .to_string()
                .into(),
        }
    }

    /// Every step tool the caller may not call (none: the run may start).
    pub(crate) fn forbidden_steps(&self) -> Vec<String> {
        self.workflow
            .step_entries(&self.catalog)
            .into_iter()
            .filter_map(|(id, entry)| {
                entry
                    .filter(|e| !self.caller.authorize(e))
                    .map(|_| id.to_owned())
            })
            .collect()
    }

    /// Run to the end, bounded by the workflow's timeout.
    pub(crate) async fn execute(
        self,
        params: Map<String, Value>,
    ) -> Result<CallToolResult, WorkflowError> {
        let limit = self.workflow.config.workflow_timeout();
        match tokio::time::timeout(limit, self.dag(Value::Object(params))).await {
            Ok(result) => result,
            Err(_) => Err(WorkflowError::TimedOut(limit)),
        }
    }

    fn context(&self, params: &Value, done: &BTreeMap<String, Done>, status: &str) -> Value {
        let steps: Map<String, Value> = done
            .iter()
            .map(|(id, d)| {
                (
                    id.clone(),
                    json!({"status": d.status.as_str(), "output": d.output, "content": d.content, "error": d.error}),
                )
            })
            .collect();
        json!({
            "params": params,
            "steps": steps,
            "workflow": {
                "id": &*self.id,
                "duration_ms": self.started.elapsed().as_millis() as u64,
                "step_count": self.workflow.config.steps.len(),
                "status": status,
                "start_time": &*self.start_time,
            },
        })
    }

    async fn dag(self, params: Value) -> Result<CallToolResult, WorkflowError> {
        let steps = &self.workflow.config.steps;
        let mut done: BTreeMap<String, Done> = BTreeMap::new();
        let mut started = BTreeSet::new();
        let mut running: FuturesUnordered<BoxFuture<'static, (String, Next)>> =
            FuturesUnordered::new();
        let mut skip_rest = false;
        loop {
            // Start (or skip) every step that is ready; a skip may ready others.
            let mut progressed = true;
            while progressed {
                progressed = false;
                for (i, step) in steps.iter().enumerate() {
                    if started.contains(&i)
                        || running.len() >= DAG_PARALLEL
                        || !step.depends_on.iter().all(|d| done.contains_key(d))
                    {
                        continue;
                    }
                    started.insert(i);
                    let context = self.context(&params, &done, "running");
                    let skip = skip_rest
                        || match &step.condition {
                            None => false,
                            Some(condition) => !self.condition(step, condition, &context)?,
                        };
                    if skip {
                        self.audit(step, "skipped", Duration::ZERO, 0);
                        done.insert(step.id.clone(), skipped(step));
                        progressed = true;
                        continue;
                    }
                    let run = self.clone();
                    let step = step.clone();
                    running.push(Box::pin(async move {
                        let next = run.step(&step, context).await;
                        (step.id, next)
                    }));
                }
            }
            let Some((id, next)) = running.next().await else {
                break;
            };
            match next {
                Next::Go(d) => {
                    done.insert(id, d);
                }
                Next::SkipRemaining(d) => {
                    done.insert(id, d);
                    skip_rest = true;
                }
                Next::Abort(message) => return Err(WorkflowError::Step { step: id, message }),
                Next::Denied => return Err(WorkflowError::Denied),
            }
        }
        let context = self.context(&params, &done, "completed");
        if let Some(output) = &self.workflow.config.output {
            let structured = output::build(output, &context)?;
            let mut result =
                CallToolResult::success(vec![ContentBlock::text(structured.to_string())]);
            result.structured_content = Some(structured);
            return Ok(result);
        }
        let last = steps.last().and_then(|s| done.get(&s.id));
        Ok(match last {
            Some(Done { raw: Some(raw), .. }) => raw.clone(),
            Some(d) => CallToolResult::success(vec![ContentBlock::text(d.output.to_string())]),
            None => CallToolResult::success(Vec::new()),
        })
    }

    fn condition(
        &self,
        step: &StepConfig,
        condition: &str,
        context: &Value,
    ) -> Result<bool, WorkflowError> {
        let fail = |message: String| WorkflowError::Step {
            step: step.id.clone(),
            message,
        };
        let text = Template::parse(condition)
            .and_then(|t| t.render(context))
            .map_err(|e| fail(format!("condition: {e}")))?;
        match text.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(fail(format!(
                "condition rendered {other:?}, not true or false"
            ))),
        }
    }

    fn audit(&self, step: &StepConfig, outcome: &'static str, duration: Duration, attempts: u32) {
        let tool_step = match step.kind {
            StepType::ForEach => step.step.as_deref(),
            _ => Some(step),
        };
        let tool = tool_step.and_then(|s| s.tool.as_deref());
        let entry = tool.and_then(|t| self.workflow.resolve(&self.catalog, t));
        self.caller.audit(&StepRecord {
            workflow_id: &self.id,
            composite: &self.workflow.config.name,
            step: &step.id,
            tool: entry.map(|e| e.tool.name.as_ref()).or(tool),
            backend: entry.map(|e| &*e.route.backend),
            outcome,
            duration,
            attempts,
        });
    }

    async fn step(&self, step: &StepConfig, context: Value) -> Next {
        let started = Instant::now();
        let (result, attempts) = match step.kind {
            StepType::Tool => self.tool_call(step, &context).await,
            StepType::ForEach => (self.for_each(step, &context).await, 1),
            StepType::Elicitation => return self.elicitation(step, &context, started).await,
        };
        let duration = started.elapsed();
        match result {
            Ok(done) => {
                self.audit(step, "success", duration, attempts);
                Next::Go(done)
            }
            Err(Failure::Denied) => {
                self.audit(step, "denied", duration, attempts);
                Next::Denied
            }
            Err(Failure::Failed { message, timed_out }) => {
                self.audit(
                    step,
                    if timed_out { "timeout" } else { "failure" },
                    duration,
                    attempts,
                );
                if step.error_action() == ErrorAction::Continue {
                    Next::Go(Done {
                        status: Status::Failed,
                        output: step.default_results.clone().unwrap_or(Value::Null),
                        content: Value::Null,
                        error: Some(message),
                        raw: None,
                    })
                } else {
                    Next::Abort(message)
                }
            }
        }
    }

    /// Call a tool step, retrying per `onError`; returns the attempts made.
    async fn tool_call(&self, step: &StepConfig, context: &Value) -> (Result<Done, Failure>, u32) {
        let tool = step.tool.as_deref().unwrap_or_default();
        let Some(entry) = self.workflow.resolve(&self.catalog, tool).cloned() else {
            return (
                Err(Failure::failed(format!("tool {tool:?} is not available"))),
                0,
            );
        };
        let arguments = match render_arguments(step.arguments.as_ref(), context)
            .and_then(|a| coerce_arguments(a, &entry.tool.input_schema).map_err(|e| e.to_string()))
        {
            Ok(a) => a,
            Err(message) => return (Err(Failure::failed(message)), 0),
        };
        if !self.caller.authorize(&entry) {
            return (Err(Failure::Denied), 0);
        }
        let timeout = step.timeout.unwrap_or(DEFAULT_STEP_TIMEOUT);
        let delay = step
            .on_error
            .as_ref()
            .and_then(|e| e.retry_delay)
            .unwrap_or(Duration::from_secs(1));
        let attempts = 1 + step.retries();
        let mut last = Failure::failed("not called");
        for attempt in 0..attempts {
            if attempt > 0 {
                // Exponential backoff, capped at 60 times the first delay.
                let factor = 2u32.saturating_pow(attempt - 1).min(60);
                tokio::time::sleep(delay.saturating_mul(factor)).await;
            }
            let call = self.caller.call(entry.clone(), arguments.clone());
            last = match tokio::time::timeout(timeout, call).await {
                Ok(Ok(result)) if result.is_error != Some(true) => {
                    return (Ok(completed(result)), attempt + 1);
                }
                Ok(Ok(result)) => {
                    Failure::failed(format!("the tool reported an error: {}", text_of(&result)))
                }
                Ok(Err(message)) => Failure::failed(message),
                Err(_) => Failure::Failed {
                    message: format!("the step did not finish within {timeout:?}"),
                    timed_out: true,
                },
            };
        }
        (Err(last), attempts)
    }

    async fn for_each(&self, step: &StepConfig, context: &Value) -> Result<Done, Failure> {
        let inner = step
            .step
            .as_deref()
            .ok_or_else(|| Failure::failed("forEach has no step"))?;
        let text = Template::parse(step.collection.as_deref().unwrap_or_default())
            .and_then(|t| t.render(context))
            .map_err(|e| Failure::failed(format!("collection: {e}")))?;
        let items = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => items,
            _ => return Err(Failure::failed("collection did not render a JSON array")),
        };
        let max = step.max_iterations.unwrap_or(DEFAULT_FOREACH_ITERATIONS);
        if items.len() > max {
            return Err(Failure::failed(format!(
                "collection has {} items; maxIterations is {max}",
                items.len()
            )));
        }
        let var = step.item_var.clone().unwrap_or_else(|| "item".to_owned());
        let parallel = step.max_parallel.unwrap_or(DEFAULT_FOREACH_PARALLEL).max(1);
        let iterations: Vec<(Value, Result<Done, Failure>)> =
            futures::stream::iter(items.into_iter().enumerate())
                .map(|(index, item)| {
                    let mut context = context.clone();
                    let mut scope = Map::new();
                    scope.insert(var.clone(), item.clone());
                    scope.insert("index".into(), json!(index));
                    context["forEach"] = Value::Object(scope);
                    async move { (item, self.tool_call(inner, &context).await.0) }
                })
                .buffered(parallel)
                .collect()
                .await;
        let mut failed = 0;
        let mut list = Vec::with_capacity(iterations.len());
        for (index, (item, result)) in iterations.into_iter().enumerate() {
            match result {
                Ok(d) => list.push(json!({"index": index, "item": item, "status": "completed", "output": d.output, "error": null})),
                Err(Failure::Denied) => return Err(Failure::Denied),
                Err(Failure::Failed { message, .. }) => {
                    failed += 1;
                    list.push(json!({"index": index, "item": item, "status": "failed", "output": null, "error": message}));
                }
            }
        }
        let count = list.len();
        let output = json!({"iterations": list, "count": count, "completed": count - failed, "failed": failed});
        if failed > 0 && inner.error_action() != ErrorAction::Continue {
            return Err(Failure::failed(format!(
                "{failed} of {count} iterations failed"
            )));
        }
        Ok(Done {
            status: Status::Completed,
            content: Value::Null,
            output,
            error: None,
            raw: None,
        })
    }

    async fn elicitation(&self, step: &StepConfig, context: &Value, started: Instant) -> Next {
        let message = match Template::parse(step.message.as_deref().unwrap_or_default())
            .and_then(|t| t.render(context))
        {
            Ok(m) => m,
            Err(e) => return Next::Abort(format!("message: {e}")),
        };
        let schema = step.schema.clone().unwrap_or_default();
        let limit = step.timeout.unwrap_or(DEFAULT_STEP_TIMEOUT);
        let answer = match tokio::time::timeout(limit, self.caller.elicit(message, schema)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {limit:?}")),
        };
        let (action, content, error) = match answer {
            Ok(a) => (a.action, a.content, None),
            // No answer possible counts as a decline, with the reason kept.
            Err(e) => ("decline".to_owned(), None, Some(e)),
        };
        let done = Done {
            status: Status::Completed,
            output: json!({"action": action, "content": content}),
            content: Value::Null,
            error: error.clone(),
            raw: None,
        };
        let policy = match action.as_str() {
            "accept" => {
                self.audit(step, "success", started.elapsed(), 1);
                return Next::Go(done);
            }
            "cancel" => step.on_cancel.as_ref(),
            _ => step.on_decline.as_ref(),
        };
        self.audit(step, "failure", started.elapsed(), 1);
        match policy.map(|p| p.action).unwrap_or_default() {
            ElicitationAction::Abort => Next::Abort(
                error.unwrap_or_else(|| format!("the elicitation was answered {action:?}")),
            ),
            ElicitationAction::Continue => Next::Go(done),
            ElicitationAction::SkipRemaining => Next::SkipRemaining(done),
        }
    }
}

/// Why a step (or one forEach iteration) failed.
enum Failure {
    Denied,
    Failed { message: String, timed_out: bool },
}

impl Failure {
    fn failed(message: impl Into<String>) -> Self {
        Failure::Failed {
            message: message.into(),
            timed_out: false,
        }
    }
}

fn skipped(step: &StepConfig) -> Done {
    Done {
        status: Status::Skipped,
        output: step.default_results.clone().unwrap_or(Value::Null),
        content: Value::Null,
        error: None,
        raw: None,
    }
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A successful tool result as templates see it: `output` is the structured
/// content, or `{text}` for a text result.
fn completed(result: CallToolResult) -> Done {
    let text = text_of(&result);
    let output = result
        .structured_content
        .clone()
        .unwrap_or_else(|| json!({"text": text}));
    Done {
        status: Status::Completed,
        output,
        content: json!({"text": text}),
        error: None,
        raw: Some(result),
    }
}

/// Render every string of `arguments` (recursively) as a template.
fn render_arguments(
    arguments: Option<&Map<String, Value>>,
    context: &Value,
) -> Result<Map<String, Value>, String> {
    fn render(value: &Value, context: &Value, path: &str) -> Result<Value, String> {
        Ok(match value {
            Value::String(text) => Value::String(
                Template::parse(text)
                    .and_then(|t| t.render(context))
                    .map_err(|e| format!("argument {path}: {e}"))?,
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| render(v, context, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), render(v, context, &format!("{path}.{k}"))?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }
    arguments
        .map(|args| {
            args.iter()
                .map(|(k, v)| Ok((k.clone(), render(v, context, k)?)))
                .collect()
        })
        .unwrap_or_else(|| Ok(Map::new()))
}
