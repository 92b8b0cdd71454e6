//! The pass every second: slides the TTL of the sessions used since the last one
//! (one Lua call), writes the records Redis missed or lost, and closes this
//! replica's copy of a session deleted on another.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{PASS_EVERY, Persisted, SharedSessions, ms, now_ms};

impl SharedSessions {
    /// Slide, check and catch up every second until `stop`.
    pub(crate) async fn run_passes(self: Arc<Self>, stop: CancellationToken) {
        let this = Arc::downgrade(&self);
        drop(self);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(PASS_EVERY) => {}
            }
            let Some(this) = this.upgrade() else { return };
            if this.store.is_known_down() {
                continue;
            }
            this.pass().await;
        }
    }

    async fn pass(&self) {
        let (Some(aggregator), Some(bindings)) =
            (self.aggregator.upgrade(), self.bindings.upgrade())
        else {
            return;
        };
        let limits = crate::session_lifetime::limits(&aggregator);
        let (used, unwritten) = {
            let mut held = self.held();
            // Closed here (idle, evicted, deleted): this replica no longer holds it.
            held.retain(|session, _| bindings.contains(session));
            let mut used = Vec::new();
            let mut unwritten = Vec::new();
            for (session, entry) in held.iter_mut() {
                if !entry.persisted {
                    unwritten.push(session.clone());
                } else if std::mem::take(&mut entry.used) {
                    used.push(session.clone());
                }
            }
            (used, unwritten)
        };
        let mut gone = Vec::new();
        if !unwritten.is_empty()
            && let Some((_, text)) = self.key.get()
        {
            // A Redis that restarted empty lost the binding key too: put back the
            // one this replica's sessions are hashed with (unless another did).
            let name = self.store.key("session-binding-key");
            let _ = self
                .run(async |conn| {
                    redis::cmd("SET")
                        .arg(&name)
                        .arg(text)
                        .arg("NX")
                        .exec_async(conn)
                        .await
                })
                .await;
        }
        for session in unwritten {
            match self.persist(&session, &limits, true).await {
                Ok(Persisted::Deleted) => gone.push(session),
                Ok(_) => tracing::debug!("wrote a session's record Redis missed"),
                Err(_) => return,
            }
        }
        if !used.is_empty() {
            let mut invocation = self.slide.prepare_invoke();
            invocation
                .arg(now_ms())
                .arg(ms(limits.ttl))
                .arg(self.zset_prefix())
                .arg(self.store.key("session-deleted:"));
            for session in &used {
                invocation.key(self.record_key(session));
            }
            for session in &used {
                invocation.arg(session);
            }
            match self
                .run(async |conn| invocation.invoke_async::<Vec<i64>>(conn).await)
                .await
            {
                Ok(slid) => {
                    let mut held = self.held();
                    for (session, slid) in used.into_iter().zip(slid) {
                        match slid {
                            0 => gone.push(session),
                            // Lost by Redis: written again next pass.
                            -1 => {
                                if let Some(entry) = held.get_mut(&session) {
                                    entry.persisted = false;
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Err(_) => {
                    // Tried again next pass.
                    let mut held = self.held();
                    for session in &used {
                        if let Some(entry) = held.get_mut(session) {
                            entry.used = true;
                        }
                    }
                    return;
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        let (Some(manager), Some(sessions)) = (self.manager.upgrade(), self.sessions.upgrade())
        else {
            return;
        };
        for session in gone {
            tracing::debug!("closing a Legacy session deleted or expired on another replica");
            self.held().remove(&session);
            crate::session_lifetime::close(&manager, &bindings, &sessions, &session).await;
        }
    }
}
