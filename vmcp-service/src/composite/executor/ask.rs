//! Elicitation steps: asking the caller, settling its answer by `onDecline` /
//! `onCancel`, and pausing a run for a 2026-07-28 caller's answers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::{Done, Next, Run, Status};
use crate::composite::paused::{Paused, PausedRun, Question, definition_digest, now_ms};
use crate::composite::{Ask, Elicited};
use crate::config::composite::{DEFAULT_STEP_TIMEOUT, ElicitationAction, StepConfig};
use crate::templates::Template;

impl Run {
    pub(super) fn pause(
        &self,
        params: Map<String, Value>,
        done: BTreeMap<String, Done>,
        skip_rest: bool,
        waiting: BTreeMap<String, u64>,
        questions: Vec<Question>,
    ) -> Paused {
        let steps = &self.workflow.config.steps;
        let step_limit = questions
            .iter()
            .filter_map(|q| steps.iter().find(|s| s.id == q.step))
            .map(|s| s.timeout.unwrap_or(DEFAULT_STEP_TIMEOUT))
            .min()
            .unwrap_or(DEFAULT_STEP_TIMEOUT);
        let left = Duration::from_millis(self.deadline_ms.saturating_sub(now_ms()));
        Paused {
            state: PausedRun {
                composite: self.workflow.config.name.clone(),
                definition: definition_digest(&self.workflow.config),
                workflow_id: self.id.to_string(),
                start_time: self.start_time.to_string(),
                started_ms: self.started_ms,
                deadline_ms: self.deadline_ms,
                params,
                done,
                skip_rest,
                waiting,
            },
            questions,
            ttl: step_limit.min(left),
        }
    }

    pub(super) async fn elicitation(
        &self,
        step: &StepConfig,
        context: &Value,
        started: Instant,
    ) -> Next {
        let message = match Template::parse(step.message.as_deref().unwrap_or_default())
            .and_then(|t| t.render(context))
        {
            Ok(m) => m,
            Err(e) => return Next::Abort(format!("message: {e}")),
        };
        let schema = step.schema.clone().unwrap_or_else(empty_schema);
        let limit = step.timeout.unwrap_or(DEFAULT_STEP_TIMEOUT);
        let ask = self.caller.elicit(message.clone(), schema.clone(), limit);
        // The caller's side bounds its own wait by `limit` (and tells the client it
        // gave up); this bound only backs it up.
        let backstop = limit.saturating_add(Duration::from_secs(1));
        let answer = match tokio::time::timeout(backstop, ask).await {
            Ok(Ask::Answered(answer)) => Ok(answer),
            Ok(Ask::Later) => {
                return Next::Ask(Question {
                    step: step.id.clone(),
                    message,
                    schema,
                });
            }
            Ok(Ask::Unavailable(why)) => Err(why),
            Err(_) => Err(format!("no answer within {limit:?}")),
        };
        self.settle(step, answer, started.elapsed())
    }

    /// What an elicitation step's answer (or why there is none) means for the run.
    pub(super) fn settle(
        &self,
        step: &StepConfig,
        answer: Result<Elicited, String>,
        took: Duration,
    ) -> Next {
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
                self.audit(step, "success", took, 1);
                return Next::Go(done);
            }
            "cancel" => step.on_cancel.as_ref(),
            _ => step.on_decline.as_ref(),
        };
        self.audit(step, "failure", took, 1);
        match policy.map(|p| p.action).unwrap_or_default() {
            ElicitationAction::Abort => Next::Abort(
                error.unwrap_or_else(|| format!("the elicitation was answered {action:?}")),
            ),
            ElicitationAction::Continue => Next::Go(done),
            ElicitationAction::SkipRemaining => Next::SkipRemaining(done),
        }
    }
}

/// The schema of an elicitation step without `schema`: an empty form.
fn empty_schema() -> Map<String, Value> {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), json!({}));
    schema
}
