//! What one replica tells the others about a Legacy session it does not hold
//! alone, on `<keyPrefix>session-changes` (Redis pub/sub, as parked-call routing).
//!
//! Behind a round-robin balancer a session's requests, its GET stream and a
//! call's server→client request land on different replicas:
//! - **Subscriptions.** Each replica subscribes its own backend connections and
//!   delivers `resources/updated` to the streams it holds, so the replica with the
//!   stream must learn of a subscription another replica took. The one that took
//!   it publishes the change (after the record has it); every other replica
//!   holding the session applies it to its copy and re-subscribes its backends. A
//!   replica that restores the session later reads the record instead.
//! - **Answers.** A backend's elicitation, sampling or roots request during a call
//!   on replica A goes to the client on the call's own stream; the client's POST
//!   with the answer may reach replica B. B (after the owner check) publishes the
//!   JSON-RPC response; every other replica holding the session hands it to its
//!   copy, where the one waiting for it (A) completes the call, and the others
//!   drop it as a response to nothing they asked.
//!
//! Redis is inside the replicas' trust boundary: a message names a session id
//! and carries a URI or the client's answer, nothing of the caller's identity.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::SharedSessions;
use crate::redis_store::StoreError;

/// Pause between attempts to subscribe again while Redis is away.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);

/// One message about a session.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(super) enum Change {
    /// `uri` (un)subscribed.
    Subscription {
        /// The replica that sent it (which ignores its own message).
        from: String,
        session: String,
        uri: String,
        /// Subscribed (`true`) or unsubscribed.
        on: bool,
    },
    /// The client's JSON-RPC response to a server→client request.
    Answer {
        from: String,
        session: String,
        message: serde_json::Value,
    },
}

impl SharedSessions {
    fn changes_channel(&self) -> String {
        self.store.key("session-changes")
    }

    /// Tell the other replicas that `session` (un)subscribed `uri`.
    pub(super) async fn publish_change(&self, session: &str, uri: &str, on: bool) {
        self.publish(&Change::Subscription {
            from: self.replica.clone(),
            session: session.to_owned(),
            uri: uri.to_owned(),
            on,
        })
        .await;
    }

    /// Hand the client's answer `message` (a JSON-RPC response, its caller checked
    /// as `session`'s owner) to the other replicas holding `session`.
    pub(crate) async fn publish_answer(&self, session: &str, message: serde_json::Value) {
        self.publish(&Change::Answer {
            from: self.replica.clone(),
            session: session.to_owned(),
            message,
        })
        .await;
    }

    async fn publish(&self, change: &Change) {
        let Ok(body) = serde_json::to_vec(change) else {
            return;
        };
        let channel = self.changes_channel();
        let sent = self
            .run(async |conn| {
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(&body)
                    .query_async::<u64>(conn)
                    .await
            })
            .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "a session change was not told to the other replicas");
        }
    }

    /// Apply another replica's message to this replica's copy of the session, if
    /// it holds one.
    async fn apply(&self, change: Change) {
        match change {
            Change::Subscription {
                from,
                session,
                uri,
                on,
            } if from != self.replica => self.apply_subscription(&session, &uri, on),
            Change::Answer {
                from,
                session,
                message,
            } if from != self.replica => self.apply_answer(&session, message).await,
            _ => {}
        }
    }

    /// Its backends follow through the subscription sync.
    fn apply_subscription(&self, session: &str, uri: &str, on: bool) {
        let Some(sessions) = self.sessions.upgrade() else {
            return;
        };
        let known = if on {
            sessions.subscribe(session, uri)
        } else {
            sessions.unsubscribe(session, uri)
        };
        if known {
            self.edit(session, |r| {
                if on {
                    r.subscriptions.insert(uri.to_owned())
                } else {
                    r.subscriptions.remove(uri)
                }
            });
        }
    }

    async fn apply_answer(&self, session: &str, message: serde_json::Value) {
        use rmcp::transport::streamable_http_server::session::SessionManager as _;
        if !self.held().contains_key(session) {
            return;
        }
        let (Some(manager), Ok(message)) = (
            self.manager.upgrade(),
            serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message),
        ) else {
            return;
        };
        if !matches!(
            message,
            rmcp::model::JsonRpcMessage::Response(_) | rmcp::model::JsonRpcMessage::Error(_)
        ) {
            return;
        }
        if let Err(e) = manager.accept_message(&session.into(), message).await {
            tracing::debug!(error = %e, "another replica's answer found no session here");
        }
    }

    async fn subscribe_changes(&self) -> Result<redis::aio::PubSub, StoreError> {
        let mut pubsub = self.store.pubsub().await?;
        pubsub.subscribe(self.changes_channel()).await?;
        Ok(pubsub)
    }

    /// Receive the other replicas' changes until `stop`, subscribing again
    /// whenever the subscription is lost (Redis restarted).
    pub(super) async fn listen_changes(self: Arc<Self>, stop: CancellationToken) {
        let this = Arc::downgrade(&self);
        drop(self);
        loop {
            let Some(me) = this.upgrade() else { return };
            let subscribed = me.subscribe_changes().await;
            drop(me);
            match subscribed {
                Ok(pubsub) => {
                    let mut messages = pubsub.into_on_message();
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            msg = messages.next() => match msg {
                                Some(msg) => {
                                    let Some(me) = this.upgrade() else { return };
                                    match serde_json::from_slice::<Change>(msg.get_payload_bytes()) {
                                        Ok(change) => me.apply(change).await,
                                        Err(_) => tracing::warn!("an unreadable session change was ignored"),
                                    }
                                }
                                None => break,
                            },
                        }
                    }
                    tracing::debug!("session changes: the redis subscription ended");
                }
                Err(error) => tracing::debug!(%error, "session changes: cannot subscribe yet"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_crosses_the_wire_unchanged() {
        let change = Change::Subscription {
            from: "r1".into(),
            session: "s".into(),
            uri: "demo://a".into(),
            on: true,
        };
        let wire = serde_json::to_value(&change).unwrap();
        assert_eq!(wire["kind"], "subscription");
        let back: Change = serde_json::from_value(wire).unwrap();
        assert!(
            matches!(back, Change::Subscription { on: true, ref uri, .. } if uri == "demo://a")
        );
        let answer = Change::Answer {
            from: "r2".into(),
            session: "s".into(),
            message: serde_json::json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "decline"}}),
        };
        let back: Change = serde_json::from_slice(&serde_json::to_vec(&answer).unwrap()).unwrap();
        let Change::Answer { message, .. } = back else {
            panic!("an answer");
        };
        assert!(
            serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message).is_ok(),
            "an answer reads as the client's JSON-RPC response"
        );
    }
}
