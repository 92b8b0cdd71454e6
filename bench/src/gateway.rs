//! Starting and stopping the gateway under test: the bare aggregating service (b),
//! the full layer stack (c) or that stack without Cedar (u), served on loopback in
//! the gateway runtime, and the configurations the benchmark gives it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use vmcp_service::{Vmcp, VmcpConfig};

use crate::stack::{self, Stack};

/// A gateway serving on loopback in the gateway runtime.
pub struct Gateway {
    pub vmcp: Arc<Vmcp>,
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl Gateway {
    /// Stop serving and shut the gateway down.
    pub async fn stop(self, gw: &Handle) {
        self.stop.cancel();
        let vmcp = self.vmcp;
        let _ = gw.spawn(async move { vmcp.shutdown().await }).await;
    }
}

/// What is in front of the aggregating service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layers {
    /// Nothing: the bare service (b).
    Bare,
    /// The full stack (c).
    Full,
    /// The full stack without Cedar (u): what a filtered list is compared with.
    WithoutCedar,
}

/// Start a gateway for `config` behind `layers`; with a stack, also what
/// [`stack::full_stack`] wired. `Err` with the reason when the stack cannot be built.
pub async fn start_gateway(
    gw: &Handle,
    config: VmcpConfig,
    layers: Layers,
) -> anyhow::Result<Result<(Gateway, Option<Stack>), String>> {
    gw.spawn(async move {
        let vmcp = Arc::new(Vmcp::start(config).await?);
        let (app, stack) = if layers == Layers::Bare {
            (
                axum::Router::new().nest_service("/mcp", service(&vmcp)),
                None,
            )
        } else {
            match stack::full_stack(&vmcp, layers == Layers::Full) {
                Ok(stack) => (stack.router.clone(), Some(stack)),
                Err(reason) => {
                    vmcp.shutdown().await;
                    return Ok(Err(reason));
                }
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let nodelay = std::env::var_os("VMCP_BENCH_GATEWAY_NAGLE").is_none();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |tcp| {
            let _ = tcp.set_nodelay(nodelay);
        });
        let stop = CancellationToken::new();
        let token = stop.clone();
        // `vmcp_service::serve`, as `vmcp serve` runs; `VMCP_BENCH_AXUM_SERVE=1` for
        // `axum::serve`, the loop it replaces (the same service, more wake-ups).
        let stopped = async move { token.cancelled_owned().await };
        if std::env::var_os("VMCP_BENCH_AXUM_SERVE").is_some() {
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await;
            });
        } else {
            tokio::spawn(async move {
                let _ = vmcp_service::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await;
            });
        }
        anyhow::Ok(Ok((Gateway { vmcp, addr, stop }, stack)))
    })
    .await?
}

/// The service under test: `Vmcp::service()`, or with `VMCP_BENCH_FAST_PATH=0` the
/// same service with every request answered by rmcp's server (the path before the
/// fast path existed, for before/after figures from one build).
pub fn service(vmcp: &Vmcp) -> vmcp_service::VmcpService {
    let service = vmcp.service();
    if std::env::var_os("VMCP_BENCH_FAST_PATH").is_some_and(|v| v == "0") {
        service.without_fast_path()
    } else {
        service
    }
}

/// A configuration from YAML, through the configuration loader.
pub fn config(yaml: &str) -> anyhow::Result<VmcpConfig> {
    Ok(vmcp_service::config::load_str(yaml)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .config)
}

/// One backend at `url`, called `bench`, its tools prefixed (`bench_echo`).
pub fn single_backend_config(url: &str) -> anyhow::Result<VmcpConfig> {
    config(&format!(
        "backends:\n  - name: bench\n    url: {url}\naggregation:\n  conflictResolution: prefix\n"
    ))
}

/// Variant (x): [`single_backend_config`] with the backend's outgoing auth set to an
/// RFC 8693 token exchange at `token_url` (the caller's validated token is the
/// subject; the gateway opens a connection per caller).
pub fn exchange_config(url: &str, token_url: &str) -> anyhow::Result<VmcpConfig> {
    config(&format!(
        "backends:\n  - name: bench\n    url: {url}\naggregation:\n  conflictResolution: prefix\n\
         outgoingAuth:\n  source: inline\n  backends:\n    bench:\n      type: token_exchange\n\
         \x20     tokenExchange:\n        tokenUrl: {token_url}\n        clientId: vmcp-bench\n\
         \x20       clientSecret: bench-secret\n        audience: bench-backend\n"
    ))
}

/// The 3-step composite of variant (w): three sequential `bench_echo` calls, each
/// depending on the one before, the last one's result returned.
pub const COMPOSITE: &str = "bench_three";

/// Variant (w): [`single_backend_config`] plus [`COMPOSITE`].
pub fn composite_config(url: &str) -> anyhow::Result<VmcpConfig> {
    config(&format!(
        "backends:\n  - name: bench\n    url: {url}\naggregation:\n  conflictResolution: prefix\n\
         compositeTools:\n  - name: {COMPOSITE}\n    description: three echoes in a row\n\
         \x20   parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}\n\
         \x20   steps:\n\
         \x20     - {{id: one, tool: bench_echo, arguments: {{text: \"{{{{ params.text }}}}\"}}}}\n\
         \x20     - {{id: two, tool: bench_echo, dependsOn: [one], arguments: {{text: \"{{{{ params.text }}}}\"}}}}\n\
         \x20     - {{id: three, tool: bench_echo, dependsOn: [two], arguments: {{text: \"{{{{ params.text }}}}\"}}}}\n"
    ))
}

/// A gateway in front of every backend in `urls` (names `bench`, `bench2`, …; tools
/// prefixed with the name), as the separate gateway process of the RSS section serves;
/// `extra` is appended to the YAML (`serve-gateway --extra-yaml`).
pub fn backends_config(
    urls: &[&str],
    rate_limit: bool,
    extra: Option<&str>,
) -> anyhow::Result<VmcpConfig> {
    let mut yaml = String::from("backends:\n");
    for (i, url) in urls.iter().enumerate() {
        let name = if i == 0 {
            "bench".to_owned()
        } else {
            format!("bench{}", i + 1)
        };
        yaml.push_str(&format!("  - name: {name}\n    url: {url}\n"));
    }
    yaml.push_str("aggregation:\n  conflictResolution: prefix\n");
    if rate_limit {
        yaml.push_str(RATE_LIMITS);
    }
    if let Some(extra) = extra {
        yaml.push_str(extra);
    }
    config(&yaml)
}

/// `serve-gateway --rate-limit`: the memory limiter metering every `tools/call` by
/// three buckets (shared, the caller's, the caller's for `bench_echo`), budgets no
/// benchmark run exhausts, so its cost is measured on calls it allows.
pub const RATE_LIMITS: &str = "rateLimiting:\n  shared: {maxTokens: 1000000, refillPeriod: 1s}\n\
  \x20 perUser: {maxTokens: 1000000, refillPeriod: 1s}\n\
  \x20 tools: [{name: bench_echo, perUser: {maxTokens: 1000000, refillPeriod: 1s}}]\n";
