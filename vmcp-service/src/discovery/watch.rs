//! One kube-runtime watcher per kind feeding one shared set of objects.
//!
//! A watcher lists, then watches from the list's resourceVersion (with bookmarks): the
//! list + watch a 1.20 API server serves (no streaming lists). After an error it lists
//! again once the API server answers. While
//! any kind fails the last known objects stay: serving goes on with the backends
//! already applied. The outage is warned once, and its end logged once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::core::DynamicObject;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::convert::Objects;
use super::kinds::Kind;
use crate::readiness::{Readiness, ReadinessCheck};

/// The objects every watcher keeps current, and a wake-up for the reconciler.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) changed: Notify,
    /// Whether the group's backends have been applied once.
    applied: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    objects: Objects,
    /// Kinds whose first list has arrived.
    synced: BTreeSet<Kind>,
    /// Kinds whose watch is failing now.
    failing: BTreeSet<Kind>,
}

impl Shared {
    /// Every object, once every kind has been listed.
    pub(crate) fn snapshot(&self) -> Option<Objects> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.synced.len() == Kind::ALL.len()).then(|| state.objects.clone())
    }

    /// The group's backends were applied (readiness no longer waits for them).
    pub(crate) fn mark_applied(&self) {
        self.applied.store(true, Ordering::Release);
    }

    /// Whether some watch is failing now (the API server unreachable, or refusing).
    pub(crate) fn unreachable(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        !state.failing.is_empty()
    }

    fn update(&self, kind: Kind, f: impl FnOnce(&mut BTreeMap<String, Value>)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(state.objects.entry(kind).or_default());
        drop(state);
        self.changed.notify_one();
    }

    fn synced(&self, kind: Kind, objects: BTreeMap<String, Value>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.objects.insert(kind, objects);
        state.synced.insert(kind);
        drop(state);
        self.changed.notify_one();
    }

    fn failed(&self, kind: Kind, error: &watcher::Error) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.failing.is_empty() {
            // Once per outage, not per retry; the error names no secret (URLs and
            // the API's status at most).
            tracing::warn!(kind = kind.name(), %error, "kubernetes watch failing: serving the last known backends until it resumes");
        }
        state.failing.insert(kind);
    }

    fn answered(&self, kind: Kind) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.failing.remove(&kind) && state.failing.is_empty() {
            tracing::info!("kubernetes watch resumed");
        }
    }
}

/// Longest wait between two attempts of a failing watch.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

/// Keep `kind`'s objects in `shared` current until `stop`.
pub(crate) async fn run(
    api: Api<DynamicObject>,
    kind: Kind,
    shared: &Shared,
    stop: CancellationToken,
) {
    let start = || Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
    let mut stream = start();
    let mut buffer: BTreeMap<String, Value> = BTreeMap::new();
    let mut failures = 0u32;
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            next = stream.next() => next,
        };
        let event = match next {
            None => return,
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                shared.failed(kind, &error);
                failures = failures.saturating_add(1);
                // Pace the retries (200 ms, doubling), then list again: a completed
                // list is what proves the API server answers again (a resumed watch
                // says nothing until something changes), and it catches up on
                // deletions missed meanwhile.
                let wait = Duration::from_millis(200)
                    .saturating_mul(1 << failures.min(5))
                    .min(MAX_BACKOFF);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                stream = start();
                continue;
            }
        };
        match event {
            // Emitted before the list request is made: no answer yet.
            Event::Init => buffer.clear(),
            Event::InitApply(object) => {
                if let Some((name, data)) = named(object) {
                    buffer.insert(name, data);
                }
            }
            Event::InitDone => {
                failures = 0;
                shared.answered(kind);
                shared.synced(kind, std::mem::take(&mut buffer));
            }
            Event::Apply(object) => {
                failures = 0;
                shared.answered(kind);
                if let Some((name, data)) = named(object) {
                    shared.update(kind, |objects| {
                        objects.insert(name, data);
                    });
                }
            }
            Event::Delete(object) => {
                failures = 0;
                shared.answered(kind);
                if let Some((name, _)) = named(object) {
                    shared.update(kind, |objects| {
                        objects.remove(&name);
                    });
                }
            }
        }
    }
}

/// The object's name and everything but its metadata (`spec`, `status`, `data`).
fn named(object: DynamicObject) -> Option<(String, Value)> {
    Some((object.metadata.name?, object.data))
}

/// `/readyz`: not ready until the group's backends are applied once (a new replica
/// started during an outage has none of them); afterwards an unreachable API server
/// only degrades it: the last known backends are served, and a probe that failed
/// every replica of an outage-hit cluster would take the whole Service down.
impl ReadinessCheck for Shared {
    fn readiness(&self) -> Readiness {
        if !self.applied.load(Ordering::Acquire) {
            Readiness::NotReady("cluster_not_synced")
        } else if self.unreachable() {
            Readiness::Degraded("cluster_unreachable")
        } else {
            Readiness::Ready
        }
    }
}
