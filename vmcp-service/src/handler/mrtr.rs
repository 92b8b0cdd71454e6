//! A Modern backend's `input_required` (MRTR, SEP-2322) on its way to the caller.
//!
//! A 2026-07-28 caller gets it unchanged: it answers and retries with
//! `inputResponses` and the echoed `requestState`, and the retry is forwarded like
//! any call. A 2025-11-25 caller cannot: the gateway asks it each input request over
//! its session ([`super::ask`]) and retries the backend call itself with the answers
//! and the backend's `requestState`, untouched, until the backend completes: at most
//! [`MAX_ROUNDS`] rounds, all within the call's timeout.
//!
//! The backend hop declares the caller's own client capabilities (SEP-2322: a server
//! must not ask for what the client did not declare), limited to the three the
//! gateway can bridge, so a backend asks only what this caller can answer.
#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but still bridged.

use std::time::Duration;

use rmcp::model::{
    CallToolResponse, ClientCapabilities, GetPromptResponse, InputRequiredResult, InputResponses,
    RequestMetaObject,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use tokio::time::Instant;

use super::ask::{Ask, ask};
use crate::backend::meta::bridged_capabilities;
use crate::backend::{BackendError, CallBudget};

/// Rounds of `input_required` a Legacy caller's call may take before the gateway
/// gives up (rmcp's own client uses the same bound).
pub(super) const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

/// The client capabilities the caller of `ctx` declared: a 2026-07-28 request's own
/// `_meta` (never an earlier request's), a 2025-11-25 session's `initialize`; only
/// what the gateway relays back ([`bridged_capabilities`]).
pub(super) fn caller_capabilities(ctx: &RequestContext<RoleServer>) -> ClientCapabilities {
    let declared = if ctx.meta.protocol_version().is_some() {
        ctx.meta.client_capabilities()
    } else {
        ctx.peer.peer_info().map(|info| info.capabilities.clone())
    }
    .unwrap_or_default();
    bridged_capabilities(declared)
}

/// Declare the caller's capabilities in a Modern backend request's `_meta` (the
/// direct path keeps them over the gateway's own, empty ones).
pub(super) fn declare(meta: &mut Option<RequestMetaObject>, ctx: &RequestContext<RoleServer>) {
    meta.get_or_insert_default()
        .set_client_capabilities(caller_capabilities(ctx));
}

/// A backend answer that may be `input_required`.
pub(super) trait MaybeInputRequired {
    /// The `input_required` result, if this is one.
    fn input_required(&self) -> Option<&InputRequiredResult>;
}

impl MaybeInputRequired for CallToolResponse {
    fn input_required(&self) -> Option<&InputRequiredResult> {
        match self {
            Self::InputRequired(result) => Some(result),
            _ => None,
        }
    }
}

impl MaybeInputRequired for GetPromptResponse {
    fn input_required(&self) -> Option<&InputRequiredResult> {
        match self {
            Self::InputRequired(result) => Some(result),
            _ => None,
        }
    }
}

/// What the gateway's retry of a backend call carries.
#[derive(Debug)]
pub(super) struct Retry {
    /// The caller's answers, by the backend's keys.
    pub(super) input_responses: InputResponses,
    /// The backend's `requestState`, exactly as it sent it.
    pub(super) request_state: Option<String>,
}

/// Why a bridged call ended without a backend answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum BridgeError {
    /// The caller could not be asked, or did not answer (see [`super::ask::AskError`]).
    #[error("{0}")]
    Ask(#[from] super::ask::AskError),
    /// The backend asked for a kind of input this gateway does not know.
    #[error("the backend asked for input (`{0}`) of a kind vmcp cannot relay")]
    UnknownInput(String),
    /// The call's timeout ran out between rounds.
    #[error("the backend did not complete within the call's timeout of {0:?}")]
    OutOfTime(Duration),
    /// The backend still wanted input after [`MAX_ROUNDS`] rounds.
    #[error("the backend still required input after {MAX_ROUNDS} rounds")]
    TooManyRounds,
}

impl From<BridgeError> for ErrorData {
    fn from(error: BridgeError) -> Self {
        match error {
            BridgeError::Ask(ask) => ask.into(),
            other => ErrorData::internal_error(other.to_string(), None),
        }
    }
}

/// Complete a 2025-11-25 caller's call whose backend answered `first`: while the
/// answer is `input_required`, ask the caller of `ctx` and `retry` (with the time
/// left of `budget`). Any other answer, an error included, is returned as is.
pub(super) async fn complete_for_legacy<T, F, Fut>(
    ctx: &RequestContext<RoleServer>,
    budget: CallBudget,
    started: Instant,
    first: Result<T, BackendError>,
    mut retry: F,
) -> Result<Result<T, BackendError>, BridgeError>
where
    T: MaybeInputRequired,
    F: FnMut(Retry, CallBudget) -> Fut,
    Fut: Future<Output = Result<T, BackendError>>,
{
    let deadline = started + budget.timeout;
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        (!left.is_zero())
            .then_some(left)
            .ok_or(BridgeError::OutOfTime(budget.timeout))
    };
    let mut response = first;
    for _ in 0..MAX_ROUNDS {
        let Some(wanted) = response.as_ref().ok().and_then(|r| r.input_required()) else {
            return Ok(response);
        };
        let request_state = wanted.request_state.clone();
        let mut input_responses = InputResponses::new();
        // One question at a time: a person answers elicitations in turn, and the
        // order is the backend's (its keys, sorted).
        for (key, request) in wanted.input_requests.clone().unwrap_or_default() {
            let question =
                Ask::from_input_request(request).ok_or(BridgeError::UnknownInput(key.clone()))?;
            let answer = ask(ctx, question, left()?).await?;
            input_responses.insert(key, answer.into_value()?);
        }
        let retry_budget = CallBudget::for_caller(left()?, budget.caller);
        response = retry(
            Retry {
                input_responses,
                request_state,
            },
            retry_budget,
        )
        .await;
    }
    match response {
        Ok(r) if r.input_required().is_some() => Err(BridgeError::TooManyRounds),
        other => Ok(other),
    }
}
