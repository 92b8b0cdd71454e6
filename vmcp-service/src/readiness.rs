//! `/readyz`: whether this replica should be sent traffic.
//!
//! Built in: the first catalog (`discovery_pending` until it is built) and the shared
//! store (`session_storage_unavailable` while Redis is unreachable: no session can be
//! restored or shared). Anything else that decides readiness, such as Kubernetes
//! discovery, registers a [`ReadinessCheck`] with [`Vmcp::add_readiness_check`].
//!
//! [`Vmcp::add_readiness_check`]: crate::Vmcp::add_readiness_check

use std::sync::{Arc, RwLock, Weak};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::aggregator::Aggregator;
use crate::redis_store::RedisStore;

/// What a [`ReadinessCheck`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Nothing to report.
    Ready,
    /// Serving as it should, with a part impaired: `/readyz` stays 200 and names the
    /// reason, so a balancer keeps the replica while an operator sees it.
    Degraded(&'static str),
    /// Not to be sent traffic: `/readyz` is 503 with the reason.
    NotReady(&'static str),
}

/// A condition `/readyz` takes into account. Checks run on every probe, so they
/// should only read state (a flag, a lock held briefly), never do I/O.
pub trait ReadinessCheck: Send + Sync + 'static {
    /// The condition now.
    fn readiness(&self) -> Readiness;
}

/// The registered checks, held weakly: a check dropped by its owner (a stopped
/// discovery) stops counting.
#[derive(Clone, Default)]
pub(crate) struct Checks(Arc<RwLock<Vec<Weak<dyn ReadinessCheck>>>>);

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let checks = self.0.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Checks")
            .field("registered", &checks.len())
            .finish()
    }
}

impl Checks {
    pub(crate) fn add(&self, check: Weak<dyn ReadinessCheck>) {
        let mut checks = self.0.write().unwrap_or_else(|e| e.into_inner());
        checks.retain(|c| c.strong_count() > 0);
        checks.push(check);
    }

    /// The worst of the registered checks: the first `NotReady`, else the first
    /// `Degraded`, else `Ready`.
    fn worst(&self) -> Readiness {
        let checks = self.0.read().unwrap_or_else(|e| e.into_inner());
        let mut worst = Readiness::Ready;
        for check in checks.iter().filter_map(Weak::upgrade) {
            match check.readiness() {
                not_ready @ Readiness::NotReady(_) => return not_ready,
                degraded @ Readiness::Degraded(_) if worst == Readiness::Ready => worst = degraded,
                _ => {}
            }
        }
        worst
    }
}

/// What `/readyz` reads.
#[derive(Clone)]
pub(crate) struct ReadyState {
    pub(crate) aggregator: Arc<Aggregator>,
    pub(crate) store: Option<Arc<RedisStore>>,
    pub(crate) checks: Checks,
}

impl ReadyState {
    fn readiness(&self) -> Readiness {
        if !*self.aggregator.ready().borrow() {
            return Readiness::NotReady("discovery_pending");
        }
        // Held sessions keep working while Redis is down; a balancer that should keep
        // sending them checks `/health` instead (docs/scaling.md).
        if self.store.as_ref().is_some_and(|s| !s.is_up()) {
            return Readiness::NotReady("session_storage_unavailable");
        }
        self.checks.worst()
    }
}

pub(crate) async fn readyz(State(ready): State<ReadyState>) -> Response {
    match ready.readiness() {
        Readiness::Ready => Json(json!({"status": "ready"})).into_response(),
        Readiness::Degraded(reason) => {
            Json(json!({"status": "degraded", "reason": reason})).into_response()
        }
        Readiness::NotReady(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": reason})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Readiness);
    impl ReadinessCheck for Fixed {
        fn readiness(&self) -> Readiness {
            self.0
        }
    }

    fn arc(r: Readiness) -> Arc<dyn ReadinessCheck> {
        Arc::new(Fixed(r))
    }

    #[test]
    fn the_worst_check_wins_and_dropped_checks_stop_counting() {
        let checks = Checks::default();
        assert_eq!(checks.worst(), Readiness::Ready);
        let ready = arc(Readiness::Ready);
        let degraded = arc(Readiness::Degraded("a"));
        checks.add(Arc::downgrade(&ready));
        checks.add(Arc::downgrade(&degraded));
        assert_eq!(checks.worst(), Readiness::Degraded("a"));
        let not_ready = arc(Readiness::NotReady("b"));
        checks.add(Arc::downgrade(&not_ready));
        assert_eq!(checks.worst(), Readiness::NotReady("b"));
        drop(not_ready);
        assert_eq!(checks.worst(), Readiness::Degraded("a"));
        drop(degraded);
        assert_eq!(checks.worst(), Readiness::Ready);
        checks.add(Arc::downgrade(&ready));
        assert_eq!(
            checks.0.read().unwrap().len(),
            2,
            "dead checks pruned on add"
        );
    }
}
