//! What makes this process one replica among several (docs/scaling.md): the key
//! sealing the state handed to 2026-07-28 clients (`sealing`, shared by replicas, or
//! a random key per process), the calls parked here, and, with a shared Redis, the
//! routing of a parked call's retry that reached another replica.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::aggregator::Aggregator;
use crate::handler::{Parked, Remote, VmcpHandler};
use crate::redis_store::RedisStore;
use crate::seal::Sealer;

/// One gateway's sealing key, parked calls and their routing, shared by every
/// service it builds.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    sealer: Arc<Sealer>,
    parked: Arc<Parked>,
    remote: Option<Arc<Remote>>,
}

impl Replica {
    /// Read the sealing keys and, with `store`, start routing parked calls through
    /// it until `shutdown`. `Err`: the keys could not be read (each problem naming
    /// its field, as `vmcp validate` says).
    pub(crate) async fn start(
        aggregator: &Arc<Aggregator>,
        store: Option<Arc<RedisStore>>,
        shutdown: &CancellationToken,
    ) -> Result<Self, Vec<String>> {
        let sealer = Arc::new(match &aggregator.config().sealing {
            Some(sealing) => Sealer::with_keys(&sealing.load()?),
            None => {
                if store.is_some() {
                    tracing::warn!(
                        "sessionStorage is shared but no sealing key is configured: a requestState opens only on the replica that issued it (set sealing.keyFile or sealing.keyEnv)"
                    );
                }
                Sealer::new()
            }
        });
        let parked = Arc::new(Parked::default());
        let remote = match store {
            Some(store) => Some(
                Remote::start(
                    store,
                    parked.clone(),
                    sealer.clone(),
                    aggregator.clone(),
                    shutdown.child_token(),
                )
                .await,
            ),
            None => None,
        };
        Ok(Self {
            sealer,
            parked,
            remote,
        })
    }

    /// `handler` sealing with this replica's key and parking here.
    pub(crate) fn serve(&self, handler: VmcpHandler) -> VmcpHandler {
        handler.with_replica(
            self.sealer.clone(),
            self.parked.clone(),
            self.remote.clone(),
        )
    }
}
