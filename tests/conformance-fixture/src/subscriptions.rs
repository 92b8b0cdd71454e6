//! List-change notifications on 2026-07-28 `subscriptions/listen` streams: which
//! streams are open, and the notifications the trigger tools send them.
//!
//! A separate module because the streams outlive the request that opened them and are
//! shared by every request of the fixture (see `Shared::listeners`).

use std::sync::atomic::Ordering;

use rmcp::ErrorData;
use rmcp::service::{SubscriptionContext, SubscriptionSink};

use crate::Fixture;

impl Fixture {
    /// Send a list change to every open listen stream that accepted it.
    pub(crate) async fn notify_listeners(&self, tools: bool) {
        let sinks: Vec<SubscriptionSink> = self
            .shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect();
        for sink in sinks {
            // A stream that did not ask for this kind refuses it; that is the filter.
            let _ = if tools {
                sink.notify_tool_list_changed().await
            } else {
                sink.notify_prompt_list_changed().await
            };
        }
    }

    /// Serve one listen stream: register it until the client goes away.
    pub(crate) async fn listen_until_cancelled(
        &self,
        context: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let key = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, context.sink().clone()));
        context.cancelled().await;
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(k, _)| *k != key);
        Ok(())
    }
}
