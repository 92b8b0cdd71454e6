//! What a backend says *during* one forwarded call: its `notifications/progress` and
//! `notifications/message`, carried back to the one caller whose request caused them.
//!
//! A [`Relay`] travels with one backend request. The backend client hands it every
//! progress and log notification that arrives on that request's own answer stream,
//! in wire order and before the answer itself (rmcp dispatches notifications on
//! spawned tasks, so its `ClientHandler` callbacks would reorder them and could run
//! after the answer). The caller drains the matching [`RelayReceiver`] while it
//! awaits the answer. Notifications that cannot be tied to a request (a Legacy
//! backend's session-wide stream) never reach a relay: the gateway cannot tell
//! whose they are.
#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still part of both revisions.

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    ServerNotification,
};
use tokio::sync::mpsc;

/// Notifications buffered per call before the backend's answer stream waits for the
/// caller to forward them (backpressure, not loss).
const RELAY_CAPACITY: usize = 64;

/// One notification relayed to the caller.
#[derive(Debug, Clone)]
pub(crate) enum Relayed {
    /// Progress of the call, already carrying the caller's own progress token.
    Progress(ProgressNotificationParam),
    /// A log message at or above the caller's level.
    Log(LoggingMessageNotificationParam),
}

/// What the caller asked to hear about its call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wants {
    /// The caller's own progress token, if it asked for progress.
    pub(crate) progress: Option<ProgressToken>,
    /// The lowest log level the caller wants, if it wants logs at all.
    pub(crate) logs: Option<LoggingLevel>,
}

impl Wants {
    /// Nothing to relay: the call takes the plain path.
    pub(crate) fn is_empty(&self) -> bool {
        self.progress.is_none() && self.logs.is_none()
    }
}

/// The backend side of one call's relay (cheap to clone: it rides in a request's
/// extensions through rmcp's client).
#[derive(Debug, Clone)]
pub(crate) struct Relay {
    tx: mpsc::Sender<Relayed>,
    wants: std::sync::Arc<Wants>,
    /// Where the backend's requests to the caller go (`bridge`), if it may be asked.
    asks: Option<mpsc::Sender<super::bridge::Ask>>,
}

/// The caller side of one call's relay.
pub(crate) type RelayReceiver = mpsc::Receiver<Relayed>;

/// A relay for a call whose caller wants `wants`.
pub(crate) fn relay(wants: Wants) -> (Relay, RelayReceiver) {
    let (tx, rx) = mpsc::channel(RELAY_CAPACITY);
    (
        Relay {
            tx,
            wants: std::sync::Arc::new(wants),
            asks: None,
        },
        rx,
    )
}

/// Severity order of the eight syslog levels MCP uses.
pub(crate) fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Relay {
    /// This relay, with the backend's requests to the caller sent to `asks`.
    pub(crate) fn with_asks(mut self, asks: mpsc::Sender<super::bridge::Ask>) -> Self {
        self.asks = Some(asks);
        self
    }

    /// Hand the backend's `request` to the caller; `None` when this call's caller
    /// cannot be asked (the gateway's policy answers instead).
    pub(crate) async fn ask(
        &self,
        request: rmcp::model::InputRequest,
    ) -> Option<tokio::sync::oneshot::Receiver<super::bridge::Answer>> {
        let asks = self.asks.as_ref()?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        asks.send(super::bridge::Ask { request, reply })
            .await
            .ok()?;
        Some(answer)
    }

    /// The log level to ask a Modern backend for on this request, if any.
    pub(crate) fn log_level(&self) -> Option<LoggingLevel> {
        self.wants.logs
    }

    /// Whether the caller asked for progress.
    pub(crate) fn wants_progress(&self) -> bool {
        self.wants.progress.is_some()
    }

    /// What the caller should see of `notification`, which arrived on the answer
    /// stream of the request whose backend-hop progress token is `hop_token`.
    /// `None` for anything else (list changes and the like go their usual way).
    pub(crate) fn translate(
        &self,
        notification: &ServerNotification,
        hop_token: Option<&ProgressToken>,
    ) -> Option<Relayed> {
        match notification {
            ServerNotification::ProgressNotification(n) => {
                let client_token = self.wants.progress.as_ref()?;
                // Progress for another token is not this call's, even on its stream.
                if Some(&n.params.progress_token) != hop_token {
                    return None;
                }
                let mut params = n.params.clone();
                params.progress_token = client_token.clone();
                Some(Relayed::Progress(params))
            }
            ServerNotification::LoggingMessageNotification(n) => {
                let floor = self.wants.logs?;
                (severity(n.params.level) >= severity(floor))
                    .then(|| Relayed::Log(n.params.clone()))
            }
            _ => None,
        }
    }

    /// Whether `notification` is one a relay consumes (so it is not also handed to
    /// the connection's general event handling).
    pub(crate) fn consumes(notification: &ServerNotification) -> bool {
        matches!(
            notification,
            ServerNotification::ProgressNotification(_)
                | ServerNotification::LoggingMessageNotification(_)
        )
    }

    /// Hand `relayed` to the caller, waiting while its buffer is full. A caller that
    /// went away (its call was dropped) is not an error.
    pub(crate) async fn send(&self, relayed: Relayed) {
        let _ = self.tx.send(relayed).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{LoggingMessageNotification, NumberOrString, ProgressNotification};

    fn progress(token: i64, n: f64) -> ServerNotification {
        ServerNotification::ProgressNotification(ProgressNotification::new(
            ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), n),
        ))
    }

    fn log(level: LoggingLevel) -> ServerNotification {
        ServerNotification::LoggingMessageNotification(LoggingMessageNotification::new(
            LoggingMessageNotificationParam::new(level, serde_json::json!("x")),
        ))
    }

    #[test]
    fn progress_is_retokened_and_foreign_tokens_are_dropped() {
        let client = ProgressToken(NumberOrString::String("client-7".into()));
        let (relay, _rx) = relay(Wants {
            progress: Some(client.clone()),
            logs: None,
        });
        let hop = ProgressToken(NumberOrString::Number(3));
        match relay.translate(&progress(3, 1.0), Some(&hop)) {
            Some(Relayed::Progress(p)) => assert_eq!(p.progress_token, client),
            other => panic!("{other:?}"),
        }
        assert!(relay.translate(&progress(4, 1.0), Some(&hop)).is_none());
        assert!(
            relay
                .translate(&log(LoggingLevel::Error), Some(&hop))
                .is_none()
        );
    }

    #[test]
    fn logs_below_the_callers_level_are_dropped() {
        let (relay, _rx) = relay(Wants {
            progress: None,
            logs: Some(LoggingLevel::Warning),
        });
        assert!(relay.translate(&log(LoggingLevel::Info), None).is_none());
        assert!(relay.translate(&log(LoggingLevel::Warning), None).is_some());
        assert!(
            relay
                .translate(&log(LoggingLevel::Emergency), None)
                .is_some()
        );
        // No progress asked for: none relayed, whatever the token.
        assert!(relay.translate(&progress(1, 1.0), None).is_none());
    }
}
