//! Composite tool calls: the handler's side of a run. Each step goes through the
//! same routing, admission decision, telemetry span and error mapping as a direct
//! `tools/call`, under the caller's identity, and writes its audit line.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};
use vmcp_layers::context::{AdmissionHandle, BackendCalls, Identity, WorkflowAudit, WorkflowStep};

use super::admission::extension;
use super::observe::ObservedCall;
use super::{VmcpHandler, client_error, is_modern};
use crate::catalog::{ToolEntry, annotations};
use crate::composite::executor::{Run, WorkflowError};
use crate::composite::{Elicited, StepCaller, StepRecord, Workflow};

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
    admission: Option<AdmissionHandle>,
    calls: Option<BackendCalls>,
    audit: Option<WorkflowAudit>,
    identity: Option<Arc<Identity>>,
    /// The caller, for the health model's count of timeouts.
    caller: crate::backend::CallerKey,
    modern: bool,
}

impl StepCaller for Steps {
    fn authorize(&self, entry: &ToolEntry) -> bool {
        self.admission.as_ref().is_none_or(|h| {
            h.0.tool(
                &entry.tool.name,
                Some(&entry.route.backend),
                &annotations(&entry.tool),
            )
        })
    }

    fn call(
        &self,
        entry: ToolEntry,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<CallToolResult, String>> {
        let handler = self.handler.clone();
        let calls = self.calls.clone();
        let modern = self.modern;
        let caller = self.caller;
        Box::pin(async move {
            let backend = entry.route.backend.clone();
            let client = handler
                .backend(&backend)
                .map_err(|e| e.message.to_string())?;
            let mut params =
                CallToolRequestParams::new(entry.route.name.clone()).with_arguments(arguments);
            let call = ObservedCall::start_with(
                calls.as_ref(),
                &backend,
                "tools/call",
                Some(&entry.tool.name),
                &mut params.meta,
            );
            let response = client
                .call_tool(
                    params,
                    crate::backend::CallBudget::for_caller(
                        handler.aggregator.config().call_timeout(&backend),
                        Some(caller),
                    ),
                )
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
        _message: String,
        _schema: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Elicited, String>> {
        // Asking the caller needs server-to-client requests (Legacy) or input-required
        // bridging (Modern); neither is built into this gateway yet.
        Box::pin(futures::future::ready(Err(
            "this client cannot answer elicitation (not supported by this gateway yet)".to_owned(),
        )))
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
    /// Run the composite `workflow` for this request.
    pub(super) async fn call_composite(
        &self,
        workflow: Arc<Workflow>,
        arguments: Option<Map<String, Value>>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let steps = Steps {
            handler: self.clone(),
            admission: extension::<AdmissionHandle>(ctx).cloned(),
            calls: extension::<BackendCalls>(ctx).cloned(),
            audit: extension::<WorkflowAudit>(ctx).cloned(),
            identity: extension::<Arc<Identity>>(ctx).cloned(),
            caller: super::caller_key::caller_key(ctx),
            modern: is_modern(ctx),
        };
        let name = workflow.config.name.clone();
        let run = Run::new(workflow, self.aggregator.catalog(), Arc::new(steps));
        // A caller may not reach through a composite what it may not call directly.
        if !run.forbidden_steps().is_empty() {
            return Err(denied());
        }
        let outcome = tokio::select! {
            outcome = run.execute(arguments.unwrap_or_default()) => outcome,
            () = ctx.ct.cancelled() => return Err(ErrorData::internal_error("the call was cancelled", None)),
        };
        match outcome {
            Ok(result) => Ok(CallToolResponse::Complete(result)),
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
