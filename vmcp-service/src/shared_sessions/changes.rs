//! A Legacy session's subscriptions, told to every replica holding a copy.
//!
//! Behind a round-robin balancer a session's `resources/subscribe` and its GET
//! stream land on different replicas. Each replica subscribes its own backend
//! connections and delivers `resources/updated` to the streams it holds, so the
//! replica with the stream must learn of a subscription another replica took.
//! The one that took it publishes the change on `<keyPrefix>session-changes`
//! (after the record has it); every other replica holding the session applies it
//! to its copy and re-subscribes its backends. A replica that restores the
//! session later reads the record instead. Redis is inside the replicas' trust
//! boundary: a message names a session id and a URI, nothing of the caller.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::SharedSessions;
use crate::redis_store::StoreError;

/// Pause between attempts to subscribe again while Redis is away.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);

/// One subscription change of a session.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Change {
    /// The replica that took it (which ignores its own message).
    pub(super) from: String,
    pub(super) session: String,
    pub(super) uri: String,
    /// Subscribed (`true`) or unsubscribed.
    pub(super) on: bool,
}

impl SharedSessions {
    fn changes_channel(&self) -> String {
        self.store.key("session-changes")
    }

    /// Tell the other replicas that `session` (un)subscribed `uri`.
    pub(super) async fn publish_change(&self, session: &str, uri: &str, on: bool) {
        let change = Change {
            from: self.replica.clone(),
            session: session.to_owned(),
            uri: uri.to_owned(),
            on,
        };
        let Ok(body) = serde_json::to_vec(&change) else {
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
        match sent {
            Ok(replicas) => tracing::debug!(replicas, "told a subscription change"),
            Err(e) => {
                tracing::debug!(error = %e, "a subscription change was not told to the other replicas")
            }
        }
    }

    /// Apply another replica's change to this replica's copy of the session, if it
    /// holds one (its backends follow through the subscription sync).
    fn apply(&self, change: Change) {
        if change.from == self.replica {
            return;
        }
        let Some(sessions) = self.sessions.upgrade() else {
            return;
        };
        let known = if change.on {
            sessions.subscribe(&change.session, &change.uri)
        } else {
            sessions.unsubscribe(&change.session, &change.uri)
        };
        tracing::debug!(known, "applied another replica's subscription change");
        if known {
            self.edit(&change.session, |r| {
                if change.on {
                    r.subscriptions.insert(change.uri.clone())
                } else {
                    r.subscriptions.remove(&change.uri)
                }
            });
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
                                        Ok(change) => me.apply(change),
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
        let change = Change {
            from: "r1".into(),
            session: "s".into(),
            uri: "demo://a".into(),
            on: true,
        };
        let back: Change = serde_json::from_slice(&serde_json::to_vec(&change).unwrap()).unwrap();
        assert_eq!(
            (back.from, back.session, back.uri, back.on),
            ("r1".into(), "s".into(), "demo://a".into(), true)
        );
    }
}
