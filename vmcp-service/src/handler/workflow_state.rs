//! A composite run paused for a 2026-07-28 caller: the `input_required` result that
//! asks the questions with the run's state sealed into `requestState`, and the
//! opening of that state on the retry. Every way a state can fail to open (forged,
//! altered, expired, another caller's, another composite's, other arguments) is the
//! same `-32602` to the client; only a genuine state whose composite changed since
//! (a reload) says so.

use std::collections::BTreeMap;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitResult, InputRequest, InputRequests, InputRequiredResult,
};
use vmcp_layers::context::Identity;

use super::VmcpHandler;
use super::elicit::{elicited, form};
use crate::composite::paused::{PURPOSE, Paused, PausedRun};
use crate::composite::{Elicited, Workflow};

/// The largest serialized state sealed: the sealer refuses tokens over 64 KiB, and
/// base64 and the seal's framing add a third.
const MAX_STATE_BYTES: usize = 47 * 1024;

/// The caller a state is sealed for ([`crate::seal::caller_of`]).
pub(super) struct StateCaller(Vec<u8>);

impl StateCaller {
    pub(super) fn of(identity: Option<&Identity>) -> Self {
        Self(crate::seal::caller_of(identity))
    }
}

/// An opened state and the caller's answers to its questions.
pub(super) struct Resume {
    pub(super) state: PausedRun,
    pub(super) answers: BTreeMap<String, Elicited>,
}

/// The one answer to a state that does not open or does not belong to this call.
fn invalid() -> ErrorData {
    ErrorData::invalid_params("invalid requestState", None)
}

/// A genuine state of a composite whose definition changed since (a reload).
pub(super) fn stale() -> ErrorData {
    ErrorData::invalid_params(
        "the composite tool changed since this requestState was issued; call it again without requestState",
        None,
    )
}

impl VmcpHandler {
    /// Open `token` for `caller`'s retry of `workflow` with `params`.
    pub(super) fn open_state(
        &self,
        caller: &StateCaller,
        token: &str,
        workflow: &Workflow,
        params: &CallToolRequestParams,
    ) -> Result<Resume, ErrorData> {
        let state = self
            .sealer
            .open(PURPOSE, &caller.0, token)
            .map_err(|e| {
                tracing::info!(composite = %workflow.config.name, "refused a workflow requestState: {e}");
                invalid()
            })
            .and_then(|bytes| {
                serde_json::from_slice::<PausedRun>(&bytes).map_err(|_| invalid())
            })?;
        // The retry must be of the same call: same composite, same arguments.
        if state.composite != workflow.config.name
            || state.params != params.arguments.clone().unwrap_or_default()
        {
            return Err(invalid());
        }
        let mut answers = BTreeMap::new();
        for (key, value) in params.input_responses.iter().flatten() {
            if !state.waiting.contains_key(key) {
                return Err(ErrorData::invalid_params(
                    format!("inputResponses.{key} answers no question of this call"),
                    None,
                ));
            }
            let result: ElicitResult = serde_json::from_value(value.clone()).map_err(|_| {
                ErrorData::invalid_params(
                    format!("inputResponses.{key} is not an elicitation result"),
                    None,
                )
            })?;
            answers.insert(key.clone(), elicited(result));
        }
        Ok(Resume { state, answers })
    }

    /// The `input_required` result asking `paused`'s questions, its state sealed for
    /// `caller`; a tool error when the state is too large to hand out.
    pub(super) fn input_required(
        &self,
        caller: &StateCaller,
        name: &str,
        paused: Paused,
    ) -> CallToolResponse {
        let fail = |why: String| {
            tracing::info!(composite = %name, "composite tool failed: {why}");
            CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(format!(
                "composite tool {name:?} failed: {why}"
            ))]))
        };
        let mut requests = InputRequests::new();
        for question in paused.questions {
            match form(question.message, question.schema) {
                Ok(params) => {
                    requests.insert(
                        question.step,
                        InputRequest::Elicitation(ElicitRequest::new(params)),
                    );
                }
                Err(why) => return fail(format!("step {:?}: {why}", question.step)),
            }
        }
        let payload = match serde_json::to_vec(&paused.state) {
            Ok(payload) if payload.len() <= MAX_STATE_BYTES => payload,
            Ok(payload) => {
                return fail(format!(
                    "the workflow's state ({} bytes) is too large to pause for the client's answer (at most {MAX_STATE_BYTES})",
                    payload.len()
                ));
            }
            Err(e) => return fail(format!("the workflow's state cannot be kept: {e}")),
        };
        let token = self.sealer.seal(PURPOSE, &caller.0, paused.ttl, &payload);
        CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(token)))
    }
}
