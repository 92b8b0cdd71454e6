//! The handler's side of code mode (`crate::code_mode`): the advertised tool, and
//! one script run per call of it.
//!
//! The script sees the tools this caller's `tools/list` shows (composites
//! included), as functions. Each call it makes goes through the composite step
//! path (`handler::workflow`): the caller's admission decision with the call's
//! arguments, its own audit line under the tool's real name, the rate limit of a
//! direct call, the caller's backend connection (its exchanged token), telemetry.
//! A call the caller may not make fails exactly as a call of a tool that does not
//! exist does; a tool it may not see is not defined at all.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ResultType, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use vmcp_layers::context::AdmissionHandle;

use super::VmcpHandler;
use super::admission::{admitted_tools, extension};
use crate::catalog::{ToolEntry, annotations};
use crate::code_mode::sandbox::{self, Breach, Script, ToolBridge};
use crate::code_mode::{EXECUTE_TOOL_SCRIPT, collision, collision_error, names};
use crate::composite::{StepCaller, StepRecord, Workflow};
use crate::config::{CodeModeConfig, ScriptLimits};

/// The script thread's stack: deep Starlark recursion is refused by the
/// interpreter's call-stack limit long before this is used up.
const SCRIPT_STACK_BYTES: usize = 16 * 1024 * 1024;
/// How long a stopped script may take to notice (it checks before each statement).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// What one of the script's functions calls.
enum Target {
    Backend(ToolEntry),
    Composite(Arc<Workflow>, Tool),
}

struct ScriptTool {
    /// The advertised name (audit lines, messages).
    name: String,
    target: Target,
}

/// The script's tool calls, bridged to the runtime (see [`ToolBridge`]).
struct Bridge {
    runtime: tokio::runtime::Handle,
    tools: Vec<ScriptTool>,
    steps: Arc<dyn StepCaller>,
    handler: VmcpHandler,
    ctx: RequestContext<RoleServer>,
    admission: Option<AdmissionHandle>,
    limits: ScriptLimits,
    /// Cancelled when the script must stop: in-flight calls are dropped (and so
    /// cancelled at their backends).
    stop: CancellationToken,
    /// Why it stopped ([`Breach`] as a number; 0 while running).
    reason: AtomicU8,
    /// The run's id in audit lines.
    run: String,
    calls: AtomicUsize,
}

fn unavailable(name: &str) -> String {
    format!("tool {name:?} is not available")
}

/// A tool result as the script's value: its structured content, or its text.
fn value_of(name: &str, result: CallToolResult) -> Result<Value, String> {
    let text = || {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if result.is_error == Some(true) {
        return Err(format!("tool {name:?} returned an error: {}", text()));
    }
    Ok(match &result.structured_content {
        Some(structured) => structured.clone(),
        None => Value::String(text()),
    })
}

impl Bridge {
    fn stop(&self, why: Breach) {
        let _ = self
            .reason
            .compare_exchange(0, why as u8 + 1, Ordering::AcqRel, Ordering::Acquire);
        self.stop.cancel();
    }

    async fn invoke(&self, index: usize, arguments: Map<String, Value>) -> Result<Value, String> {
        let tool = self.tools.get(index).ok_or_else(|| unavailable("?"))?;
        let step = format!("call-{}", self.calls.fetch_add(1, Ordering::Relaxed) + 1);
        let started = Instant::now();
        let audit = |outcome: &'static str, backend: Option<&str>| {
            self.steps.audit(&StepRecord {
                workflow_id: &self.run,
                composite: EXECUTE_TOOL_SCRIPT,
                step: &step,
                tool: Some(&tool.name),
                backend,
                outcome,
                duration: started.elapsed(),
                attempts: 1,
            });
        };
        let (backend, call) = match &tool.target {
            Target::Backend(entry) => {
                let backend = entry.route.backend.clone();
                if !self.steps.authorize(entry, Some(&arguments)) {
                    audit("denied", Some(&backend));
                    return Err(unavailable(&tool.name));
                }
                let call = self.steps.call(entry.clone(), arguments, None);
                (Some(backend), futures::future::Either::Left(call))
            }
            Target::Composite(workflow, advertised) => {
                let admitted = self.admission.as_ref().is_none_or(|h| {
                    h.0.tool_call(&tool.name, None, &annotations(advertised), &arguments)
                });
                if !admitted {
                    audit("denied", None);
                    return Err(unavailable(&tool.name));
                }
                let params =
                    CallToolRequestParams::new(tool.name.clone()).with_arguments(arguments);
                let call = async move {
                    match self
                        .handler
                        .call_composite(workflow.clone(), params, &self.ctx)
                        .await
                    {
                        Ok(CallToolResponse::Complete(result)) => Ok(result),
                        Ok(_) => Err("the tool asked for input, which a script cannot give".into()),
                        Err(e) => Err(e.message.to_string()),
                    }
                };
                (None, futures::future::Either::Right(Box::pin(call)))
            }
        };
        let outcome = tokio::time::timeout(self.limits.tool_call_timeout, call).await;
        let backend = backend.as_deref();
        match outcome {
            Err(_) => {
                audit("timeout", backend);
                Err(format!(
                    "tool {:?} did not answer within codeMode.toolCallTimeout",
                    tool.name
                ))
            }
            Ok(Err(message)) => {
                audit("failure", backend);
                Err(format!("tool {:?} failed: {message}", tool.name))
            }
            Ok(Ok(result)) => {
                audit(
                    if result.is_error == Some(true) {
                        "failure"
                    } else {
                        "success"
                    },
                    backend,
                );
                value_of(&tool.name, result)
            }
        }
    }

    /// Run `work` on the runtime from the script's thread, unless the script is
    /// stopped first (then `work` is dropped: its backend calls are cancelled).
    fn block<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        self.runtime.block_on(async {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => None,
                value = work => Some(value),
            }
        })
    }
}

impl ToolBridge for Bridge {
    fn call(&self, index: usize, arguments: Map<String, Value>) -> Result<Value, String> {
        self.block(self.invoke(index, arguments))
            .unwrap_or_else(|| Err("the script was stopped".into()))
    }

    fn call_all(&self, calls: Vec<(usize, Map<String, Value>)>) -> Vec<Result<Value, String>> {
        let n = calls.len();
        let all = futures::stream::iter(calls)
            .map(|(index, arguments)| self.invoke(index, arguments))
            .buffered(self.limits.parallel)
            .collect::<Vec<_>>();
        self.block(all)
            .unwrap_or_else(|| vec![Err("the script was stopped".into()); n])
    }

    fn stopped(&self) -> Option<Breach> {
        match self.reason.load(Ordering::Acquire) {
            0 => None,
            n if n == Breach::Timeout as u8 + 1 => Some(Breach::Timeout),
            _ => Some(Breach::Cancelled),
        }
    }
}

/// The script's result as a tool result.
fn finished(result: Result<sandbox::Finished, sandbox::ScriptError>) -> CallToolResult {
    let mut result = match result {
        Ok(done) => {
            let text = serde_json::to_string(&done.value).unwrap_or_default();
            let mut structured = json!({ "result": done.value });
            let mut content = vec![ContentBlock::text(text)];
            if !done.printed.is_empty() {
                structured["printed"] = Value::String(done.printed.clone());
                content.push(ContentBlock::text(done.printed));
            }
            let mut result = CallToolResult::success(content);
            result.structured_content = Some(structured);
            result
        }
        Err(error) => {
            let mut detail = json!({ "message": error.message });
            if let Some(p) = error.position {
                detail["line"] = p.line.into();
                detail["column"] = p.column.into();
            }
            let mut result =
                CallToolResult::error(vec![ContentBlock::text(format!("script error: {error}"))]);
            result.structured_content = Some(json!({ "error": detail }));
            result
        }
    };
    result.result_type = Some(ResultType::COMPLETE);
    result
}

impl VmcpHandler {
    /// `tools`, with the script tool added in name order; refused while a backend
    /// advertises its name.
    pub(super) fn with_script_tool<'a>(
        &self,
        tools: Cow<'a, [Tool]>,
    ) -> Result<Cow<'a, [Tool]>, ErrorData> {
        if let Some(backend) = collision(&self.aggregator.catalog()) {
            return Err(collision_error(&backend));
        }
        let mut tools = tools.into_owned();
        let at = tools.partition_point(|t| *t.name < *EXECUTE_TOOL_SCRIPT);
        tools.insert(at, crate::code_mode::tool());
        Ok(Cow::Owned(tools))
    }

    /// A call of `execute_tool_script`.
    pub(super) async fn call_script(
        &self,
        config: &CodeModeConfig,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let catalog = self.aggregator.catalog();
        if let Some(backend) = collision(&catalog) {
            return Err(collision_error(&backend));
        }
        let mut arguments = params.arguments.unwrap_or_default();
        let Some(Value::String(source)) = arguments.remove("script") else {
            return Err(ErrorData::invalid_params(
                "execute_tool_script needs script (Starlark source, a string)",
                None,
            ));
        };
        let data = match arguments.remove("data") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(data @ Value::Object(_)) => data,
            Some(_) => {
                return Err(ErrorData::invalid_params(
                    "execute_tool_script's data must be an object",
                    None,
                ));
            }
        };
        let workflows = self.aggregator.workflows();
        let tools: Vec<ScriptTool> = admitted_tools(ctx, &catalog)
            .iter()
            .filter_map(|tool| {
                let name = tool.name.to_string();
                let target = match workflows.get(&name) {
                    Some(workflow) if catalog.local_tool(&name).is_some() => {
                        Target::Composite(workflow.clone(), tool.clone())
                    }
                    _ => Target::Backend(catalog.tool(&name)?.clone()),
                };
                Some(ScriptTool { name, target })
            })
            .collect();
        let identifiers =
            names::identifiers(&tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>());
        let limits = config.limits();
        let deadline = Instant::now() + limits.script_timeout;
        let bridge = Arc::new(Bridge {
            runtime: tokio::runtime::Handle::current(),
            tools,
            steps: self.step_caller(EXECUTE_TOOL_SCRIPT, ctx),
            handler: self.clone(),
            ctx: ctx.clone(),
            admission: extension::<AdmissionHandle>(ctx).cloned(),
            limits,
            stop: CancellationToken::new(),
            reason: AtomicU8::new(0),
            run: uuid::Uuid::new_v4().to_string(),
            calls: AtomicUsize::new(0),
        });
        let (sender, mut receiver) = tokio::sync::oneshot::channel();
        let on_thread = bridge.clone();
        std::thread::Builder::new()
            .name("vmcp-script".into())
            .stack_size(SCRIPT_STACK_BYTES)
            .spawn(move || {
                let script = Script {
                    source: &source,
                    data,
                    tools: &identifiers,
                    limits,
                    deadline,
                };
                // A panic in the interpreter ends this script, not the gateway.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    sandbox::run(&script, on_thread.clone())
                }))
                .unwrap_or_else(|_| {
                    Err(sandbox::ScriptError {
                        breach: None,
                        position: None,
                        message: "the interpreter failed".into(),
                    })
                });
                let _ = sender.send(result);
            })
            .map_err(|e| ErrorData::internal_error(format!("no script thread: {e}"), None))?;
        let stopped = |why: Breach| sandbox::ScriptError {
            breach: Some(why),
            position: None,
            message: why.to_string(),
        };
        let result = tokio::select! {
            result = &mut receiver => result.unwrap_or_else(|_| Err(stopped(Breach::Cancelled))),
            () = tokio::time::sleep_until(deadline.into()) => {
                bridge.stop(Breach::Timeout);
                tokio::time::timeout(STOP_GRACE, receiver)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_else(|| Err(stopped(Breach::Timeout)))
            }
            () = ctx.ct.cancelled() => {
                bridge.stop(Breach::Cancelled);
                super::forward::audit_cancelled(ctx);
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
        };
        // What ran, never the script or its data (they may hold secrets).
        match &result {
            Ok(done) => tracing::debug!(
                steps = done.steps,
                calls = bridge.calls.load(Ordering::Relaxed),
                "script finished"
            ),
            Err(error) => tracing::info!(
                calls = bridge.calls.load(Ordering::Relaxed),
                breach = ?error.breach,
                "script failed"
            ),
        }
        // Anything still in flight (a stopped script's calls) is cancelled.
        bridge.stop.cancel();
        Ok(CallToolResponse::Complete(finished(result)))
    }
}
