//! The periodic health checks of every registered backend; their outcomes feed each
//! backend's health record, whose flips the aggregator turns into rebuilds.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::backend::{BackendRegistry, HealthSettings};

/// Run periodic health checks on every backend until `shutdown`.
pub(crate) async fn monitor(
    registry: Arc<BackendRegistry>,
    settings: impl Fn() -> HealthSettings + Send + 'static,
    shutdown: CancellationToken,
) {
    loop {
        let current = settings();
        let checks = registry
            .all()
            .into_iter()
            .map(|backend| async move { backend.health_check(current.timeout).await });
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = futures::future::join_all(checks) => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(current.interval) => {}
        }
    }
}
