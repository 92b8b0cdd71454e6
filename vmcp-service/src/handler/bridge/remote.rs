//! A parked call's retry that lands on another replica than the one holding the
//! call (`sessionStorage.provider: redis`, a shared `sealing` key; docs/scaling.md).
//!
//! Each replica subscribes to two Redis channels: `<keyPrefix>parked:<id>` for the
//! retries other replicas forward to it, `<keyPrefix>parked-reply:<id>` for the
//! answers to the retries it forwarded. The replica the retry reached opens the
//! `requestState` (so a forged or foreign state is refused before anything is sent),
//! publishes the retry with a correlation id to the owner the state names, and
//! waits. The owner acknowledges at once, resumes the call as if the retry had
//! reached it (opening the state again under its own key and caller check), and
//! publishes the outcome. Nobody subscribed to the owner's channel, or no
//! acknowledgement within [`ACCEPT_WITHIN`], means the owner is gone: the caller gets
//! `-32000` with `data.retryable: true` and calls the tool again.
//!
//! Redis is inside the replicas' trust boundary (it holds their shared state): a
//! message is the caller's identity bytes as sealed (issuer and subject, never a
//! token), the state, the answers and the caller's capabilities. The call's
//! notifications (progress, logs) during a forwarded resume are not relayed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt as _;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, CallToolResult, InputRequests, InputRequiredResult, InputResponses,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{CallerKeys, ParkError, Parked, Parking};
use crate::aggregator::Aggregator;
use crate::backend::ClientCaps;
use crate::redis_store::{RedisStore, StoreError};
use crate::seal::Sealer;
use crate::session_binding::Caller;

/// How long the owner has to acknowledge a forwarded retry before it counts as gone.
const ACCEPT_WITHIN: Duration = Duration::from_secs(2);
/// How long a `PUBLISH` may take.
const PUBLISH_WITHIN: Duration = Duration::from_secs(1);
/// Pause between attempts to subscribe again while Redis is away.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);

/// A fresh replica id: 16 hex digits, random per process.
pub(crate) fn replica_id() -> Arc<str> {
    use aws_lc_rs::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system random generator is available");
    Arc::from(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A retry forwarded to the owner of its parked call.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    corr: u64,
    /// The replica waiting for the answer.
    from: String,
    state: String,
    /// The caller's sealed identity bytes, base64url.
    caller: String,
    tool: String,
    responses: Option<InputResponses>,
    /// `elicitation.form`, `elicitation.url`, `sampling`, `roots`.
    caps: [bool; 4],
    within_ms: u64,
}

/// The owner's answers to a forwarded retry.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Reply {
    /// The owner has the retry and is resuming the call.
    Accepted { corr: u64 },
    /// The call's outcome.
    Done { corr: u64, outcome: Outcome },
}

impl Reply {
    fn corr(&self) -> u64 {
        match self {
            Reply::Accepted { corr } | Reply::Done { corr, .. } => *corr,
        }
    }
}

/// A resumed call's outcome, as the caller is to see it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum Outcome {
    Complete {
        result: CallToolResult,
    },
    #[serde(rename_all = "camelCase")]
    InputRequired {
        input_requests: Option<InputRequests>,
        request_state: Option<String>,
    },
    Error {
        error: ErrorData,
    },
}

impl Outcome {
    fn of(
        resumed: Result<Result<CallToolResponse, crate::backend::BackendError>, ErrorData>,
    ) -> Self {
        match resumed {
            Ok(Ok(CallToolResponse::Complete(result))) => Outcome::Complete { result },
            Ok(Ok(CallToolResponse::InputRequired(input))) => Outcome::InputRequired {
                input_requests: input.input_requests,
                request_state: input.request_state,
            },
            Ok(Ok(_)) => Outcome::Error {
                error: ErrorData::internal_error("the call answered with a task", None),
            },
            Ok(Err(error)) => Outcome::Error {
                error: crate::handler::client_error(error, true),
            },
            Err(error) => Outcome::Error { error },
        }
    }

    fn into_response(self) -> Result<CallToolResponse, ErrorData> {
        match self {
            Outcome::Complete { result } => Ok(CallToolResponse::Complete(result)),
            Outcome::InputRequired {
                input_requests,
                request_state,
            } => Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                input_requests,
                request_state,
            ))),
            Outcome::Error { error } => Err(error),
        }
    }
}

/// A retry to forward: what the replica it reached knows of it.
pub(super) struct Forward<'a> {
    pub(super) owner: &'a str,
    pub(super) state: &'a str,
    pub(super) caller: &'a [u8],
    pub(super) tool: &'a str,
    pub(super) responses: Option<InputResponses>,
    pub(super) caps: ClientCaps,
    pub(super) within: Duration,
}

/// This replica's end of parked-call routing.
pub(crate) struct Remote {
    store: Arc<RedisStore>,
    parked: Arc<Parked>,
    sealer: Arc<Sealer>,
    aggregator: Arc<Aggregator>,
    /// Forwarded retries waiting for their owner's replies, by correlation id.
    waiting: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    next: AtomicU64,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("replica", self.parked.owner())
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Route the parked calls of `parked` through `store`, until `shutdown`. The
    /// first subscription is made before this returns (when Redis answers), so a
    /// call parked here is reachable from the start.
    pub(crate) async fn start(
        store: Arc<RedisStore>,
        parked: Arc<Parked>,
        sealer: Arc<Sealer>,
        aggregator: Arc<Aggregator>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let remote = Arc::new(Self {
            store,
            parked,
            sealer,
            aggregator,
            waiting: Mutex::default(),
            next: AtomicU64::default(),
            shutdown,
        });
        let first = remote.subscribe().await;
        tokio::spawn(listen(remote.clone(), first));
        remote
    }

    fn requests_of(&self, replica: &str) -> String {
        self.store.key(&format!("parked:{replica}"))
    }

    fn replies_of(&self, replica: &str) -> String {
        self.store.key(&format!("parked-reply:{replica}"))
    }

    async fn subscribe(&self) -> Result<redis::aio::PubSub, StoreError> {
        let me = self.parked.owner();
        let mut pubsub = self.store.pubsub().await?;
        pubsub
            .subscribe(&[self.requests_of(me), self.replies_of(me)])
            .await?;
        Ok(pubsub)
    }

    /// `PUBLISH`: how many subscribers received it.
    async fn publish(&self, channel: &str, body: &[u8]) -> Result<u64, StoreError> {
        let mut conn = self.store.connection();
        let sent = tokio::time::timeout(
            PUBLISH_WITHIN,
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(body)
                .query_async::<u64>(&mut conn),
        )
        .await;
        let result = match sent {
            Ok(sent) => sent.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout),
        };
        if let Err(error) = &result {
            self.store.note_failure(error);
        }
        result
    }

    /// Forward a retry to the owner of its call; the owner's answer, or
    /// [`ParkError::OwnerGone`] when it cannot be reached or does not answer.
    pub(super) async fn forward(&self, f: Forward<'_>) -> Result<CallToolResponse, ErrorData> {
        let corr = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, mut replies) = mpsc::channel(2);
        self.lock().insert(corr, tx);
        let _waiting = Unregister { remote: self, corr };
        let caps = [
            f.caps.elicitation_form,
            f.caps.elicitation_url,
            f.caps.sampling,
            f.caps.roots,
        ];
        let request = Request {
            corr,
            from: self.parked.owner().to_string(),
            state: f.state.to_owned(),
            caller: URL_SAFE_NO_PAD.encode(f.caller),
            tool: f.tool.to_owned(),
            responses: f.responses,
            caps,
            within_ms: u64::try_from(f.within.as_millis()).unwrap_or(u64::MAX),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let gone = || ErrorData::from(ParkError::OwnerGone);
        match self.publish(&self.requests_of(f.owner), &body).await {
            Ok(0) => {
                tracing::info!(owner = %f.owner, "the replica holding a parked call is gone (no subscriber)");
                return Err(gone());
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(owner = %f.owner, %error, "could not forward a parked call's retry");
                return Err(gone());
            }
        }
        match tokio::time::timeout(ACCEPT_WITHIN, replies.recv()).await {
            Ok(Some(Reply::Accepted { .. })) => {}
            Ok(Some(Reply::Done { outcome, .. })) => return outcome.into_response(),
            _ => {
                tracing::info!(owner = %f.owner, "the replica holding a parked call did not acknowledge within {ACCEPT_WITHIN:?}");
                return Err(gone());
            }
        }
        match tokio::time::timeout(f.within + ACCEPT_WITHIN, replies.recv()).await {
            Ok(Some(Reply::Done { outcome, .. })) => outcome.into_response(),
            _ => {
                tracing::info!(owner = %f.owner, "the replica holding a parked call did not answer");
                Err(gone())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<Reply>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn on_message(self: &Arc<Self>, msg: &redis::Msg) {
        let me = self.parked.owner();
        let channel = msg.get_channel_name();
        if channel == self.replies_of(me) {
            let Ok(reply) = serde_json::from_slice::<Reply>(msg.get_payload_bytes()) else {
                tracing::warn!("parked-call routing: an unreadable reply was ignored");
                return;
            };
            if let Some(waiting) = self.lock().get(&reply.corr()) {
                let _ = waiting.try_send(reply);
            }
        } else if channel == self.requests_of(me) {
            let Ok(request) = serde_json::from_slice::<Request>(msg.get_payload_bytes()) else {
                tracing::warn!("parked-call routing: an unreadable request was ignored");
                return;
            };
            tokio::spawn(self.clone().serve(request));
        }
    }

    /// Resume this replica's parked call for a retry another replica forwarded.
    async fn serve(self: Arc<Self>, request: Request) {
        let replies = self.replies_of(&request.from);
        let send = async |reply: Reply| {
            let body = serde_json::to_vec(&reply).unwrap_or_default();
            if let Err(error) = self.publish(&replies, &body).await {
                tracing::warn!(%error, "parked-call routing: could not answer a forwarded retry");
            }
        };
        send(Reply::Accepted { corr: request.corr }).await;
        let [elicitation_form, elicitation_url, sampling, roots] = request.caps;
        let caller = URL_SAFE_NO_PAD.decode(&request.caller).unwrap_or_default();
        let parking = Parking {
            ct: self.shutdown.child_token(),
            peer: None,
            parked: &self.parked,
            sealer: &self.sealer,
            // A retry is forwarded once: the state names this replica.
            remote: None,
            limits: self.aggregator.config().operational.parked_calls.limits(),
            caps: ClientCaps {
                elicitation_form,
                elicitation_url,
                sampling,
                roots,
            },
            // The quota is the parked call's own (`Parking::resume`).
            caller: CallerKeys {
                seal: caller,
                quota: Caller::Anonymous,
            },
            tool: &request.tool,
            within: Duration::from_millis(request.within_ms),
        };
        let outcome = Outcome::of(parking.resume(&request.state, request.responses).await);
        send(Reply::Done {
            corr: request.corr,
            outcome,
        })
        .await;
    }
}

/// Removes a forwarded retry's entry however its wait ends.
struct Unregister<'a> {
    remote: &'a Remote,
    corr: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.remote.lock().remove(&self.corr);
    }
}

/// Receive forwarded retries and replies until shutdown, subscribing again whenever
/// the subscription is lost (Redis restarted).
async fn listen(remote: Arc<Remote>, first: Result<redis::aio::PubSub, StoreError>) {
    let mut subscribed = first;
    loop {
        match subscribed {
            Ok(pubsub) => {
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        () = remote.shutdown.cancelled() => return,
                        msg = messages.next() => match msg {
                            Some(msg) => remote.on_message(&msg),
                            None => break,
                        },
                    }
                }
                tracing::warn!(
                    "parked-call routing: the redis subscription ended; subscribing again"
                );
            }
            Err(error) => {
                tracing::debug!(%error, "parked-call routing: cannot subscribe yet");
            }
        }
        tokio::select! {
            () = remote.shutdown.cancelled() => return,
            () = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
        }
        subscribed = remote.subscribe().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_are_random_hex() {
        let (a, b) = (replica_id(), replica_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn outcomes_cross_the_wire_unchanged() {
        let input = serde_json::from_value::<InputRequests>(serde_json::json!({
            "vmcp": {"method": "elicitation/create", "params": {"message": "who?", "requestedSchema": {"type": "object", "properties": {}}}}
        }))
        .unwrap();
        let cases = [
            Outcome::Complete {
                result: CallToolResult::success(vec![rmcp::model::ContentBlock::text("done")]),
            },
            Outcome::InputRequired {
                input_requests: Some(input),
                request_state: Some("sealed".into()),
            },
            Outcome::Error {
                error: ErrorData::from(ParkError::OwnerGone),
            },
        ];
        for outcome in cases {
            let reply = Reply::Done { corr: 7, outcome };
            let wire = serde_json::to_vec(&reply).unwrap();
            let back: Reply = serde_json::from_slice(&wire).unwrap();
            assert_eq!(back.corr(), 7);
            let (Reply::Done { outcome: a, .. }, Reply::Done { outcome: b, .. }) = (reply, back)
            else {
                panic!("a Done reply");
            };
            let show = |o: Outcome| match o.into_response() {
                Ok(CallToolResponse::Complete(r)) => serde_json::to_value(r).unwrap(),
                Ok(CallToolResponse::InputRequired(r)) => serde_json::to_value(r).unwrap(),
                Ok(_) => serde_json::Value::Null,
                Err(e) => serde_json::to_value(e).unwrap(),
            };
            assert_eq!(show(a), show(b));
        }
        let gone = serde_json::to_value(ErrorData::from(ParkError::OwnerGone)).unwrap();
        assert_eq!(gone["code"], -32000);
        assert_eq!(gone["data"]["retryable"], true);
    }
}
