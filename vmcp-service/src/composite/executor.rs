//! One run of a composite: steps as a graph of `dependsOn` edges, each started as
//! soon as what it depends on has finished (at most [`DAG_PARALLEL`] at once), all
//! in the calling task. Dropping the run (the caller cancelled or went away, or the
//! workflow timed out) drops every step in flight.
//!
//! An elicitation a 2026-07-28 caller answers on its retry pauses the run once
//! nothing else can progress ([`Outcome::Paused`]); [`Run::resume`] goes on from
//! there with the answers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};
use vmcp_layers::context::{BackendCalls, StepScope};

use super::coerce::coerce_arguments;
use super::done::{Done, Status};
use super::paused::{Paused, PausedRun, Question, definition_digest, now_ms};
use super::{Elicited, StepCaller, StepRecord, Workflow, output};
use crate::catalog::Catalog;
use crate::config::composite::{
    DAG_PARALLEL, DEFAULT_STEP_TIMEOUT, ErrorAction, StepConfig, StepType,
};
use crate::templates::Template;

mod ask;
mod for_each;

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

/// How a run ended (for now).
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The call's answer.
    Complete(CallToolResult),
    /// Waiting for the caller's answers (2026-07-28).
    Paused(Paused),
}

/// What a finished step means for the rest of the run.
enum Next {
    Go(Done),
    Abort(String),
    Denied,
    /// A declined elicitation with `skip_remaining`.
    SkipRemaining(Done),
    /// An elicitation the caller answers on its retry.
    Ask(Question),
}

/// One run of one composite for one caller.
#[derive(Clone)]
pub(crate) struct Run {
    workflow: Arc<Workflow>,
    catalog: Arc<Catalog>,
    caller: Arc<dyn StepCaller>,
    id: Arc<str>,
    started: Instant,
    /// Unix ms of the start and of the workflow deadline (carried across pauses).
    started_ms: u64,
    deadline_ms: u64,
    start_time: Arc<str>,
}

/// Where a run stands: fresh, or as a paused run's state left it.
#[derive(Default)]
struct Progress {
    done: BTreeMap<String, Done>,
    skip_rest: bool,
    waiting: BTreeMap<String, u64>,
    answers: BTreeMap<String, Elicited>,
}

impl Run {
    /// A run of `workflow` over `catalog`, its steps calling through `caller`.
    pub(crate) fn new(
        workflow: Arc<Workflow>,
        catalog: Arc<Catalog>,
        caller: Arc<dyn StepCaller>,
    ) -> Self {
        let started_ms = now_ms();
        let limit =
            u64::try_from(workflow.config.workflow_timeout().as_millis()).unwrap_or(u64::MAX);
        Self {
            workflow,
            catalog,
            caller,
            id: uuid::Uuid::new_v4().to_string().into(),
            started: Instant::now(),
            started_ms,
            deadline_ms: started_ms.saturating_add(limit),
            start_time: humantime::format_rfc3339_millis(SystemTime::now())
                .to_string()
                .into(),
        }
    }

    /// The run `state` describes, to go on with the caller's answers. `None` when the
    /// state is not one of `workflow`'s (another composite, or a changed definition).
    pub(crate) fn resumed(
        workflow: Arc<Workflow>,
        catalog: Arc<Catalog>,
        caller: Arc<dyn StepCaller>,
        state: &PausedRun,
    ) -> Option<Self> {
        if state.composite != workflow.config.name
            || state.definition != definition_digest(&workflow.config)
        {
            return None;
        }
        let elapsed = Duration::from_millis(now_ms().saturating_sub(state.started_ms));
        Some(Self {
            workflow,
            catalog,
            caller,
            id: state.workflow_id.as_str().into(),
            started: Instant::now()
                .checked_sub(elapsed)
                .unwrap_or_else(Instant::now),
            started_ms: state.started_ms,
            deadline_ms: state.deadline_ms,
            start_time: state.start_time.as_str().into(),
        })
    }

    /// Every step tool the caller may not call (none: the run may start).
    pub(crate) fn forbidden_steps(&self) -> Vec<String> {
        self.workflow
            .step_entries(&self.catalog)
            .into_iter()
            .filter_map(|(id, entry)| {
                entry
                    .filter(|e| !self.caller.authorize(e, None))
                    .map(|_| id.to_owned())
            })
            .collect()
    }

    /// Run to the end (or a pause), bounded by the workflow's timeout.
    pub(crate) async fn execute(
        self,
        params: Map<String, Value>,
    ) -> Result<Outcome, WorkflowError> {
        self.bounded(params, Progress::default()).await
    }

    /// Go on from `state` (checked by [`Run::resumed`]) with the caller's `answers`,
    /// keyed by elicitation step id. Finished steps are not run again; a waiting
    /// step without an answer is asked again.
    pub(crate) async fn resume(
        self,
        state: PausedRun,
        answers: BTreeMap<String, Elicited>,
    ) -> Result<Outcome, WorkflowError> {
        let progress = Progress {
            done: state.done,
            skip_rest: state.skip_rest,
            waiting: state.waiting,
            answers,
        };
        self.bounded(state.params, progress).await
    }

    async fn bounded(
        self,
        params: Map<String, Value>,
        progress: Progress,
    ) -> Result<Outcome, WorkflowError> {
        let limit = self.workflow.config.workflow_timeout();
        let left = Duration::from_millis(self.deadline_ms.saturating_sub(now_ms()));
        match tokio::time::timeout(left, self.dag(params, progress)).await {
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

    async fn dag(
        self,
        params_map: Map<String, Value>,
        progress: Progress,
    ) -> Result<Outcome, WorkflowError> {
        let steps = &self.workflow.config.steps;
        let params = Value::Object(params_map.clone());
        let Progress {
            mut done,
            mut skip_rest,
            waiting: asked,
            mut answers,
        } = progress;
        let mut started: BTreeSet<usize> = steps
            .iter()
            .enumerate()
            .filter(|(_, s)| done.contains_key(&s.id))
            .map(|(i, _)| i)
            .collect();
        // The answers to the last round's questions settle those steps first.
        for (i, step) in steps.iter().enumerate() {
            let (Some(asked_ms), Some(answer)) = (asked.get(&step.id), answers.remove(&step.id))
            else {
                continue;
            };
            started.insert(i);
            let waited = Duration::from_millis(now_ms().saturating_sub(*asked_ms));
            let next = self.settle(step, Ok(answer), waited);
            record(&mut done, &mut skip_rest, step.id.clone(), next)?;
        }
        let mut questions = Vec::new();
        let mut waiting = BTreeMap::new();
        let mut running: FuturesUnordered<BoxFuture<'static, (String, Next)>> =
            FuturesUnordered::new();
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
            if let Next::Ask(question) = next {
                waiting.insert(id, now_ms());
                questions.push(question);
                continue;
            }
            record(&mut done, &mut skip_rest, id, next)?;
        }
        if !questions.is_empty() {
            return Ok(Outcome::Paused(
                self.pause(params_map, done, skip_rest, waiting, questions),
            ));
        }
        let context = self.context(&params, &done, "completed");
        if let Some(output) = &self.workflow.config.output {
            let structured = output::build(output, &context)?;
            let mut result =
                CallToolResult::success(vec![ContentBlock::text(structured.to_string())]);
            result.structured_content = Some(structured);
            return Ok(Outcome::Complete(result));
        }
        let last = steps.last().and_then(|s| done.get(&s.id));
        Ok(Outcome::Complete(match last {
            Some(Done { raw: Some(raw), .. }) => raw.clone(),
            Some(d) => CallToolResult::success(vec![ContentBlock::text(d.output.to_string())]),
            None => CallToolResult::success(Vec::new()),
        }))
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
        if step.kind == StepType::Elicitation {
            return self.elicitation(step, &context, Instant::now()).await;
        }
        let mut watch = Watch::new(self, step);
        let calls = watch.scope.as_ref().map(|s| s.calls());
        let (result, attempts) = match step.kind {
            StepType::ForEach => (self.for_each(step, &context, calls.as_ref()).await, 1),
            _ => self.tool_call(step, &context, calls.as_ref()).await,
        };
        match result {
            Ok(done) => {
                watch.finish("success", attempts);
                Next::Go(done)
            }
            Err(Failure::Denied) => {
                watch.finish("denied", attempts);
                Next::Denied
            }
            Err(Failure::Failed { message, timed_out }) => {
                watch.finish(if timed_out { "timeout" } else { "failure" }, attempts);
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
    async fn tool_call(
        &self,
        step: &StepConfig,
        context: &Value,
        calls: Option<&BackendCalls>,
    ) -> (Result<Done, Failure>, u32) {
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
        // Decided with the rendered arguments, as a direct call with them would be:
        // a policy on `context.arguments` holds through a composite too.
        if !self.caller.authorize(&entry, Some(&arguments)) {
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
            let call = self
                .caller
                .call(entry.clone(), arguments.clone(), calls.cloned());
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
}

/// A tool or forEach step in flight: its audit line and telemetry span are written
/// once, with its outcome, or `cancelled` when the step is dropped before it ends
/// (the caller cancelled or went away, or the workflow timed out).
struct Watch<'a> {
    run: &'a Run,
    step: &'a StepConfig,
    started: Instant,
    scope: Option<Box<dyn StepScope>>,
    finished: bool,
}

impl<'a> Watch<'a> {
    fn new(run: &'a Run, step: &'a StepConfig) -> Self {
        Self {
            run,
            step,
            started: Instant::now(),
            scope: run.caller.observe_step(&step.id),
            finished: false,
        }
    }

    fn finish(&mut self, outcome: &'static str, attempts: u32) {
        self.finished = true;
        self.run
            .audit(self.step, outcome, self.started.elapsed(), attempts);
        if let Some(scope) = self.scope.take() {
            scope.end(outcome);
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish("cancelled", 0);
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

/// Note a finished step's outcome; `Err` ends the run.
fn record(
    done: &mut BTreeMap<String, Done>,
    skip_rest: &mut bool,
    id: String,
    next: Next,
) -> Result<(), WorkflowError> {
    match next {
        Next::Go(d) => {
            done.insert(id, d);
        }
        Next::SkipRemaining(d) => {
            done.insert(id, d);
            *skip_rest = true;
        }
        Next::Abort(message) => return Err(WorkflowError::Step { step: id, message }),
        Next::Denied => return Err(WorkflowError::Denied),
        // Handled by the caller (a question, not an outcome).
        Next::Ask(_) => {}
    }
    Ok(())
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
