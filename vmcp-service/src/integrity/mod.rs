//! Tool integrity: pin what each backend advertises (tools, prompts, resource
//! templates) and notice a "rug pull", a definition that changes after it was
//! approved (docs/integrity.md).
//!
//! Checked only when the catalog is built (a backend re-listed, health or
//! configuration changed, the pin file changed), on the backends' own definitions
//! before names are resolved; never on the call path. Under `block` a changed
//! definition is left out of the catalog, so lists do not show it and a call to it
//! is answered exactly as a call to a name that never existed.

pub mod approval;
pub mod canonical;
pub(crate) mod page;
pub mod redis_pins;
mod sinks;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use crate::backend::BackendCapabilities;
use crate::config::{IntegrityConfig, IntegrityMode, NewToolsPolicy, PinStoreKind};
pub use canonical::Definition;
use sinks::{Event, Sinks};
pub use store::{
    EntryKind, FilePinStore, Pin, PinDocument, PinKey, PinStore, StoreError, StoreVersion,
};

/// At most this many findings on `/status` (a backend can change thousands at once).
const MAX_FINDINGS: usize = 200;
/// The most pins (and, apart, pending entries) kept per backend: a backend that
/// advertises more cannot grow the store without bound.
pub const MAX_ENTRIES_PER_BACKEND: usize = 10_000;
/// A diffed value longer than this (as JSON) is shown cut.
const MAX_DIFF_VALUE: usize = 2048;

/// Why an entry is not advertised as pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingState {
    /// Its definition differs from the approved pin.
    Changed,
    /// It has no pin (`newTools: block`).
    New,
    /// The pin file cannot be read, so it cannot be checked (`block` hides it).
    Unverified,
    /// Its backend already has the most pins kept (10,000), so it is not pinned
    /// (`block` hides it).
    Unpinned,
}

/// An old and a new value of one pinned field (absent: not in that definition).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldDiff {
    /// As pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Value>,
    /// As the backend advertises it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Value>,
}

/// One entry not advertised as pinned, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The backend.
    pub backend: String,
    /// `tool`, `prompt` or `template`.
    pub kind: &'static str,
    /// The backend's own name.
    pub name: String,
    /// Changed, new or unverified.
    pub state: FindingState,
    /// Whether it is hidden (`block`, or `newTools: block`) rather than advertised.
    pub blocked: bool,
    /// The approved digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_sha256: Option<String>,
    /// The digest seen now.
    pub seen_sha256: String,
    /// The fields that differ, old and new (long values cut).
    pub diff: BTreeMap<String, FieldDiff>,
}

/// The integrity section of `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntegrityStatus {
    /// `warn` or `block`.
    pub mode: IntegrityMode,
    /// Entries not advertised as pinned (at most 200).
    pub findings: Vec<Finding>,
    /// Findings beyond those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub unlisted: usize,
    /// Why the pin file cannot be read or written, if it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The integrity checker one aggregator owns.
#[derive(Default)]
pub struct Integrity {
    state: Mutex<State>,
    sinks: Sinks,
    /// The replicas' shared Redis, for `store: redis`.
    redis: std::sync::OnceLock<Arc<crate::redis_store::RedisStore>>,
}

/// Which store a configuration names: a new one starts from nothing read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreId {
    File(PathBuf),
    Redis,
}

impl StoreId {
    fn of(config: &IntegrityConfig) -> Option<Self> {
        match config.store {
            PinStoreKind::File => Some(StoreId::File(config.path.clone()?)),
            PinStoreKind::Redis => Some(StoreId::Redis),
        }
    }
}

impl std::fmt::Debug for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Integrity").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    mode: IntegrityMode,
    store: Option<(StoreId, Arc<dyn PinStore>)>,
    loaded: bool,
    document: PinDocument,
    version: Option<StoreVersion>,
    /// The last read or write failed (reads keep the last good document; writes are
    /// held while the file cannot be read, so it is not overwritten).
    error: Option<String>,
    unreadable: bool,
    /// Per entry, the digest whose change was already reported (once per change).
    announced: HashMap<(String, PinKey), String>,
    findings: Vec<Finding>,
}

/// What one check wants stored.
#[derive(Default)]
struct Writes {
    pins: Vec<(String, PinKey, Pin)>,
    pending: Vec<(String, PinKey, Pin)>,
    resolved: Vec<(String, PinKey)>,
}

impl Writes {
    fn is_empty(&self) -> bool {
        self.pins.is_empty() && self.pending.is_empty() && self.resolved.is_empty()
    }

    /// Merge into `doc` (as stored now, maybe changed by another writer); whether
    /// anything changed. A pin already there is never replaced: an approval wins.
    fn apply(&self, doc: &mut PinDocument) -> bool {
        let mut changed = false;
        for (backend, key, pin) in &self.pins {
            let pins = doc.pins.entry(backend.clone()).or_default();
            if !pins.contains_key(key) {
                pins.insert(key.clone(), pin.clone());
                changed = true;
            }
        }
        for (backend, key, pin) in &self.pending {
            let pending = doc.pending.entry(backend.clone()).or_default();
            if pending.get(key).map(|p| &p.sha256) != Some(&pin.sha256) {
                pending.insert(key.clone(), pin.clone());
                changed = true;
            }
        }
        for (backend, key) in &self.resolved {
            if let Some(pending) = doc.pending.get_mut(backend) {
                changed |= pending.remove(key).is_some();
            }
        }
        doc.pending.retain(|_, entries| !entries.is_empty());
        changed
    }
}

impl Integrity {
    /// Keep pins in this Redis when `integrity.store: redis` (set once, at start).
    pub(crate) fn use_redis(&self, store: Arc<crate::redis_store::RedisStore>) {
        let _ = self.redis.set(store);
    }

    /// The store the last check used (`None` when off): the admin endpoint approves
    /// on it.
    pub(crate) fn store(&self) -> Option<Arc<dyn PinStore>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.store.as_ref().map(|(_, store)| store.clone())
    }

    /// Check every definition in `input` against the pins under `config`, leaving out
    /// those `block` hides. Off (or no section): nothing is checked or kept. Store
    /// I/O is awaited with no lock held; the aggregator runs one check at a time.
    pub(crate) async fn check(
        &self,
        config: Option<&IntegrityConfig>,
        input: &mut [(Arc<str>, BackendCapabilities)],
    ) {
        let Some((config, id)) = config
            .filter(|c| c.enabled())
            .and_then(|c| Some((c, StoreId::of(c)?)))
        else {
            *self.lock() = State::default();
            return;
        };
        let store = {
            let mut state = self.lock();
            state.open(id, || self.make_store(config));
            state.mode = config.mode;
            state.store.as_ref().map(|(_, store)| store.clone())
        };
        let Some(store) = store else {
            return;
        };
        // Re-read the document if the store changed since it was read.
        let version = store.version().await;
        let reload = {
            let state = self.lock();
            !state.loaded || version != state.version
        };
        if reload {
            let loaded = store.load().await;
            self.lock().loaded(loaded, version);
        }
        let mut writes = Writes::default();
        let mut findings = Vec::new();
        let mut events = Vec::new();
        let unreadable = {
            let mut state = self.lock();
            for (backend, caps) in input.iter_mut() {
                let mut decide = |kind: EntryKind, item: &dyn ErasedItem| {
                    let Some(definition) = item.definition(kind) else {
                        return true;
                    };
                    state.decide(
                        config,
                        backend,
                        definition,
                        &mut writes,
                        &mut findings,
                        &mut events,
                    )
                };
                caps.tools.retain(|t| decide(EntryKind::Tool, t));
                caps.prompts.retain(|p| decide(EntryKind::Prompt, p));
                caps.templates.retain(|t| decide(EntryKind::Template, t));
            }
            state.unreadable
        };
        // Writes are held while the store cannot be read, so what another writer
        // (an approval) put there is not overwritten with a guess.
        if !writes.is_empty() && !unreadable {
            let writes = Arc::new(writes);
            let apply = writes.clone();
            let stored = store.update(Box::new(move |doc| apply.apply(doc))).await;
            self.lock().stored(stored, &writes);
        }
        let mut state = self.lock();
        // A backend out of this build (unhealthy, say) keeps what was reported about
        // it: its return is not a new change.
        state.announced.retain(|(backend, key), _| {
            !input.iter().any(|(b, _)| **b == **backend)
                || findings.iter().any(|f| f.is(backend, key))
        });
        for finding in &findings {
            state.announced.insert(
                (finding.backend.clone(), finding.key()),
                finding.seen_sha256.clone(),
            );
        }
        state.findings = findings;
        drop(state);
        self.sinks.emit(events);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn make_store(&self, config: &IntegrityConfig) -> Result<Arc<dyn PinStore>, StoreError> {
        match config.store {
            PinStoreKind::File => {
                let path = config.path.as_deref().unwrap_or(Path::new(""));
                Ok(Arc::new(FilePinStore::new(path)))
            }
            PinStoreKind::Redis => match self.redis.get() {
                Some(redis) => Ok(Arc::new(redis_pins::RedisPinStore::new(redis.clone()))),
                None => Err(StoreError::Redis(
                    "no redis was opened at start (sessionStorage.address)".into(),
                )),
            },
        }
    }

    /// Whether the pin store changed since the last check (a `stat`, or one Redis
    /// `GET`): the aggregator rebuilds then, so an approval applies without a
    /// restart, on every replica.
    pub(crate) async fn stale(&self) -> bool {
        let (store, seen) = {
            let state = self.lock();
            match &state.store {
                Some((_, store)) => (store.clone(), state.version),
                None => return false,
            }
        };
        store.version().await != seen
    }

    /// The integrity section of `/status` (`None` when off).
    pub fn status(&self) -> Option<IntegrityStatus> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.store.as_ref()?;
        Some(IntegrityStatus {
            mode: state.mode,
            findings: state.findings.iter().take(MAX_FINDINGS).cloned().collect(),
            unlisted: state.findings.len().saturating_sub(MAX_FINDINGS),
            store_error: state.error.clone(),
        })
    }

    /// Record changes and approvals into this audit log and these metrics from now
    /// on (and what was found before the first attach: the startup check runs before
    /// the layer stack exists).
    pub fn attach(
        &self,
        audit: Option<vmcp_layers::audit::AuditLayer>,
        telemetry: Option<Arc<vmcp_layers::telemetry::Telemetry>>,
    ) {
        self.sinks.attach(audit, telemetry);
    }
}

/// `Tool`, `Prompt` and `ResourceTemplate` behind one `retain` closure.
trait ErasedItem {
    fn definition(&self, kind: EntryKind) -> Option<Definition>;
}

impl<T: Serialize> ErasedItem for T {
    fn definition(&self, kind: EntryKind) -> Option<Definition> {
        Definition::of(kind, self)
    }
}

impl Finding {
    fn is(&self, backend: &str, key: &PinKey) -> bool {
        self.backend == backend && self.kind == key.kind.as_str() && self.name == key.name
    }

    fn key(&self) -> PinKey {
        PinKey {
            kind: EntryKind::parse(self.kind).unwrap_or(EntryKind::Tool),
            name: self.name.clone(),
        }
    }
}

impl State {
    /// Use the store `id` names (a new one: nothing read yet). A store that cannot
    /// be made leaves every entry unverified.
    fn open(&mut self, id: StoreId, make: impl FnOnce() -> Result<Arc<dyn PinStore>, StoreError>) {
        if self.store.as_ref().is_some_and(|(i, _)| *i == id) {
            return;
        }
        *self = State::default();
        match make() {
            Ok(store) => self.store = Some((id, store)),
            Err(error) => {
                self.note_error(&error);
                self.unreadable = true;
            }
        }
    }

    /// Take what a read returned. A failed read keeps the last good document (its
    /// pins still apply) and notes the version seen, so the read is retried when the
    /// store changes rather than on every poll.
    fn loaded(
        &mut self,
        loaded: Result<(PinDocument, Option<StoreVersion>), StoreError>,
        seen: Option<StoreVersion>,
    ) {
        match loaded {
            Ok((document, version)) => {
                self.document = document;
                self.version = version;
                self.loaded = true;
                self.unreadable = false;
                self.error = None;
            }
            Err(error) => {
                self.note_error(&error);
                self.version = seen;
                self.unreadable = true;
            }
        }
    }

    /// Take what a write returned.
    fn stored(
        &mut self,
        stored: Result<(PinDocument, Option<StoreVersion>), StoreError>,
        writes: &Writes,
    ) {
        match stored {
            Ok((document, version)) => {
                self.document = document;
                self.version = version;
                self.error = None;
            }
            Err(error) => {
                // The entries stay as decided in memory; the next build tries again.
                writes.apply(&mut self.document);
                self.note_error(&error);
            }
        }
    }

    /// How many pins `backend` has.
    fn entries(&self, backend: &str) -> usize {
        self.document.pins.get(backend).map_or(0, |m| m.len())
    }

    fn note_error(&mut self, error: &StoreError) {
        let message = error.to_string();
        if self.error.as_ref() != Some(&message) {
            tracing::error!("tool integrity: {message}");
        }
        self.error = Some(message);
    }

    /// Whether `definition` of `backend` stays in the catalog; records what to store,
    /// show and report.
    fn decide(
        &mut self,
        config: &IntegrityConfig,
        backend: &str,
        definition: Definition,
        writes: &mut Writes,
        findings: &mut Vec<Finding>,
        events: &mut Vec<Event>,
    ) -> bool {
        let key = definition.key.clone();
        let announced = self.announced.get(&(backend.to_owned(), key.clone()));
        let pinned = self.document.pins.get(backend).and_then(|m| m.get(&key));
        let pending = self.document.pending.get(backend).and_then(|m| m.get(&key));
        let (state, keep) = match pinned {
            Some(pin) if pin.sha256 == definition.sha256 => {
                if pending.is_some() {
                    writes.resolved.push((backend.to_owned(), key.clone()));
                }
                if announced == Some(&definition.sha256) {
                    // What was reported changed is now the pin: it was approved.
                    events.push(Event::approval(
                        backend,
                        &key,
                        &definition.sha256,
                        pin.approved_by.as_deref(),
                    ));
                }
                return true;
            }
            Some(_) => (FindingState::Changed, config.mode == IntegrityMode::Warn),
            None if self.unreadable => {
                (FindingState::Unverified, config.mode == IntegrityMode::Warn)
            }
            None if self.entries(backend) >= MAX_ENTRIES_PER_BACKEND => {
                // Over the cap nothing more is stored: the entry is reported, and
                // `block` hides it, as it cannot be checked.
                (FindingState::Unpinned, config.mode == IntegrityMode::Warn)
            }
            None if config.new_tools == NewToolsPolicy::Allow => {
                // Trust on first use: pinned as first seen.
                let pin = Pin {
                    sha256: definition.sha256,
                    definition: definition.value,
                    at: Some(store::now()),
                    approved_by: None,
                };
                self.document
                    .pins
                    .entry(backend.to_owned())
                    .or_default()
                    .insert(key.clone(), pin.clone());
                writes.pins.push((backend.to_owned(), key, pin));
                return true;
            }
            None => (FindingState::New, false),
        };
        let finding = Finding {
            backend: backend.to_owned(),
            kind: key.kind.as_str(),
            name: key.name.clone(),
            state,
            blocked: !keep,
            pinned_sha256: pinned.map(|p| p.sha256.clone()),
            seen_sha256: definition.sha256.clone(),
            diff: diff(pinned.map(|p| &p.definition), &definition.value),
        };
        if announced != Some(&definition.sha256) {
            events.push(Event::change(&finding));
        }
        let room = pending.is_some()
            || self.document.pending.get(backend).map_or(0, |m| m.len()) < MAX_ENTRIES_PER_BACKEND;
        if !matches!(state, FindingState::Unverified | FindingState::Unpinned)
            && room
            && pending.map(|p| &p.sha256) != Some(&definition.sha256)
        {
            writes.pending.push((
                backend.to_owned(),
                key,
                Pin {
                    sha256: definition.sha256,
                    definition: definition.value,
                    at: Some(store::now()),
                    approved_by: None,
                },
            ));
        }
        findings.push(finding);
        keep
    }
}

/// The fields of two definitions that differ (every field when there is no old one).
pub fn diff(old: Option<&Value>, new: &Value) -> BTreeMap<String, FieldDiff> {
    let empty = serde_json::Map::new();
    let old = old.and_then(Value::as_object).unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    old.keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| {
            (
                k.clone(),
                FieldDiff {
                    old: old.get(k).map(cut),
                    new: new.get(k).map(cut),
                },
            )
        })
        .collect()
}

/// `value`, or its canonical JSON cut to [`MAX_DIFF_VALUE`] characters when longer
/// (a backend's description can be megabytes).
fn cut(value: &Value) -> Value {
    let text = canonical::canonical(value);
    if text.len() <= MAX_DIFF_VALUE {
        return value.clone();
    }
    let mut end = MAX_DIFF_VALUE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Value::String(format!("{}… ({} bytes)", &text[..end], text.len()))
}

#[cfg(test)]
mod tests;
