//! Asking a 2025-11-25 caller something while its call runs: `elicitation/create`,
//! `sampling/createMessage` and `roots/list`, sent over the caller's own session.
//!
//! Whoever needs the caller's input uses this: a Modern backend's `input_required`
//! (the gateway asks, then retries the backend call itself) and a Legacy backend's
//! own request (relayed). The question rides the POST stream of the caller's request
//! (rmcp tags requests sent from a handler's task with the originating request,
//! SEP-2260), waits at most the call's remaining budget, and is refused before
//! anything is sent when the caller did not declare the capability: MCP forbids
//! asking a client for what it did not declare. The answer comes back as the client
//! sent it.
#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but part of 2025-11-25.

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientResult, ContextInclusion, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorCode, InputRequest, ListRootsRequest, ListRootsResult, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

/// One question for the caller.
#[derive(Debug, Clone)]
pub(crate) enum Ask {
    /// `elicitation/create` (form or URL mode).
    Elicit(Box<ElicitRequestParams>),
    /// `sampling/createMessage`.
    Sample(Box<CreateMessageRequestParams>),
    /// `roots/list`.
    Roots,
}

/// The caller's answer, as it sent it.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// The answer to `elicitation/create`.
    Elicit(ElicitResult),
    /// The answer to `sampling/createMessage`.
    Sample(Box<CreateMessageResult>),
    /// The answer to `roots/list`.
    Roots(ListRootsResult),
}

/// A client capability a question needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capability {
    /// `elicitation` with form mode (or no mode named: form is the default).
    ElicitationForm,
    /// `elicitation.url`.
    ElicitationUrl,
    /// `sampling`.
    Sampling,
    /// `sampling.tools` (a sampling request with `tools` or `toolChoice`).
    SamplingTools,
    /// `sampling.context` (a sampling request with `includeContext` other than `none`).
    SamplingContext,
    /// `roots`.
    Roots,
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ElicitationForm => "elicitation.form",
            Self::ElicitationUrl => "elicitation.url",
            Self::Sampling => "sampling",
            Self::SamplingTools => "sampling.tools",
            Self::SamplingContext => "sampling.context",
            Self::Roots => "roots",
        })
    }
}

impl Capability {
    /// The `ClientCapabilities` object naming this capability (the `data` of
    /// `-32021 MissingRequiredClientCapability`).
    fn as_client_capabilities(self) -> Value {
        match self {
            Self::ElicitationForm => json!({"elicitation": {"form": {}}}),
            Self::ElicitationUrl => json!({"elicitation": {"url": {}}}),
            Self::Sampling => json!({"sampling": {}}),
            Self::SamplingTools => json!({"sampling": {"tools": {}}}),
            Self::SamplingContext => json!({"sampling": {"context": {}}}),
            Self::Roots => json!({"roots": {}}),
        }
    }

    /// Whether `declared` includes this capability.
    fn declared_in(self, declared: &ClientCapabilities) -> bool {
        let sampling = declared.sampling.as_ref();
        match self {
            // A client naming neither mode supports form mode (2025-11-25).
            Self::ElicitationForm => declared
                .elicitation
                .as_ref()
                .is_some_and(|e| e.form.is_some() || e.url.is_none()),
            Self::ElicitationUrl => declared
                .elicitation
                .as_ref()
                .is_some_and(|e| e.url.is_some()),
            Self::Sampling => sampling.is_some(),
            Self::SamplingTools => sampling.is_some_and(|s| s.tools.is_some()),
            Self::SamplingContext => sampling.is_some_and(|s| s.context.is_some()),
            Self::Roots => declared.roots.is_some(),
        }
    }
}

/// Why a question got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// The caller did not declare what the question needs; nothing was sent.
    #[error("the caller did not declare the `{0}` client capability")]
    NotDeclared(Capability),
    /// A 2026-07-28 caller has no session to be asked over (it gets
    /// `input_required` instead).
    #[error("a 2026-07-28 caller cannot be asked over a session")]
    Stateless,
    /// The caller did not answer within the call's remaining budget (it was sent
    /// `notifications/cancelled` for the question).
    #[error("the caller did not answer within {0:?}")]
    TimedOut(Duration),
    /// The caller cancelled its own request while the question was open.
    #[error("the caller cancelled its request")]
    Cancelled,
    /// The caller answered with a JSON-RPC error (relayed as is).
    #[error("the caller refused: {}", .0.message)]
    Refused(ErrorData),
    /// The caller's session or stream went away.
    #[error("the caller's session is gone")]
    Gone,
    /// The caller's answer is not the result the question asks for.
    #[error("the caller's answer is not a valid {0} result")]
    Malformed(&'static str),
}

impl From<AskError> for ErrorData {
    fn from(error: AskError) -> Self {
        match error {
            AskError::NotDeclared(capability) => ErrorData::new(
                ErrorCode(-32021),
                error.to_string(),
                Some(json!({"requiredCapabilities": capability.as_client_capabilities()})),
            ),
            AskError::Stateless => ErrorData::invalid_request(error.to_string(), None),
            AskError::Refused(error) => error,
            AskError::TimedOut(_)
            | AskError::Cancelled
            | AskError::Gone
            | AskError::Malformed(_) => ErrorData::internal_error(error.to_string(), None),
        }
    }
}

impl Ask {
    /// The question an MRTR input request asks (`None` for a kind this rmcp does not
    /// know).
    pub(crate) fn from_input_request(request: InputRequest) -> Option<Self> {
        match request {
            InputRequest::Elicitation(r) => Some(Self::Elicit(Box::new(r.params))),
            InputRequest::CreateMessage(r) => Some(Self::Sample(Box::new(r.params))),
            InputRequest::ListRoots(_) => Some(Self::Roots),
            _ => None,
        }
    }

    /// The client capabilities this question needs, all of which the caller must
    /// have declared.
    pub(crate) fn needs(&self) -> Vec<Capability> {
        match self {
            Self::Elicit(params) => match **params {
                ElicitRequestParams::UrlElicitationParams { .. } => {
                    vec![Capability::ElicitationUrl]
                }
                _ => vec![Capability::ElicitationForm],
            },
            Self::Sample(params) => {
                let mut needs = vec![Capability::Sampling];
                if params.tools.is_some() || params.tool_choice.is_some() {
                    needs.push(Capability::SamplingTools);
                }
                if params
                    .include_context
                    .as_ref()
                    .is_some_and(|c| !matches!(c, ContextInclusion::None))
                {
                    needs.push(Capability::SamplingContext);
                }
                needs
            }
            Self::Roots => vec![Capability::Roots],
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Elicit(_) => "elicitation/create",
            Self::Sample(_) => "sampling/createMessage",
            Self::Roots => "roots/list",
        }
    }

    fn into_request(self) -> ServerRequest {
        match self {
            Self::Elicit(params) => ServerRequest::ElicitRequest(ElicitRequest::new(*params)),
            Self::Sample(params) => {
                ServerRequest::CreateMessageRequest(CreateMessageRequest::new(*params))
            }
            Self::Roots => ServerRequest::ListRootsRequest(ListRootsRequest::default()),
        }
    }
}

impl Answer {
    /// The answer as JSON (an MRTR `inputResponses` value).
    pub(crate) fn into_value(self) -> Result<Value, AskError> {
        let value = match self {
            Self::Elicit(result) => serde_json::to_value(result),
            Self::Sample(result) => serde_json::to_value(result),
            Self::Roots(result) => serde_json::to_value(result),
        };
        value.map_err(|_| AskError::Malformed("answer"))
    }
}

/// The client capabilities the caller of `ctx` declared in its `initialize`
/// (none for a 2026-07-28 request, which has no session to be asked over).
pub(crate) fn declared(ctx: &RequestContext<RoleServer>) -> Option<ClientCapabilities> {
    if ctx.meta.protocol_version().is_some() {
        return None;
    }
    Some(
        ctx.peer
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default(),
    )
}

/// Ask the 2025-11-25 caller of `ctx` `question` over its session, waiting at most
/// `within`. Must run on the handler's own task (not a spawned one) so the question
/// rides the caller's request stream rather than its session-wide GET stream.
pub(crate) async fn ask(
    ctx: &RequestContext<RoleServer>,
    question: Ask,
    within: Duration,
) -> Result<Answer, AskError> {
    let declared = declared(ctx).ok_or(AskError::Stateless)?;
    if let Some(missing) = question
        .needs()
        .into_iter()
        .find(|c| !c.declared_in(&declared))
    {
        return Err(AskError::NotDeclared(missing));
    }
    let kind = question.kind();
    let expects_sample = matches!(question, Ask::Sample(_));
    let expects_roots = matches!(question, Ask::Roots);
    let options = {
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(within);
        options
    };
    let answered = async {
        ctx.peer
            .send_request_with_option(question.into_request(), options)
            .await?
            .await_response()
            .await
    };
    let result = tokio::select! {
        biased;
        () = ctx.ct.cancelled() => return Err(AskError::Cancelled),
        result = answered => result,
    };
    let result = result.map_err(|error| match error {
        ServiceError::McpError(error) => AskError::Refused(error),
        ServiceError::Timeout { timeout } => AskError::TimedOut(timeout),
        ServiceError::Cancelled { .. } => AskError::Cancelled,
        _ => AskError::Gone,
    })?;
    // rmcp parses the answer as an untagged union; a shape it took for another
    // member is read again as the kind asked for.
    let answer = match result {
        ClientResult::CreateMessageResult(r) if expects_sample => Answer::Sample(r),
        ClientResult::ListRootsResult(r) if expects_roots => Answer::Roots(r),
        ClientResult::ElicitResult(r) if !expects_sample && !expects_roots => Answer::Elicit(r),
        other => {
            let value = serde_json::to_value(&other).map_err(|_| AskError::Malformed(kind))?;
            let reread = if expects_sample {
                serde_json::from_value(value).map(|r| Answer::Sample(Box::new(r)))
            } else if expects_roots {
                serde_json::from_value(value).map(Answer::Roots)
            } else {
                serde_json::from_value(value).map(Answer::Elicit)
            };
            reread.map_err(|_| AskError::Malformed(kind))?
        }
    };
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        ElicitationCapability, FormElicitationCapability, SamplingCapability, SamplingMessage,
    };

    fn sample(tools: bool) -> Ask {
        let mut params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hi")], 10);
        if tools {
            params.tool_choice = Some(Default::default());
        }
        Ask::Sample(Box::new(params))
    }

    #[test]
    fn needs_follow_the_question() {
        assert_eq!(sample(false).needs(), vec![Capability::Sampling]);
        assert_eq!(
            sample(true).needs(),
            vec![Capability::Sampling, Capability::SamplingTools]
        );
        assert_eq!(Ask::Roots.needs(), vec![Capability::Roots]);
    }

    #[test]
    fn declared_capabilities_are_read_per_mode() {
        let none = ClientCapabilities::default();
        assert!(!Capability::ElicitationForm.declared_in(&none));
        assert!(!Capability::Sampling.declared_in(&none));
        assert!(!Capability::Roots.declared_in(&none));

        let mut bare = ClientCapabilities::default();
        bare.elicitation = Some(ElicitationCapability::default());
        assert!(Capability::ElicitationForm.declared_in(&bare));
        assert!(!Capability::ElicitationUrl.declared_in(&bare));

        let mut form = ClientCapabilities::default();
        form.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        assert!(Capability::ElicitationForm.declared_in(&form));

        let mut sampling = ClientCapabilities::default();
        sampling.sampling = Some(SamplingCapability::default());
        assert!(Capability::Sampling.declared_in(&sampling));
        assert!(!Capability::SamplingTools.declared_in(&sampling));
    }

    #[test]
    fn a_missing_capability_is_32021_naming_it() {
        let error = ErrorData::from(AskError::NotDeclared(Capability::Sampling));
        assert_eq!(error.code, ErrorCode(-32021));
        assert_eq!(
            error.data,
            Some(json!({"requiredCapabilities": {"sampling": {}}}))
        );
        let refused = ErrorData::invalid_params("no", None);
        assert_eq!(ErrorData::from(AskError::Refused(refused.clone())), refused);
    }

    #[test]
    fn input_requests_are_questions() {
        let roots = InputRequest::ListRoots(ListRootsRequest::default());
        assert!(matches!(Ask::from_input_request(roots), Some(Ask::Roots)));
    }
}
