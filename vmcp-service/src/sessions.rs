//! Live client sessions and the delivery of change notifications to them.
//!
//! Two kinds of listeners exist: Legacy sessions (their peer, registered at
//! `notifications/initialized`, notified on their GET stream) and Modern
//! `subscriptions/listen` streams (their sink, registered for the life of the
//! stream). Each listener has its own delivery worker, started on demand: a change
//! sets a bit per kind and starts the worker unless one runs, so at most one
//! delivery is in flight per (listener, kind), a storm collapses into one follow-up,
//! and an idle listener holds no task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};

use crate::aggregator::CatalogChange;
use crate::catalog::Catalog;
use crate::visibility::{PROMPTS, RESOURCES, TOOLS, Visibility};
use vmcp_layers::context::{Admission, Identity};

enum Channel {
    Legacy(Peer<RoleServer>),
    Modern(SubscriptionSink),
}

struct Listener {
    id: u64,
    channel: Channel,
    /// URIs this listener wants `notifications/resources/updated` for.
    uris: Mutex<BTreeSet<String>>,
    /// Its caller and what that caller may see.
    visibility: Visibility,
    pending: AtomicU8,
    running: AtomicBool,
}

impl Listener {
    fn wants(&self, bits: u8) -> u8 {
        match &self.channel {
            Channel::Legacy(_) => bits,
            Channel::Modern(sink) => {
                let f = sink.accepted();
                let mut out = 0;
                if f.tools_list_changed == Some(true) {
                    out |= bits & TOOLS;
                }
                if f.prompts_list_changed == Some(true) {
                    out |= bits & PROMPTS;
                }
                if f.resources_list_changed == Some(true) {
                    out |= bits & RESOURCES;
                }
                out
            }
        }
    }

    fn closed(&self) -> bool {
        match &self.channel {
            Channel::Legacy(peer) => peer.is_transport_closed(),
            Channel::Modern(_) => false,
        }
    }

    /// Send one kind; `false` when the listener is gone.
    async fn send(&self, bit: u8) -> bool {
        match &self.channel {
            Channel::Legacy(peer) => {
                let sent = match bit {
                    TOOLS => peer.notify_tool_list_changed().await,
                    PROMPTS => peer.notify_prompt_list_changed().await,
                    _ => peer.notify_resource_list_changed().await,
                };
                sent.is_ok()
            }
            Channel::Modern(sink) => {
                let sent = match bit {
                    TOOLS => sink.notify_tool_list_changed().await,
                    PROMPTS => sink.notify_prompt_list_changed().await,
                    _ => sink.notify_resource_list_changed().await,
                };
                !matches!(
                    sent,
                    Err(rmcp::service::SubscriptionSendError::SubscriptionClosed
                        | rmcp::service::SubscriptionSendError::Service(_))
                )
            }
        }
    }

    async fn send_updated(&self, uri: &str) -> bool {
        match &self.channel {
            Channel::Legacy(peer) => peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .is_ok(),
            Channel::Modern(sink) => !matches!(
                sink.notify_resource_updated(uri).await,
                Err(rmcp::service::SubscriptionSendError::SubscriptionClosed
                    | rmcp::service::SubscriptionSendError::Service(_))
            ),
        }
    }
}

/// The registry of live listeners.
#[derive(Default)]
pub struct Sessions {
    next_id: AtomicU64,
    listeners: Mutex<BTreeMap<u64, Arc<Listener>>>,
    /// Legacy `Mcp-Session-Id` → listener id.
    legacy: Mutex<BTreeMap<String, u64>>,
    delivered: AtomicU64,
    subscriptions_changed: tokio::sync::Notify,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("listeners", &self.len())
            .finish_non_exhaustive()
    }
}

/// Removes a Modern listener when its `subscriptions/listen` stream ends.
#[derive(Debug)]
pub(crate) struct ListenGuard {
    sessions: Weak<Sessions>,
    id: u64,
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions.upgrade() {
            sessions.remove(self.id);
        }
    }
}

impl Sessions {
    fn listeners(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Listener>>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn legacy_ids(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.legacy.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, channel: Channel, uris: BTreeSet<String>, visibility: Visibility) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Arc::new(Listener {
            id,
            channel,
            uris: Mutex::new(uris),
            visibility,
            pending: AtomicU8::new(0),
            running: AtomicBool::new(false),
        });
        self.listeners().insert(id, listener);
        id
    }

    fn remove(&self, id: u64) {
        let removed = self.listeners().remove(&id);
        self.legacy_ids().retain(|_, v| *v != id);
        if removed.is_some_and(|l| !l.uris.lock().unwrap_or_else(|e| e.into_inner()).is_empty()) {
            self.subscriptions_changed.notify_one();
        }
    }

    /// Number of live listeners.
    pub fn len(&self) -> usize {
        self.listeners().len()
    }

    /// Whether there is no listener.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notifications delivered so far (all kinds), for tests and metrics.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Register a Legacy session's peer under its `Mcp-Session-Id`, with what its
    /// creator may see.
    pub(crate) fn add_legacy(
        &self,
        session: Option<String>,
        peer: Peer<RoleServer>,
        visibility: Visibility,
    ) {
        let id = self.insert(Channel::Legacy(peer), BTreeSet::new(), visibility);
        // Bind first: the lock must be released before `remove` takes it again.
        let replaced = session.and_then(|session| self.legacy_ids().insert(session, id));
        if let Some(old) = replaced {
            self.remove(old);
        }
    }

    /// Whether the Legacy session `session` is live.
    pub(crate) fn has_legacy(&self, session: &str) -> bool {
        self.legacy_ids().contains_key(session)
    }

    /// The peer of the live Legacy session `session` (registered once initialized).
    pub(crate) fn legacy_peer(&self, session: &str) -> Option<Peer<RoleServer>> {
        let id = *self.legacy_ids().get(session)?;
        match &self.listeners().get(&id)?.channel {
            Channel::Legacy(peer) => Some(peer.clone()),
            Channel::Modern(_) => None,
        }
    }

    /// Forget a Legacy session at once (DELETEd or expired): its listener, its
    /// subscriptions and its peer are released now, not at the next notification.
    pub fn remove_legacy(&self, session: &str) {
        let id = self.legacy_ids().get(session).copied();
        if let Some(id) = id {
            self.remove(id);
        }
    }

    /// Register a Modern listen stream; it is removed when the guard drops.
    pub(crate) fn add_modern(
        self: &Arc<Self>,
        sink: SubscriptionSink,
        visibility: Visibility,
    ) -> ListenGuard {
        let uris: BTreeSet<String> = sink
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let changed = !uris.is_empty();
        let id = self.insert(Channel::Modern(sink), uris, visibility);
        if changed {
            self.subscriptions_changed.notify_one();
        }
        ListenGuard {
            sessions: Arc::downgrade(self),
            id,
        }
    }

    /// Subscribe a Legacy session to a URI; `false` if the session is unknown.
    pub(crate) fn subscribe(&self, session: &str, uri: &str) -> bool {
        self.edit_uris(session, |uris| uris.insert(uri.to_owned()))
    }

    /// Unsubscribe a Legacy session from a URI; `false` if the session is unknown.
    pub(crate) fn unsubscribe(&self, session: &str, uri: &str) -> bool {
        self.edit_uris(session, |uris| uris.remove(uri))
    }

    fn edit_uris(&self, session: &str, edit: impl FnOnce(&mut BTreeSet<String>) -> bool) -> bool {
        let Some(id) = self.legacy_ids().get(session).copied() else {
            return false;
        };
        let Some(listener) = self.listeners().get(&id).cloned() else {
            return false;
        };
        if edit(&mut listener.uris.lock().unwrap_or_else(|e| e.into_inner())) {
            self.subscriptions_changed.notify_one();
        }
        true
    }

    /// Every URI some live listener is subscribed to.
    pub(crate) fn subscribed_uris(&self) -> BTreeSet<String> {
        self.listeners()
            .values()
            .filter(|l| !l.closed())
            .flat_map(|l| l.uris.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }

    /// Resolves when the set of subscribed URIs may have changed.
    pub(crate) async fn subscriptions_changed(&self) {
        self.subscriptions_changed.notified().await;
    }

    /// Tell every listener what changed in `catalog` (the new one) that its caller
    /// can see (their own view is read at their next list).
    pub(crate) fn notify(self: &Arc<Self>, change: CatalogChange, catalog: &Catalog) {
        let bits = (if change.tools { TOOLS } else { 0 })
            | (if change.prompts { PROMPTS } else { 0 })
            | (if change.resources { RESOURCES } else { 0 });
        let listeners: Vec<_> = self.listeners().values().cloned().collect();
        for listener in listeners {
            if listener.closed() {
                self.remove(listener.id);
                continue;
            }
            let wanted = listener.visibility.changed(catalog, listener.wants(bits));
            self.schedule(listener, wanted);
        }
    }

    /// Queue `bits` for `listener`'s delivery worker, starting it unless it runs.
    fn schedule(self: &Arc<Self>, listener: Arc<Listener>, bits: u8) {
        if bits == 0 {
            return;
        }
        listener.pending.fetch_or(bits, Ordering::AcqRel);
        if !listener.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(deliver(Arc::downgrade(self), listener));
        }
    }

    /// The authorization policies were reloaded: each listener decides with
    /// `admit(its caller)` from now on, and is told about the lists that now look
    /// different to it.
    pub(crate) fn readmit(
        self: &Arc<Self>,
        admit: impl Fn(&Arc<Identity>) -> Option<Arc<dyn Admission>>,
        catalog: &Catalog,
    ) {
        let listeners: Vec<_> = self.listeners().values().cloned().collect();
        for listener in listeners {
            let admission = listener.visibility.identity().and_then(&admit);
            let bits = listener.visibility.readmit(admission, catalog);
            let wanted = listener.wants(bits);
            self.schedule(listener, wanted);
        }
    }

    /// Forward `backend`'s `notifications/resources/updated` to the subscribers of
    /// `uri` whose caller may read it.
    pub(crate) fn resource_updated(self: &Arc<Self>, uri: &str, backend: &str) {
        let targets: Vec<_> = self
            .listeners()
            .values()
            .filter(|l| {
                l.uris
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(uri)
                    && l.visibility.may_read(uri, backend)
            })
            .cloned()
            .collect();
        for listener in targets {
            let sessions = Arc::downgrade(self);
            let uri = uri.to_owned();
            tokio::spawn(async move {
                let ok = listener.send_updated(&uri).await;
                if let Some(sessions) = sessions.upgrade() {
                    if ok {
                        sessions.delivered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        sessions.remove(listener.id);
                    }
                }
            });
        }
    }
}

/// The delivery worker of one listener: runs while bits are pending, then exits.
async fn deliver(sessions: Weak<Sessions>, listener: Arc<Listener>) {
    loop {
        let bits = listener.pending.swap(0, Ordering::AcqRel);
        if bits == 0 {
            listener.running.store(false, Ordering::Release);
            // A trigger may have landed between the swap and the store.
            if listener.pending.load(Ordering::Acquire) != 0
                && !listener.running.swap(true, Ordering::AcqRel)
            {
                continue;
            }
            return;
        }
        for bit in [TOOLS, PROMPTS, RESOURCES] {
            if bits & bit == 0 {
                continue;
            }
            let ok = listener.send(bit).await;
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            if ok {
                sessions.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                sessions.remove(listener.id);
                return;
            }
        }
    }
}
