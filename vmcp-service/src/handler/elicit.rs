//! Elicitation for composite steps: the form request of a step, asking a
//! 2025-11-25 caller over its session (through `handler::ask`), and reading the
//! answer.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitResult};
use rmcp::service::RequestContext;
use serde_json::{Map, Value};

use super::ask::{self, AskError};
use crate::composite::{Ask, Elicited};

/// Why a caller that did not declare elicitation was not asked.
pub(super) const CANNOT_ANSWER: &str =
    "this client cannot answer elicitation (it did not declare the capability)";

/// The caller's answer as a step sees it.
pub(super) fn elicited(result: ElicitResult) -> Elicited {
    let action = serde_json::to_value(result.action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "cancel".to_owned());
    let content = match result.content {
        Some(Value::Object(content)) => Some(content),
        _ => None,
    };
    Elicited { action, content }
}

/// The form request of an elicitation step; `Err` when its schema is not one.
pub(super) fn form(
    message: String,
    schema: Map<String, Value>,
) -> Result<ElicitRequestParams, String> {
    let requested_schema = serde_json::from_value(Value::Object(schema))
        .map_err(|e| format!("the step's schema is not an elicitation schema: {e}"))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    })
}

/// Ask the 2025-11-25 caller of `ctx` over its session (`handler::ask`), waiting
/// at most `within`. Any failure to get an answer is a reason (counts as a decline).
pub(super) async fn ask_over_session(
    ctx: RequestContext<RoleServer>,
    message: String,
    schema: Map<String, Value>,
    within: Duration,
) -> Ask {
    let params = match form(message, schema) {
        Ok(params) => params,
        Err(why) => return Ask::Unavailable(why),
    };
    match ask::ask(&ctx, ask::Ask::Elicit(Box::new(params)), within).await {
        Ok(ask::Answer::Elicit(result)) => Ask::Answered(elicited(result)),
        Ok(_) => Ask::Unavailable("the caller's answer is not an elicitation result".into()),
        Err(AskError::NotDeclared(_)) => Ask::Unavailable(CANNOT_ANSWER.into()),
        Err(AskError::TimedOut(limit)) => Ask::Unavailable(format!("no answer within {limit:?}")),
        Err(e) => Ask::Unavailable(format!("the client did not answer the elicitation: {e}")),
    }
}
