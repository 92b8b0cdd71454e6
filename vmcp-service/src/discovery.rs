//! Discovered mode (`outgoingAuth.source: discovered`): the backends of the
//! configuration's `groupRef` come from a Kubernetes cluster, live.
//!
//! One watcher per kind (`watch`) keeps the namespace's MCPGroup, MCPServer,
//! MCPRemoteProxy, MCPServerEntry, MCPExternalAuthConfig, MCPToolConfig, ConfigMap and
//! Secret objects current; after a burst settles ([`DEBOUNCE`]) they are turned into
//! backends (`convert`), merged into the file's configuration and applied with
//! [`Vmcp::reload`], the path of a SIGHUP: unchanged backends keep their connections,
//! clients get `list_changed`. When the API server is unreachable the last applied
//! backends keep serving. See docs/kubernetes.md.

mod convert;
mod kinds;
mod status_sink;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::DynamicObject;
use tokio::sync::watch as channel;
use tokio_util::sync::CancellationToken;

use crate::Vmcp;
use crate::config::{KubernetesConfig, OutgoingSource, VmcpConfig};
use convert::Discovered;
use kinds::Kind;
use watch::Shared;

pub use status_sink::StatusSink;

/// How long a burst of changes (one `kubectl apply` of many objects) is let settle
/// before it is applied as one reload.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// Why discovery did not start.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// `outgoingAuth.source` is not `discovered`.
    #[error("outgoingAuth.source is not \"discovered\"")]
    NotDiscovered,
    /// No `groupRef`.
    #[error("groupRef is required in discovered mode")]
    NoGroup,
    /// The kubeconfig could not be read, or no cluster configuration was found.
    #[error("no usable cluster configuration: {0}")]
    Cluster(String),
    /// No namespace: not in the settings, `$VMCP_NAMESPACE`, the pod or the kubeconfig.
    #[error("no namespace: set kubernetes.namespace or $VMCP_NAMESPACE")]
    NoNamespace,
    /// The private directory of CA bundles could not be made.
    #[error("cannot create the CA bundle directory: {0}")]
    CaDir(std::io::Error),
}

/// Running discovery; stopped on drop.
#[derive(Debug)]
pub struct Discovery {
    base: channel::Sender<VmcpConfig>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    ca_dir: PathBuf,
}

impl Discovery {
    /// Connect to the cluster `base.kubernetes` names and keep `gateway`'s backends
    /// those of `base` plus the group's. Returns once the watchers are started (the
    /// first backends are applied when every kind has been listed). With `status`
    /// (a sink `gateway` was started with), the VirtualMCPServer
    /// `kubernetes.virtualMcpServer` (default: `name`) gets the gateway's status.
    pub async fn start(
        gateway: Arc<Vmcp>,
        base: VmcpConfig,
        status: Option<&StatusSink>,
    ) -> Result<Self, DiscoveryError> {
        let source = base.outgoing_auth.as_ref().and_then(|o| o.source);
        if source != Some(OutgoingSource::Discovered) {
            return Err(DiscoveryError::NotDiscovered);
        }
        let group = base
            .group_ref
            .clone()
            .filter(|g| !g.is_empty())
            .ok_or(DiscoveryError::NoGroup)?;
        let settings = base.kubernetes.clone().unwrap_or_default();
        let cluster = cluster_config(&settings).await?;
        let namespace = settings
            .resolve_namespace()
            .or_else(|| Some(cluster.default_namespace.clone()).filter(|n| !n.is_empty()))
            .ok_or(DiscoveryError::NoNamespace)?;
        let client =
            kube::Client::try_from(cluster).map_err(|e| DiscoveryError::Cluster(e.to_string()))?;
        let ca_dir = private_dir().map_err(DiscoveryError::CaDir)?;
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        for kind in Kind::ALL {
            let api =
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &kind.resource());
            let (shared, stop) = (shared.clone(), stop.child_token());
            tokio::spawn(async move { watch::run(api, kind, &shared, stop).await });
        }
        let status_target = settings
            .virtual_mcp_server
            .clone()
            .or_else(|| base.name.clone());
        if let (Some(sink), Some(name)) = (status, status_target) {
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &namespace,
                &kinds::virtual_mcp_server(),
            );
            tokio::spawn(status_sink::write(
                api,
                name,
                gateway.clone(),
                sink.subscribe(),
                settings.status_interval(),
                stop.child_token(),
            ));
        }
        let check: Arc<dyn crate::readiness::ReadinessCheck> = shared.clone();
        gateway.add_readiness_check(Arc::downgrade(&check));
        let (base, base_rx) = channel::channel(base);
        tokio::spawn(reconcile(
            gateway,
            group,
            base_rx,
            shared.clone(),
            ca_dir.clone(),
            stop.child_token(),
        ));
        tracing::info!(%namespace, "discovered mode: watching the cluster");
        Ok(Self {
            base,
            shared,
            stop,
            ca_dir,
        })
    }

    /// A new file configuration (SIGHUP): applied with the discovered backends.
    pub fn set_base(&self, config: VmcpConfig) {
        self.base.send_replace(config);
    }

    /// Whether a watch is failing now (the last known backends are served).
    pub fn unreachable(&self) -> bool {
        self.shared.unreachable()
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_dir_all(&self.ca_dir);
    }
}

/// The kubeconfig named in the settings, else the pod's ServiceAccount, else
/// `$KUBECONFIG` / `~/.kube/config`.
async fn cluster_config(settings: &KubernetesConfig) -> Result<kube::Config, DiscoveryError> {
    let cluster = |e: &dyn std::fmt::Display| DiscoveryError::Cluster(e.to_string());
    match &settings.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| cluster(&e))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| cluster(&e))
        }
        None => match kube::Config::incluster() {
            Ok(config) => Ok(config),
            Err(_) => kube::Config::infer().await.map_err(|e| cluster(&e)),
        },
    }
}

/// A directory only this user reads (CA bundles written from ConfigMaps).
fn private_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "vmcp-discovered-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir)?;
    Ok(dir)
}

/// Apply what the cluster holds whenever it (or the file) changes, after [`DEBOUNCE`].
async fn reconcile(
    gateway: Arc<Vmcp>,
    group: String,
    mut base: channel::Receiver<VmcpConfig>,
    shared: Arc<Shared>,
    ca_dir: PathBuf,
    stop: CancellationToken,
) {
    let mut applied: Option<Discovered> = None;
    loop {
        let base_changed = tokio::select! {
            _ = stop.cancelled() => return,
            _ = shared.changed.notified() => false,
            changed = base.changed() => {
                if changed.is_err() {
                    return;
                }
                true
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(DEBOUNCE) => {}
        }
        let Some(objects) = shared.snapshot() else {
            continue;
        };
        let discovered = convert::discover(&objects, &group, &ca_dir);
        if !base_changed && applied.as_ref().is_some_and(|a| a.same(&discovered)) {
            continue;
        }
        if applied
            .as_ref()
            .is_none_or(|a| a.skipped != discovered.skipped)
        {
            for why in &discovered.skipped {
                tracing::warn!("discovered backend left out: {why}");
            }
        }
        if let Err(error) = write_ca_files(&ca_dir, &discovered) {
            tracing::error!(%error, "cannot write a discovered CA bundle; not applied");
            continue;
        }
        let config = merge(base.borrow_and_update().clone(), &discovered);
        let backends = discovered.backends.len();
        // A refusal is logged (and audited) by `reload`; the old backends serve on.
        if gateway.reload(config).await.is_ok() {
            tracing::info!(backends, "discovered backends applied");
            shared.mark_applied();
            applied = Some(discovered);
        }
    }
}

/// Write the wanted CA bundles and remove the ones no backend uses any more.
fn write_ca_files(dir: &Path, discovered: &Discovered) -> std::io::Result<()> {
    for (path, pem) in &discovered.ca_files {
        if !path.exists() {
            std::fs::write(path, pem)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !discovered.ca_files.contains_key(&path) {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

/// The file's configuration plus the discovered backends; the file wins a name clash.
fn merge(mut config: VmcpConfig, discovered: &Discovered) -> VmcpConfig {
    for backend in &discovered.backends {
        if config.backends.iter().any(|b| b.name == backend.name) {
            tracing::warn!(backend = %backend.name, "a discovered backend has the name of a configured one: the configured one is kept");
            continue;
        }
        config.backends.push(backend.clone());
        if let Some(auth) = discovered.auth.get(&backend.name) {
            config
                .outgoing_auth
                .get_or_insert_default()
                .backends
                .entry(backend.name.clone())
                .or_insert_with(|| auth.clone());
        }
        if let Some(tools) = discovered.tools.iter().find(|t| t.workload == backend.name)
            && !config
                .aggregation
                .tools
                .iter()
                .any(|t| t.workload == backend.name)
        {
            config.aggregation.tools.push(tools.clone());
        }
    }
    config
}
