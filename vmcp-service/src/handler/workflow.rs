//! Composite tool calls: the handler's side of a run. Each step goes through the
//! same routing, admission decision, backend connection (the caller's own for a
//! per-caller backend), telemetry span and error mapping as a direct `tools/call`,
//! under the caller's identity, and writes its audit line. Elicitation steps ask a
//! 2025-11-25 caller over its session; a 2026-07-28 caller gets `input_required`
//! (`workflow_state`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};
use vmcp_layers::context::{
    AdmissionHandle, BackendCalls, Identity, StepScope, WorkflowAudit, WorkflowStep,
};

use super::admission::extension;
use super::elicit::{CANNOT_ANSWER, ask_over_session};
use super::observe::ObservedCall;
use super::workflow_state::{Resume, StateCaller};
use super::{VmcpHandler, client_error, is_modern};
use crate::catalog::{ToolEntry, annotations};
use crate::composite::executor::{Outcome, Run, WorkflowError};
use crate::composite::{Ask, StepCaller, StepRecord, Workflow};

/// The denial a forbidden step gives the whole call: the gate's code and message.
pub(super) fn denied() -> ErrorData {
    ErrorData::new(
        ErrorCode(vmcp_layers::jsonrpc::DENIED as i32),
        vmcp_layers::context::CallKind::Tool.denial_message(),
        None,
    )
}

/// What a step needs from the request it runs under.
struct Steps {
    handler: VmcpHandler,
    /// The composite's name (step spans).
    composite: String,
    admission: Option<AdmissionHandle>,
    calls: Option<BackendCalls>,
    audit: Option<WorkflowAudit>,
    identity: Option<Arc<Identity>>,
    /// The caller, for the health model's count of timeouts.
    caller: crate::backend::CallerKey,
    /// The caller as rate limits key it (each step is metered).
    metered_as: crate::session_binding::Caller,
    modern: bool,
    /// Whether the caller declared (form) elicitation.
    can_elicit: bool,
    /// The request: its caller's backend connections, its session (Legacy).
    ctx: RequestContext<RoleServer>,
}

/// Whether the request's client declared form elicitation (an empty `elicitation`
/// object means form, for clients older than the form/url split).
fn declares_elicitation(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

impl StepCaller for Steps {
    fn authorize(&self, entry: &ToolEntry, arguments: Option<&Map<String, Value>>) -> bool {
        let (name, backend) = (&entry.tool.name, Some(&*entry.route.backend));
        let hints = annotations(&entry.tool);
        self.admission.as_ref().is_none_or(|h| match arguments {
            Some(arguments) => h.0.tool_call(name, backend, &hints, arguments),
            None => h.0.tool(name, backend, &hints),
        })
    }

    fn observe_step(&self, step: &str) -> Option<Box<dyn StepScope>> {
        self.calls.as_ref().map(|c| c.0.step(&self.composite, step))
    }

    fn call(
        &self,
        entry: ToolEntry,
        arguments: Map<String, Value>,
        calls: Option<BackendCalls>,
    ) -> BoxFuture<'static, Result<CallToolResult, String>> {
        let handler = self.handler.clone();
        let calls = calls.or_else(|| self.calls.clone());
        let modern = self.modern;
        let caller = self.caller;
        let ctx = self.ctx.clone();
        let metered_as = self.metered_as.clone();
        Box::pin(async move {
            let backend = entry.route.backend.clone();
            // Metered as a direct call of the step's tool (docs/rate-limiting.md).
            if let Some(refusal) = handler
                .aggregator
                .limiter()
                .admit_step(&entry.tool.name, &backend, &metered_as, calls.as_ref())
                .await
            {
                return Err(refusal.step_error());
            }
            let client = handler
                .backend(&backend)
                .map_err(|e| e.message.to_string())?;
            let budget = crate::backend::CallBudget::for_caller(
                handler.aggregator.config().call_timeout(&backend),
                Some(caller),
            );
            let mut params =
                CallToolRequestParams::new(entry.route.name.clone()).with_arguments(arguments);
            let call = ObservedCall::start_with(
                calls.as_ref(),
                &backend,
                "tools/call",
                Some(&entry.tool.name),
                &mut params.meta,
            );
            // The same connection a direct call of this caller uses (its exchanged
            // token on a token_exchange backend).
            let response = handler
                .on_backend(&client, &ctx, |c| {
                    let params = params.clone();
                    async move { c.call_tool(params, budget).await }
                })
                .await;
            call.end(&response);
            match response.map_err(|e| client_error(e, modern).message.to_string())? {
                CallToolResponse::Complete(result) => Ok(result),
                _ => Err("the tool asked for input, which a composite step cannot give".into()),
            }
        })
    }

    fn elicit(
        &self,
        message: String,
        schema: Map<String, Value>,
        within: Duration,
    ) -> BoxFuture<'static, Ask> {
        if !self.can_elicit {
            return Box::pin(futures::future::ready(Ask::Unavailable(
                CANNOT_ANSWER.to_owned(),
            )));
        }
        if self.modern {
            // Asked in the `input_required` result once the run pauses.
            return Box::pin(futures::future::ready(Ask::Later));
        }
        Box::pin(ask_over_session(self.ctx.clone(), message, schema, within))
    }

    fn audit(&self, record: &StepRecord<'_>) {
        if let Some(audit) = &self.audit {
            audit.0.step(&WorkflowStep {
                workflow_id: record.workflow_id,
                composite: record.composite,
                step: record.step,
                tool: record.tool,
                backend: record.backend,
                outcome: record.outcome,
                duration: record.duration,
                attempts: record.attempts,
                identity: self.identity.as_deref(),
            });
        }
    }
}

impl VmcpHandler {
    /// How the steps of a run called `composite` (a composite tool, or a code mode
    /// script) reach backends under this request: as direct calls of its caller.
    pub(super) fn step_caller(
        &self,
        composite: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Arc<dyn StepCaller> {
        Arc::new(Steps {
            handler: self.clone(),
            composite: composite.to_owned(),
            admission: extension::<AdmissionHandle>(ctx).cloned(),
            calls: extension::<BackendCalls>(ctx).cloned(),
            audit: extension::<WorkflowAudit>(ctx).cloned(),
            identity: extension::<Arc<Identity>>(ctx).cloned(),
            caller: super::caller_key::caller_key(ctx),
            metered_as: crate::rate_limit::caller(
                extension::<Arc<Identity>>(ctx).map(|i| &**i),
                extension::<axum::extract::ConnectInfo<std::net::SocketAddr>>(ctx)
                    .map(|info| info.0.ip()),
            ),
            modern: is_modern(ctx),
            can_elicit: declares_elicitation(ctx),
            ctx: ctx.clone(),
        })
    }

    /// Run the composite `workflow` for this request.
    pub(super) async fn call_composite(
        &self,
        workflow: Arc<Workflow>,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state_caller = StateCaller::of(extension::<Arc<Identity>>(ctx).map(|i| &**i));
        let started = std::time::Instant::now();
        let calls = extension::<BackendCalls>(ctx).cloned();
        let name = workflow.config.name.clone();
        // One run of the composite in the metrics, however it ends.
        let observe = |error: bool| {
            if let Some(calls) = &calls {
                calls.0.workflow(&name, started.elapsed(), error);
            }
        };
        let steps = self.step_caller(&workflow.config.name, ctx);
        let catalog = self.aggregator.catalog();
        let (run, resume) = match &params.request_state {
            None => (Run::new(workflow, catalog, steps), None),
            Some(token) => {
                let resume = self
                    .open_state(&state_caller, token, &workflow, &params)
                    .inspect_err(|_| observe(true))?;
                let run = Run::resumed(workflow, catalog, steps, &resume.state)
                    .ok_or_else(super::workflow_state::stale)
                    .inspect_err(|_| observe(true))?;
                (run, Some(resume))
            }
        };
        // A caller may not reach through a composite what it may not call directly.
        if !run.forbidden_steps().is_empty() {
            observe(true);
            return Err(denied());
        }
        let go = async move {
            match resume {
                Some(Resume { state, answers }) => run.resume(state, answers).await,
                None => run.execute(params.arguments.unwrap_or_default()).await,
            }
        };
        let outcome = tokio::select! {
            outcome = go => outcome,
            () = ctx.ct.cancelled() => {
                super::forward::audit_cancelled(ctx);
                observe(true);
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
        };
        observe(
            !matches!(&outcome, Ok(Outcome::Complete(r)) if r.is_error != Some(true))
                && !matches!(outcome, Ok(Outcome::Paused(_))),
        );
        match outcome {
            Ok(Outcome::Complete(result)) => Ok(CallToolResponse::Complete(result)),
            Ok(Outcome::Paused(paused)) => Ok(self.input_required(&state_caller, &name, paused)),
            Err(WorkflowError::Denied) => Err(denied()),
            Err(error) => {
                tracing::info!(composite = %name, "composite tool failed: {error}");
                Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                    ContentBlock::text(format!("composite tool {name:?} failed: {error}")),
                ])))
            }
        }
    }
}
