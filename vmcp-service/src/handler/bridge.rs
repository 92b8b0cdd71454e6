//! The caller's side of a Legacy backend's requests (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) made during its call.
//!
//! - A 2025-11-25 caller is asked over its own session while the call runs
//!   ([`drive_asking`], through `handler::ask`).
//! - A 2026-07-28 caller cannot be asked (its revision has no server-to-client
//!   requests): the backend call keeps running on a task of its own, *parked*, and
//!   the caller gets `input_required` with the backend's request and a sealed
//!   `requestState` naming the parked call ([`Parked`]). Its retry with
//!   `inputResponses` answers the backend and resumes the call, which may ask again.
//!   A parked call whose caller does not come back within `parkedCalls.ttl` is
//!   reaped: the backend's request gets an error answer and the call is cancelled.
//!
//! A parked call lives in the process that started it. Its `requestState` names
//! that replica; a retry landing on another replica (with a `sealing` key every
//! replica shares) is forwarded to the owner over Redis ([`remote`],
//! docs/scaling.md).

mod remote;

pub(crate) use remote::Remote;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use std::time::Duration;

use rmcp::model::{CallToolResponse, ClientResult, InputRequest, InputRequiredResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use tokio::sync::oneshot;

use super::forward::{Cancelled, deliver};
use crate::backend::BackendError;
use crate::backend::ClientCaps;
use crate::backend::bridge::{Answer, Ask, AskReceiver, asks, policy_answer};
use crate::backend::relay::{Relay, RelayReceiver, Wants, relay};
use crate::config::ParkedLimits;
use crate::seal::Sealer;
use crate::session_binding::{Caller, PerCaller};

/// The purpose a parked call's `requestState` is sealed for.
const PURPOSE: &str = "vmcp-park";
/// The `inputRequests` key of the backend's request (one at a time per call).
const INPUT_KEY: &str = "vmcp";

/// Ask the 2025-11-25 caller of `ctx` `request` over its session (`handler::ask`),
/// waiting at most `within`; a request the caller did not declare the capability
/// for is answered by policy instead.
async fn ask_legacy(
    ctx: &RequestContext<RoleServer>,
    caps: ClientCaps,
    request: InputRequest,
    within: Duration,
) -> Answer {
    if !caps.allows(&request) {
        return policy_answer(&request);
    }
    let Some(question) = super::ask::Ask::from_input_request(request.clone()) else {
        return policy_answer(&request);
    };
    match super::ask::ask(ctx, question, within).await {
        Ok(super::ask::Answer::Elicit(result)) => Ok(ClientResult::ElicitResult(result)),
        Ok(super::ask::Answer::Sample(result)) => Ok(ClientResult::CreateMessageResult(result)),
        Ok(super::ask::Answer::Roots(result)) => Ok(ClientResult::ListRootsResult(result)),
        Err(error) => {
            tracing::debug!("asking the caller failed: {error}");
            Err(error.into())
        }
    }
}

impl super::VmcpHandler {
    /// `tools/call` on a Legacy backend for a caller that may be asked (`caps`), or
    /// the retry resuming a parked call (a `requestState` for a Legacy backend's tool
    /// can only be the gateway's). `Err`: the caller cancelled, or the state was
    /// refused.
    /// `tools/call` for a caller a Legacy backend may ask, or the retry of a parked
    /// call: [`Self::call_tool_bridged`] observed and budgeted like any call.
    pub(super) async fn call_tool_asking(
        &self,
        ctx: &RequestContext<RoleServer>,
        client: &Arc<crate::backend::BackendClient>,
        routed: crate::router::Routed<rmcp::model::CallToolRequestParams>,
        name: &str,
        caps: ClientCaps,
    ) -> Result<CallToolResponse, ErrorData> {
        let crate::router::Routed {
            backend,
            mut params,
        } = routed;
        let call =
            super::ObservedCall::start(ctx, &backend, "tools/call", Some(name), &mut params.meta);
        let wants =
            super::forward::wants(ctx, &self.log_levels, || super::session_id(&ctx.extensions));
        let budget = self.budget(&backend, ctx);
        let response = match self
            .call_tool_bridged(ctx, client, name, params, caps, wants, budget)
            .await
        {
            Ok(response) => response,
            Err(error) => {
                if Cancelled::is(&error) {
                    Cancelled::log(ctx, "tools/call", name, &backend);
                }
                call.cancelled();
                return Err(error);
            }
        };
        call.end(&response);
        response.map_err(|e| super::client_error(e, super::is_modern(ctx)))
    }

    #[allow(clippy::too_many_arguments)] // The handler's pieces of one call.
    pub(super) async fn call_tool_bridged(
        &self,
        ctx: &RequestContext<RoleServer>,
        client: &Arc<crate::backend::BackendClient>,
        name: &str,
        mut params: rmcp::model::CallToolRequestParams,
        caps: ClientCaps,
        wants: Wants,
        mut budget: crate::backend::CallBudget,
    ) -> Result<CallOutcome, ErrorData> {
        let limits = self.aggregator.config().operational.parked_calls.limits();
        // The caller may take its time to answer the backend's questions.
        budget.timeout += limits.ttl;
        let parking = Parking {
            ct: ctx.ct.clone(),
            peer: Some(&ctx.peer),
            parked: &self.parked,
            sealer: &self.sealer,
            remote: self.remote.as_ref(),
            limits,
            caps,
            caller: caller_keys(ctx),
            tool: name,
            within: budget.timeout,
        };
        if let Some(state) = params.request_state.take() {
            let responses = params.input_responses.take();
            return parking.resume(&state, responses).await;
        }
        let outcome = if super::is_modern(ctx) {
            let (this, task_ctx, task_client) = (self.clone(), ctx.clone(), client.clone());
            let running = Running::start(wants, move |relay| async move {
                this.on_backend_as(&task_client, &task_ctx, caps, move |c| {
                    let params = params.clone();
                    let relay = relay.clone();
                    async move { c.call_tool_relayed(params, budget, Some(relay)).await }
                })
                .await
            });
            parking.drive(running).await
        } else {
            drive_asking(ctx, wants, caps, limits.ttl, |relay| {
                self.on_backend_as(client, ctx, caps, move |c| {
                    let params = params.clone();
                    let relay = relay.clone();
                    async move { c.call_tool_relayed(params, budget, Some(relay)).await }
                })
            })
            .await
        };
        outcome.map_err(ErrorData::from)
    }
}

/// What happened next on a running call.
enum Event<T> {
    Cancelled,
    Relayed(crate::backend::relay::Relayed),
    Ask(Ask),
    Done(T),
}

/// [`super::forward::drive`] for a 2025-11-25 caller that a Legacy backend may ask:
/// the backend's requests during the call are put to the caller over its session.
async fn drive_asking<T, F, Fut>(
    ctx: &RequestContext<RoleServer>,
    wants: Wants,
    caps: ClientCaps,
    within: Duration,
    call: F,
) -> Result<T, Cancelled>
where
    F: FnOnce(Relay) -> Fut,
    Fut: Future<Output = T>,
{
    let (relay, mut relayed) = relay(wants);
    let (tx, mut asked) = asks();
    let mut call = std::pin::pin!(call(relay.with_asks(tx)));
    loop {
        let event = tokio::select! {
            biased;
            () = ctx.ct.cancelled() => Event::Cancelled,
            Some(item) = relayed.recv() => Event::Relayed(item),
            Some(ask) = asked.recv() => Event::Ask(ask),
            out = &mut call => Event::Done(out),
        };
        match event {
            Event::Cancelled => return Err(Cancelled),
            Event::Relayed(item) => deliver(&ctx.peer, item).await,
            Event::Ask(ask) => {
                if ctx.ct.is_cancelled() {
                    return Err(Cancelled);
                }
                let answer = ask_legacy(ctx, caps, ask.request, within).await;
                let _ = ask.reply.send(answer);
            }
            Event::Done(out) => {
                while let Ok(item) = relayed.try_recv() {
                    deliver(&ctx.peer, item).await;
                }
                return Ok(out);
            }
        }
    }
}

type CallOutcome = Result<CallToolResponse, BackendError>;

/// A backend call running on its own task (so it can outlive the request that
/// started it), with what it sends its caller.
struct Running {
    outcome: oneshot::Receiver<CallOutcome>,
    task: tokio::task::AbortHandle,
    asked: AskReceiver,
    relayed: RelayReceiver,
}

impl Drop for Running {
    /// Dropping the call cancels it on the backend (`notifications/cancelled`).
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    /// Start `call` (given the relay it must use) on a task of its own.
    fn start<F, Fut>(wants: Wants, call: F) -> Self
    where
        F: FnOnce(Relay) -> Fut,
        Fut: Future<Output = CallOutcome> + Send + 'static,
    {
        let (relay, relayed) = relay(wants);
        let (tx, asked) = asks();
        let (done, outcome) = oneshot::channel();
        let call = call(relay.with_asks(tx));
        let task = tokio::spawn(async move {
            let _ = done.send(call.await);
        });
        Self {
            outcome,
            task: task.abort_handle(),
            asked,
            relayed,
        }
    }
}

/// A call waiting for its caller's `inputResponses`.
struct ParkedCall {
    caller: Vec<u8>,
    /// Whom it counts against for `parkedCalls.maxPerIdentity` / `maxPerAddress`.
    quota: Caller,
    running: Running,
    pending: Ask,
}

/// Why a call could not be parked or resumed.
#[derive(Debug, thiserror::Error)]
enum ParkError {
    /// The state did not open, was not for this tool, or its call is gone (reaped
    /// or already resumed). One answer for all, so a client learns nothing.
    #[error("invalid requestState")]
    InvalidState,
    /// The call is held by another replica this one cannot reach (no shared
    /// Redis), or that did not answer: it is gone, the caller should call again.
    #[error(
        "the gateway replica holding this call is unavailable; call the tool again without requestState"
    )]
    OwnerGone,
    /// `parkedCalls.max` calls are waiting already.
    #[error("too many calls are waiting for input; try again later")]
    Full,
    /// This caller's `parkedCalls.maxPerIdentity` (`maxPerAddress`) calls are
    /// waiting already.
    #[error("too many of your calls are waiting for input; answer one first")]
    CallerFull,
}

impl From<ParkError> for ErrorData {
    fn from(error: ParkError) -> Self {
        match error {
            ParkError::InvalidState => ErrorData::invalid_params(error.to_string(), None),
            // Retryable: the same call made again parks anew on a live replica.
            ParkError::OwnerGone => ErrorData::new(
                rmcp::model::ErrorCode(-32000),
                error.to_string(),
                Some(serde_json::json!({"retryable": true})),
            ),
            ParkError::Full | ParkError::CallerFull => {
                ErrorData::internal_error(error.to_string(), None)
            }
        }
    }
}

/// The parked calls of this process.
pub(crate) struct Parked {
    calls: Mutex<HashMap<u64, ParkedCall>>,
    next: AtomicU64,
    /// This replica's id, sealed into every `requestState` it hands out.
    owner: Arc<str>,
}

impl Default for Parked {
    fn default() -> Self {
        Self::new(remote::replica_id())
    }
}

/// A parked call's `requestState`, opened: which call, on which replica.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ticket {
    id: u64,
    owner: String,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked").finish_non_exhaustive()
    }
}

impl Parked {
    /// No calls parked yet, on the replica `owner`.
    pub(crate) fn new(owner: Arc<str>) -> Self {
        Self {
            calls: Mutex::default(),
            next: AtomicU64::default(),
            owner,
        }
    }

    /// This replica's id.
    pub(crate) fn owner(&self) -> &Arc<str> {
        &self.owner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ParkedCall>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many calls are parked now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Park `running` until its caller answers `pending`; the `input_required`
    /// answer for the caller. A reaper cancels it after `limits.ttl`.
    fn park(
        self: &Arc<Self>,
        sealer: &Sealer,
        limits: ParkedLimits,
        caller: CallerKeys,
        tool: &str,
        running: Running,
        pending: Ask,
    ) -> Result<InputRequiredResult, ParkError> {
        let CallerKeys {
            seal: caller,
            quota,
        } = caller;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = sealer.seal(
            PURPOSE,
            &caller,
            limits.ttl,
            &payload(id, &self.owner, tool),
        );
        let request = pending.request.clone();
        {
            let mut calls = self.lock();
            if calls.len() >= limits.max {
                // Dropping `running` and `pending` cancels the call on the backend.
                return Err(ParkError::Full);
            }
            // Only the caller's own calls count: over its cap, nothing of another
            // caller's is touched.
            let mine = calls.values().filter(|c| c.quota == quota).count();
            if mine >= limits.per_caller(&quota) {
                return Err(ParkError::CallerFull);
            }
            calls.insert(
                id,
                ParkedCall {
                    caller,
                    quota,
                    running,
                    pending,
                },
            );
        }
        tokio::spawn(reap(Arc::downgrade(self), id, limits.ttl));
        Ok(InputRequiredResult::new(
            Some(BTreeMap::from([(INPUT_KEY.to_owned(), request)])),
            Some(state),
        ))
    }

    /// Open `state` for `caller` and `tool`: the call it names, on whichever replica.
    fn open(sealer: &Sealer, caller: &[u8], tool: &str, state: &str) -> Result<Ticket, ParkError> {
        let opened = sealer.open(PURPOSE, caller, state).map_err(|error| {
            tracing::debug!("requestState refused: {error}");
            ParkError::InvalidState
        })?;
        parse_payload(&opened, tool).ok_or(ParkError::InvalidState)
    }

    /// Take the call `state` names for `caller` and `tool`, if this replica holds it.
    #[cfg(test)]
    fn take(
        &self,
        sealer: &Sealer,
        caller: &[u8],
        tool: &str,
        state: &str,
    ) -> Result<ParkedCall, ParkError> {
        let ticket = Self::open(sealer, caller, tool, state)?;
        if ticket.owner != *self.owner {
            return Err(ParkError::InvalidState);
        }
        self.take_id(ticket.id, caller)
    }

    /// Take this replica's parked call `id` if it is `caller`'s.
    fn take_id(&self, id: u64, caller: &[u8]) -> Result<ParkedCall, ParkError> {
        let mut calls = self.lock();
        match calls.get(&id) {
            Some(call) if call.caller == caller => {}
            _ => return Err(ParkError::InvalidState),
        }
        calls.remove(&id).ok_or(ParkError::InvalidState)
    }
}

/// Cancel parked call `id` if its caller has not come back after `ttl`.
async fn reap(parked: Weak<Parked>, id: u64, ttl: Duration) {
    tokio::time::sleep(ttl).await;
    let Some(parked) = parked.upgrade() else {
        return;
    };
    let call = parked.lock().remove(&id);
    if let Some(call) = call {
        tracing::info!("a parked call's caller did not return within {ttl:?}; cancelling it");
        // The backend's request gets an error answer, then the call is cancelled.
        let _ = call.pending.reply.send(Err(ErrorData::internal_error(
            "the caller did not answer in time",
            None,
        )));
        drop(call.running);
    }
}

/// The sealed payload: the parked call's id, the replica holding it (length-
/// prefixed) and the tool it was called as.
fn payload(id: u64, owner: &str, tool: &str) -> Vec<u8> {
    let owner = &owner.as_bytes()[..owner.len().min(usize::from(u8::MAX))];
    let mut out = id.to_be_bytes().to_vec();
    out.push(u8::try_from(owner.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(owner);
    out.extend_from_slice(tool.as_bytes());
    out
}

fn parse_payload(payload: &[u8], tool: &str) -> Option<Ticket> {
    let (id, rest) = payload.split_at_checked(8)?;
    let (len, rest) = rest.split_first()?;
    let (owner, name) = rest.split_at_checked(usize::from(*len))?;
    (name == tool.as_bytes()).then(|| Ticket {
        id: u64::from_be_bytes(id.try_into().unwrap_or_default()),
        owner: String::from_utf8_lossy(owner).into_owned(),
    })
}

/// A 2026-07-28 caller's call that may park: whose it is, where parked calls are
/// kept and sealed, and what its caller may be asked.
struct Parking<'a> {
    /// The caller went away.
    ct: tokio_util::sync::CancellationToken,
    /// Where the call's notifications go (none for a retry forwarded from another
    /// replica: they are dropped).
    peer: Option<&'a rmcp::Peer<RoleServer>>,
    parked: &'a Arc<Parked>,
    sealer: &'a Sealer,
    /// Reaches the replica holding a call parked elsewhere.
    remote: Option<&'a Arc<Remote>>,
    limits: ParkedLimits,
    caps: ClientCaps,
    caller: CallerKeys,
    tool: &'a str,
    /// How long a resumed call may run (its budget).
    within: Duration,
}

impl Parking<'_> {
    /// Drive the call until it ends or the backend asks something; an ask parks
    /// the call and answers the caller `input_required`.
    async fn drive(
        self,
        mut running: Running,
    ) -> Result<Result<CallToolResponse, BackendError>, Cancelled> {
        let Self {
            ct,
            peer,
            parked,
            sealer,
            limits,
            caps,
            caller,
            tool,
            ..
        } = self;
        let send = async |item| {
            if let Some(peer) = peer {
                deliver(peer, item).await;
            }
        };
        loop {
            let event = tokio::select! {
                biased;
                () = ct.cancelled() => Event::Cancelled,
                Some(item) = running.relayed.recv() => Event::Relayed(item),
                Some(ask) = running.asked.recv() => Event::Ask(ask),
                outcome = &mut running.outcome => Event::Done(outcome),
            };
            match event {
                Event::Cancelled => return Err(Cancelled),
                Event::Relayed(item) => send(item).await,
                Event::Ask(ask) if !caps.allows(&ask.request) => {
                    let answer = policy_answer(&ask.request);
                    let _ = ask.reply.send(answer);
                }
                Event::Ask(ask) => {
                    return Ok(
                        match parked.park(sealer, limits, caller, tool, running, ask) {
                            Ok(input) => Ok(CallToolResponse::InputRequired(input)),
                            Err(error) => Err(BackendError::Mcp {
                                backend: Arc::from("vmcp"),
                                error: error.into(),
                            }),
                        },
                    );
                }
                Event::Done(outcome) => {
                    while let Ok(item) = running.relayed.try_recv() {
                        send(item).await;
                    }
                    return Ok(outcome.unwrap_or_else(|_| {
                        Err(BackendError::Mcp {
                            backend: Arc::from("vmcp"),
                            error: ErrorData::internal_error(
                                "the call ended without an answer",
                                None,
                            ),
                        })
                    }));
                }
            }
        }
    }

    /// Resume the parked call `state` names: the caller's `responses` answer the
    /// backend's request, and the call is driven on (it may park again).
    async fn resume(
        mut self,
        state: &str,
        responses: Option<rmcp::model::InputResponses>,
    ) -> Result<Result<CallToolResponse, BackendError>, ErrorData> {
        let ticket = Parked::open(self.sealer, &self.caller.seal, self.tool, state)?;
        if ticket.owner != **self.parked.owner() {
            let Some(remote) = self.remote else {
                tracing::info!(
                    "a requestState names a parked call of another replica, and no sessionStorage reaches it"
                );
                return Ok(Err(gone(ParkError::OwnerGone)));
            };
            let forwarded = remote::Forward {
                owner: &ticket.owner,
                state,
                caller: &self.caller.seal,
                tool: self.tool,
                responses,
                caps: self.caps,
                within: self.within,
            };
            return tokio::select! {
                () = self.ct.cancelled() => Err(ErrorData::from(Cancelled)),
                answer = remote.forward(forwarded) => Ok(answer.map_err(gone)),
            };
        }
        let call = self.parked.take_id(ticket.id, &self.caller.seal)?;
        // A re-park counts against whom the call counted against when it parked.
        self.caller.quota = call.quota.clone();
        let answer = match responses.and_then(|mut r| r.remove(INPUT_KEY)) {
            Some(value) => crate::backend::bridge::answer_from_json(&call.pending.request, value),
            None => Err(ErrorData::invalid_params("no input response", None)),
        };
        let _ = call.pending.reply.send(answer);
        self.drive(call.running).await.map_err(ErrorData::from)
    }
}

/// A failure to reach the owner of a call, as the call's error.
fn gone(error: impl Into<ErrorData>) -> BackendError {
    BackendError::Mcp {
        backend: Arc::from("vmcp"),
        error: error.into(),
    }
}

/// A caller's keys for parking: its sealed states' binding, and its cap's.
struct CallerKeys {
    /// What its `requestState`s are sealed to ([`crate::seal::caller_of`]).
    seal: Vec<u8>,
    /// Whom its parked calls count against: keyed as the Legacy session caps, with
    /// the seal's identity bytes, anonymous callers by client address.
    quota: Caller,
}

fn caller_keys(ctx: &RequestContext<RoleServer>) -> CallerKeys {
    let identity = super::admission::extension::<Arc<vmcp_layers::Identity>>(ctx).map(|i| &**i);
    let seal = crate::seal::caller_of(identity);
    let address =
        super::admission::extension::<axum::extract::ConnectInfo<std::net::SocketAddr>>(ctx)
            .map(|info| info.0.ip());
    let quota = Caller::of(identity, || seal.clone(), address);
    CallerKeys { seal, quota }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting_call() -> (Running, Ask, oneshot::Receiver<Answer>) {
        let running = Running::start(Wants::default(), |_relay| {
            std::future::pending::<CallOutcome>()
        });
        let (reply, answer) = oneshot::channel();
        let request = serde_json::from_value(serde_json::json!({"method": "roots/list"}))
            .expect("a roots/list request");
        (running, Ask { request, reply }, answer)
    }

    fn keys(name: &[u8]) -> CallerKeys {
        CallerKeys {
            seal: name.to_vec(),
            quota: Caller::Identity(name.to_vec()),
        }
    }

    fn alice() -> CallerKeys {
        keys(b"alice")
    }

    #[tokio::test]
    async fn one_caller_at_its_cap_leaves_room_for_another() {
        let parked = Arc::new(Parked::default());
        let sealer = Sealer::new();
        let limits = ParkedLimits {
            ttl: Duration::from_secs(60),
            max: 10,
            max_per_identity: 2,
            max_per_address: 2,
        };
        let mut answers = Vec::new();
        for _ in 0..2 {
            let (running, ask, answer) = waiting_call();
            answers.push(answer);
            assert!(
                parked
                    .park(&sealer, limits, alice(), "t", running, ask)
                    .is_ok()
            );
        }
        let (running, ask, answer) = waiting_call();
        let over = parked.park(&sealer, limits, alice(), "t", running, ask);
        assert!(matches!(over, Err(ParkError::CallerFull)));
        assert!(answer.await.is_err(), "the refused call is cancelled");
        let (running, ask, _answer) = waiting_call();
        assert!(
            parked
                .park(&sealer, limits, keys(b"bob"), "t", running, ask)
                .is_ok()
        );
        assert_eq!(parked.len(), 3, "alice's two stay parked");
    }

    #[tokio::test]
    async fn parking_is_capped_and_a_state_opens_only_for_its_caller_and_tool() {
        let parked = Arc::new(Parked::default());
        let sealer = Sealer::new();
        let limits = ParkedLimits {
            ttl: Duration::from_secs(60),
            max: 1,
            max_per_identity: 1,
            max_per_address: 1,
        };
        let (running, ask, _answer) = waiting_call();
        let input = parked
            .park(&sealer, limits, alice(), "t", running, ask)
            .expect("parked");
        let state = input.request_state.expect("a requestState");
        // Full: the call is not parked, and its backend request gets an error answer.
        let (running, ask, answer) = waiting_call();
        let full = parked.park(&sealer, limits, alice(), "t", running, ask);
        assert!(matches!(full, Err(ParkError::Full)));
        assert!(answer.await.is_err());
        assert_eq!(parked.len(), 1);
        for (caller, tool) in [(&b"bob"[..], "t"), (&b"alice"[..], "other")] {
            assert!(matches!(
                parked.take(&sealer, caller, tool, &state),
                Err(ParkError::InvalidState)
            ));
        }
        assert!(parked.take(&sealer, b"alice", "t", &state).is_ok());
        assert!(matches!(
            parked.take(&sealer, b"alice", "t", &state),
            Err(ParkError::InvalidState)
        ));
    }

    #[test]
    fn the_payload_names_the_call_and_its_tool() {
        let p = payload(42, "replica-a", "ev_tool");
        assert_eq!(
            parse_payload(&p, "ev_tool"),
            Some(Ticket {
                id: 42,
                owner: "replica-a".into()
            })
        );
        assert_eq!(parse_payload(&p, "ev_other"), None);
        assert_eq!(parse_payload(&p[..4], "ev_tool"), None);
        assert_eq!(parse_payload(&p[..12], "ev_tool"), None);
    }
}
