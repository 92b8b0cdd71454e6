//! Live client sessions and the delivery of change notifications to them.
//!
//! Two kinds of listeners exist: Legacy sessions (their peer, registered at
//! `notifications/initialized`, notified on their GET stream) and Modern
//! `subscriptions/listen` streams (their sink, registered for the life of the
//! stream). Each listener has its own delivery worker, started on demand: a change
//! sets a bit per kind and starts the worker unless one runs, so at most one
//! delivery is in flight per (listener, kind), a storm collapses into one follow-up,
//! and an idle listener holds no task.
//!
//! A Modern listener is registered when its request reaches the gateway
//! ([`Sessions::prepare_modern`]), before rmcp acknowledges it, and gets its sink
//! after: rmcp sends the acknowledgment before it hands the stream to the handler,
//! so a listener registered only then would miss what changed in between, though
//! its client was told it was listening. What arrives before the sink is held.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};

use crate::aggregator::CatalogChange;
use crate::catalog::Catalog;
use crate::visibility::{PROMPTS, RESOURCES, TOOLS, Visibility};
use vmcp_layers::context::{Admission, Identity};

enum Channel {
    Legacy(Peer<RoleServer>),
    // Boxed: every idle Legacy session holds a listener, and a Modern one is 168
    // bytes to the peer's 88.
    Modern(Box<Modern>),
}

/// A `subscriptions/listen` stream, registered before it has its sink.
struct Modern {
    sink: OnceLock<SubscriptionSink>,
    /// Until the sink is attached (`Some`), the URIs updated meanwhile; list
    /// changes wait in the listener's `pending` bits.
    held: Mutex<Option<BTreeSet<String>>>,
}

impl Modern {
    fn attached(sink: SubscriptionSink) -> Self {
        Self {
            sink: OnceLock::from(sink),
            held: Mutex::new(None),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<BTreeSet<String>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
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
            // Not attached yet: everything is kept, and filtered at the attach.
            Channel::Modern(modern) => {
                let Some(sink) = modern.sink.get() else {
                    return bits;
                };
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

    /// Whether this is a Modern listener without its sink yet; `hold` runs under the
    /// same lock the attach takes, so whatever it records is seen by the attach.
    fn held_back(&self, hold: impl FnOnce(&mut BTreeSet<String>)) -> bool {
        match &self.channel {
            Channel::Modern(modern) => match modern.held().as_mut() {
                Some(held) => {
                    hold(held);
                    true
                }
                None => false,
            },
            Channel::Legacy(_) => false,
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
            Channel::Modern(modern) => {
                // Only scheduled once attached (see `held_back`).
                let Some(sink) = modern.sink.get() else {
                    return true;
                };
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
            Channel::Modern(modern) => {
                let Some(sink) = modern.sink.get() else {
                    return true;
                };
                !matches!(
                    sink.notify_resource_updated(uri).await,
                    Err(rmcp::service::SubscriptionSendError::SubscriptionClosed
                        | rmcp::service::SubscriptionSendError::Service(_))
                )
            }
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

/// Keeps a Modern listener registered: from its request (in the request's
/// extensions, for the handler) to the end of its `subscriptions/listen` stream.
/// The listener is removed when the last clone drops.
#[derive(Clone)]
pub(crate) struct ListenGuard(Arc<Registration>);

struct Registration {
    sessions: Weak<Sessions>,
    listener: Arc<Listener>,
    /// Its caller's share of `operational.listenStreams`, given back with it
    /// (`None`: a stream that did not come through the endpoint, not counted).
    _permit: Option<crate::caller_caps::Permit>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions.upgrade() {
            sessions.remove(self.listener.id);
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

    fn insert(
        &self,
        channel: Channel,
        uris: BTreeSet<String>,
        visibility: Visibility,
    ) -> Arc<Listener> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Arc::new(Listener {
            id,
            channel,
            uris: Mutex::new(uris),
            visibility,
            pending: AtomicU8::new(0),
            running: AtomicBool::new(false),
        });
        self.listeners().insert(id, listener.clone());
        listener
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
    /// creator may see (computed only when it is not registered yet). A session
    /// registers once: at `notifications/initialized`, or at an earlier request of
    /// its own that needs it (see `VmcpHandler::live_session`), whichever comes first.
    pub(crate) fn add_legacy(
        &self,
        session: Option<String>,
        peer: Peer<RoleServer>,
        visibility: impl FnOnce() -> Visibility,
    ) {
        let Some(session) = session else {
            self.insert(Channel::Legacy(peer), BTreeSet::new(), visibility());
            return;
        };
        if self.has_legacy(&session) {
            return;
        }
        // Computed unlocked (it filters every list for the caller); the check is
        // repeated under the lock, and a registration that lost the race is dropped.
        let visibility = visibility();
        if let std::collections::btree_map::Entry::Vacant(slot) = self.legacy_ids().entry(session) {
            slot.insert(
                self.insert(Channel::Legacy(peer), BTreeSet::new(), visibility)
                    .id,
            );
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

    /// Register a Modern listen stream as its request arrives, before rmcp
    /// acknowledges it: for the URIs it asks for (those its caller may read), with
    /// what its caller may see. What changes before [`Self::attach`] is held for it.
    pub(crate) fn prepare_modern(
        self: &Arc<Self>,
        uris: BTreeSet<String>,
        visibility: Visibility,
        permit: crate::caller_caps::Permit,
    ) -> ListenGuard {
        let modern = Modern {
            sink: OnceLock::new(),
            held: Mutex::new(Some(BTreeSet::new())),
        };
        let changed = !uris.is_empty();
        let listener = self.insert(Channel::Modern(Box::new(modern)), uris, visibility);
        if changed {
            self.subscriptions_changed.notify_one();
        }
        ListenGuard(Arc::new(Registration {
            sessions: Arc::downgrade(self),
            listener,
            _permit: Some(permit),
        }))
    }

    /// Give a prepared listener its stream: it then wants exactly what rmcp
    /// accepted, and what was held for it is sent.
    pub(crate) fn attach(self: &Arc<Self>, guard: &ListenGuard, sink: SubscriptionSink) {
        let listener = &guard.0.listener;
        let Channel::Modern(modern) = &listener.channel else {
            return;
        };
        let held = {
            let mut held = modern.held();
            if modern.sink.set(sink).is_err() {
                return;
            }
            held.take().unwrap_or_default()
        };
        let accepted = modern.sink.get().map(accepted_uris).unwrap_or_default();
        let changed = {
            let mut uris = listener.uris.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *uris != accepted;
            *uris = accepted;
            changed
        };
        if changed {
            self.subscriptions_changed.notify_one();
        }
        let bits = listener.wants(listener.pending.swap(0, Ordering::AcqRel));
        self.schedule(listener.clone(), bits);
        for uri in held {
            if listener
                .uris
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&uri)
            {
                self.send_update(listener.clone(), uri);
            }
        }
    }

    /// Register a Modern listen stream that was not prepared (see
    /// [`Self::prepare_modern`]); it is removed when the guard drops.
    pub(crate) fn add_modern(
        self: &Arc<Self>,
        sink: SubscriptionSink,
        visibility: Visibility,
    ) -> ListenGuard {
        let uris = accepted_uris(&sink);
        let changed = !uris.is_empty();
        let listener = self.insert(
            Channel::Modern(Box::new(Modern::attached(sink))),
            uris,
            visibility,
        );
        if changed {
            self.subscriptions_changed.notify_one();
        }
        ListenGuard(Arc::new(Registration {
            sessions: Arc::downgrade(self),
            listener,
            _permit: None,
        }))
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

    /// Queue `bits` for `listener`'s delivery worker, starting it unless it runs
    /// (or the listener has no sink yet: the attach starts it).
    fn schedule(self: &Arc<Self>, listener: Arc<Listener>, bits: u8) {
        if bits == 0 {
            return;
        }
        if listener.held_back(|_| {
            listener.pending.fetch_or(bits, Ordering::AcqRel);
        }) {
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
            if !listener.held_back(|held| {
                held.insert(uri.to_owned());
            }) {
                self.send_update(listener, uri.to_owned());
            }
        }
    }

    /// Send `notifications/resources/updated` for `uri` to `listener`, on its own task.
    fn send_update(self: &Arc<Self>, listener: Arc<Listener>, uri: String) {
        let sessions = Arc::downgrade(self);
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

/// The URIs a listen stream's acknowledged filter subscribes to.
fn accepted_uris(sink: &SubscriptionSink) -> BTreeSet<String> {
    sink.accepted()
        .resource_subscriptions
        .iter()
        .flatten()
        .cloned()
        .collect()
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
