//! Backend-to-client requests of Legacy backends: which client capabilities a backend
//! connection declares, and how a backend's `elicitation/create`,
//! `sampling/createMessage` or `roots/list` travels to the caller whose call caused
//! it.
//!
//! A 2025-11-25 backend only asks what its client declared at `initialize`, so a
//! connection declares exactly the capabilities of the callers that use it
//! ([`ClientCaps`]); connections are keyed by that set (see `callers.rs`). A request
//! that arrives on the answer stream of a relayed call becomes an [`Ask`] on that
//! call's relay; the caller's side answers it (over a Legacy caller's session, or
//! through `input_required` for a Modern caller) and the answer is posted back to
//! the backend under the request's own id.
#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but still served.

use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientResult, ElicitationCapability, FormElicitationCapability,
    InputRequest, RootsCapabilities, SamplingCapability, ServerRequest, UrlElicitationCapability,
};
use tokio::sync::{mpsc, oneshot};

/// The bridgeable client capabilities of a caller: the subset of its declared
/// capabilities that a backend may use to ask it something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientCaps {
    /// `elicitation.form` (or a bare `elicitation: {}`, which 2025-11-25 reads as form).
    pub elicitation_form: bool,
    /// `elicitation.url`.
    pub elicitation_url: bool,
    /// `sampling`.
    pub sampling: bool,
    /// `roots`.
    pub roots: bool,
}

impl ClientCaps {
    /// Every capability the gateway can bridge.
    pub const ALL: Self = Self {
        elicitation_form: true,
        elicitation_url: true,
        sampling: true,
        roots: true,
    };

    /// The bridgeable part of `capabilities`.
    pub fn of(capabilities: &ClientCapabilities) -> Self {
        let (form, url) = match &capabilities.elicitation {
            None => (false, false),
            // Before form and url existed, `elicitation: {}` meant form.
            Some(e) if e.form.is_none() && e.url.is_none() => (true, false),
            Some(e) => (e.form.is_some(), e.url.is_some()),
        };
        Self {
            elicitation_form: form,
            elicitation_url: url,
            sampling: capabilities.sampling.is_some(),
            roots: capabilities.roots.is_some(),
        }
    }

    /// No capability: the backend can ask nothing (the shared connection).
    pub fn is_empty(self) -> bool {
        self == Self::default()
    }

    /// What a backend connection declares at `initialize` for these capabilities.
    /// `roots.listChanged` is not declared: the gateway does not relay a caller's
    /// roots changes.
    pub fn declared(self) -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        if self.elicitation_form || self.elicitation_url {
            let mut e = ElicitationCapability::new();
            e.form = self.elicitation_form.then(FormElicitationCapability::new);
            e.url = self.elicitation_url.then(UrlElicitationCapability::new);
            caps.elicitation = Some(e);
        }
        if self.sampling {
            caps.sampling = Some(SamplingCapability::default());
        }
        if self.roots {
            caps.roots = Some(RootsCapabilities::default());
        }
        caps
    }

    /// Whether a caller with these capabilities may be asked `request`.
    pub(crate) fn allows(self, request: &InputRequest) -> bool {
        match request {
            InputRequest::CreateMessage(_) => self.sampling,
            InputRequest::ListRoots(_) => self.roots,
            InputRequest::Elicitation(e) => {
                match serde_json::to_value(&e.params)
                    .ok()
                    .as_ref()
                    .and_then(|p| p.get("mode"))
                    .and_then(|m| m.as_str())
                {
                    Some("url") => self.elicitation_url,
                    _ => self.elicitation_form,
                }
            }
            // A kind added to MCP later is not bridged.
            _ => false,
        }
    }
}

/// A backend's answer to give: the caller's result, or an error for the backend.
pub(crate) type Answer = Result<ClientResult, ErrorData>;

/// One backend-to-client request on its way to the caller of the call it belongs to.
#[derive(Debug)]
pub(crate) struct Ask {
    /// What the backend asks.
    pub(crate) request: InputRequest,
    /// Where the answer goes; dropping it answers the backend with an error.
    pub(crate) reply: oneshot::Sender<Answer>,
}

/// The caller side of a call's asks.
pub(crate) type AskReceiver = mpsc::Receiver<Ask>;

/// A channel for one call's asks (a backend asks one thing at a time per call).
pub(crate) fn asks() -> (mpsc::Sender<Ask>, AskReceiver) {
    mpsc::channel(4)
}

/// The bridgeable request inside `request`, if it is one.
pub(crate) fn input_request(request: ServerRequest) -> Option<InputRequest> {
    match request {
        ServerRequest::CreateMessageRequest(r) => Some(InputRequest::CreateMessage(r)),
        ServerRequest::ElicitRequest(r) => Some(InputRequest::Elicitation(r)),
        ServerRequest::ListRootsRequest(r) => Some(InputRequest::ListRoots(r)),
        _ => None,
    }
}

/// The backend's answer when the gateway has nobody to ask (no call, or a caller
/// that did not declare the capability): the gateway's own policy.
pub(crate) fn policy_answer(request: &InputRequest) -> Answer {
    use rmcp::model::{ElicitResult, ElicitationAction, ListRootsResult};
    match request {
        InputRequest::ListRoots(_) => Ok(ClientResult::ListRootsResult(ListRootsResult::default())),
        InputRequest::Elicitation(_) => Ok(ClientResult::ElicitResult(ElicitResult::new(
            ElicitationAction::Decline,
        ))),
        _ => Err(sampling_declined()),
    }
}

/// Sampling has no "decline" result: MCP's rejection is an error (code -1).
pub(crate) fn sampling_declined() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(-1),
        "sampling declined: no caller to ask",
        None,
    )
}

/// Read a Modern caller's `inputResponses` entry as the answer to `request`.
pub(crate) fn answer_from_json(request: &InputRequest, value: serde_json::Value) -> Answer {
    let parsed = match request {
        InputRequest::CreateMessage(_) => {
            serde_json::from_value(value).map(|r| ClientResult::CreateMessageResult(Box::new(r)))
        }
        InputRequest::Elicitation(_) => {
            serde_json::from_value(value).map(ClientResult::ElicitResult)
        }
        InputRequest::ListRoots(_) => {
            serde_json::from_value(value).map(ClientResult::ListRootsResult)
        }
        _ => return Err(ErrorData::invalid_params("unsupported input request", None)),
    };
    parsed.map_err(|e| ErrorData::invalid_params(format!("invalid input response: {e}"), None))
}

/// Add to `listed` (a backend's listing on its shared connection) what `capable`
/// (its listing as a client with every bridgeable capability) has besides: the
/// tools, prompts, resources and templates it offers only to capable clients. The
/// shared listing wins on names both have, and keeps its cache hints: a backend that
/// keeps state per session (server-everything adds resources to the session that
/// asked) shows the shared session's state.
pub(crate) fn union(listed: &mut super::BackendCapabilities, capable: super::BackendCapabilities) {
    use std::collections::BTreeSet;
    fn add<T>(into: &mut Vec<T>, from: Vec<T>, key: impl Fn(&T) -> String) {
        let known: BTreeSet<String> = into.iter().map(&key).collect();
        into.extend(from.into_iter().filter(|item| !known.contains(&key(item))));
    }
    add(&mut listed.tools, capable.tools, |t| t.name.to_string());
    add(&mut listed.prompts, capable.prompts, |p| p.name.clone());
    add(&mut listed.resources, capable.resources, |r| r.uri.clone());
    add(&mut listed.templates, capable.templates, |t| {
        t.uri_template.clone()
    });
    listed.completions |= capable.completions;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_elicitation_means_form_and_declared_round_trips() {
        let caps: ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {}, "roots": {}})).unwrap();
        let bridged = ClientCaps::of(&caps);
        assert_eq!(
            bridged,
            ClientCaps {
                elicitation_form: true,
                roots: true,
                ..Default::default()
            }
        );
        assert_eq!(ClientCaps::of(&bridged.declared()), bridged);
        assert_eq!(ClientCaps::of(&ClientCaps::ALL.declared()), ClientCaps::ALL);
        assert!(ClientCaps::of(&ClientCapabilities::default()).is_empty());
    }
}
