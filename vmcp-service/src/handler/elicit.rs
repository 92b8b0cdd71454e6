//! Elicitation for composite steps: the form request of a step, asking a
//! 2025-11-25 caller over its session, and reading the answer.
//! (`handler/ask.rs`, when it lands, generalises the asking to backend calls.)

use rmcp::RoleServer;
use rmcp::model::{ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ServerRequest};
use rmcp::service::Peer;
use serde_json::{Map, Value};

use crate::composite::{Ask, Elicited};

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

/// Ask a 2025-11-25 caller over its session.
pub(super) async fn ask_over_session(
    peer: Peer<RoleServer>,
    message: String,
    schema: Map<String, Value>,
) -> Ask {
    let params = match form(message, schema) {
        Ok(params) => params,
        Err(why) => return Ask::Unavailable(why),
    };
    // rmcp's `create_elicitation` sits behind its `elicitation` feature (which pulls
    // in `url`); sending the request directly needs neither.
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(result)) => Ask::Answered(elicited(result)),
        Ok(other) => match serde_json::to_value(other).and_then(serde_json::from_value) {
            Ok(result) => Ask::Answered(elicited(result)),
            Err(_) => Ask::Unavailable("the client's answer is not an elicitation result".into()),
        },
        Err(e) => Ask::Unavailable(format!("the client did not answer the elicitation: {e}")),
    }
}
