//! Audit lines for composite tool steps: the service writes one per step through
//! the [`WorkflowAudit`](crate::context::WorkflowAudit) handle this layer attaches,
//! into the same sink as the request lines (event type `mcp_composite_step`).

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use super::{Auditor, audit_id};
use crate::context::{WorkflowAuditor, WorkflowStep};

/// The event type of a step line.
pub(super) const STEP_EVENT: &str = "mcp_composite_step";

/// Writes step lines with the layer's configuration and sink.
pub(super) struct StepAuditor(pub(super) Arc<Auditor>);

#[derive(Serialize)]
struct StepLine<'a> {
    audit_id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    logged_at: &'a str,
    outcome: &'a str,
    component: &'a str,
    subjects: Subjects<'a>,
    target: Target<'a>,
    workflow: Workflow<'a>,
    metadata: Metadata,
}

#[derive(Serialize)]
struct Subjects<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<&'a str>,
}

#[derive(Serialize)]
struct Target<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<&'a str>,
}

#[derive(Serialize)]
struct Workflow<'a> {
    id: &'a str,
    composite: &'a str,
    step: &'a str,
    attempts: u32,
}

#[derive(Serialize)]
struct Metadata {
    duration_ms: f64,
}

impl WorkflowAuditor for StepAuditor {
    fn step(&self, step: &WorkflowStep<'_>) {
        let auditor = &self.0;
        if !auditor.config.wants(STEP_EVENT) {
            return;
        }
        let mut ids = [0u8; 36];
        let logged_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let line = StepLine {
            audit_id: audit_id(&mut ids),
            kind: STEP_EVENT,
            logged_at: &logged_at,
            outcome: step.outcome,
            component: &auditor.config.component,
            subjects: Subjects {
                user_id: step.identity.map(|i| i.subject.as_str()),
            },
            target: Target {
                kind: "tool",
                name: step.tool,
                backend: step.backend,
            },
            workflow: Workflow {
                id: step.workflow_id,
                composite: step.composite,
                step: step.step,
                attempts: step.attempts,
            },
            metadata: Metadata {
                duration_ms: (step.duration.as_secs_f64() * 1_000_000.0).round() / 1000.0,
            },
        };
        let mut bytes = Vec::with_capacity(384);
        if let Err(e) = serde_json::to_writer(&mut bytes, &line) {
            tracing::error!("audit line not serialized: {e}");
            return;
        }
        bytes.push(b'\n');
        auditor.sink.write(&bytes);
    }
}
