//! The bundled vmcp server: `serve`, `validate`, `init`, `schema`, `pins`.

mod pins;

/// mimalloc instead of the system allocator: a forwarded call allocates about 90
/// times, and glibc's malloc and free cost it more than the gateway's own routing
/// (docs/benchmarks.md, "The allocator"). Embedders choose their own.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use axum::serve::ListenerExt;
use clap::{Parser, Subcommand};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use vmcp_examples::logging::{LogFormat, Logging};
use vmcp_examples::starter::{STARTER_YAML, embedded_default};
use vmcp_service::Vmcp;
use vmcp_service::config::{Loaded, ignored_key_warning, load_file};

#[derive(Parser)]
#[command(
    name = "vmcp",
    version,
    about = "A virtual MCP server: many MCP backends behind one endpoint"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log line format on stderr (`RUST_LOG` sets the filter).
    #[arg(long, global = true, value_enum, default_value_t)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the aggregated MCP endpoint at /mcp.
    Serve {
        /// Configuration file; without it, two in-process demo backends are served.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Address to bind. Loopback by default; anything else is exposed to the network.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
        /// Port to bind.
        #[arg(long, env = "VMCP_PORT", default_value_t = 4483)]
        port: u16,
        /// Extra `Host` header values to accept (DNS-rebinding protection allows loopback only).
        #[arg(long = "allowed-host")]
        allowed_hosts: Vec<String>,
        /// Extra browser `Origin`s to accept at /mcp (`https://app.example`), added to
        /// the configuration's `allowedOrigins` (loopback origins always pass).
        #[arg(long = "allowed-origin")]
        allowed_origins: Vec<String>,
        /// Serve the read-only status page at /ui (as `ui: {enabled: true}` does).
        #[arg(long)]
        ui: bool,
    },
    /// Check a configuration file and exit.
    Validate {
        /// Configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the configuration's JSON Schema (for editors; docs/vmcp.schema.json).
    Schema,
    /// Write a commented starter configuration.
    Init {
        /// Where to write it; `-` for standard output.
        #[arg(long, short, default_value = "vmcp.yaml")]
        output: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Tool integrity pins: list them, diff pending changes, approve them.
    Pins {
        /// The configuration file; its `integrity` section names the store (the
        /// pin file, or the `sessionStorage` Redis).
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        /// The pin file itself (instead of `--config`).
        #[arg(long, global = true, conflicts_with = "config")]
        file: Option<PathBuf>,
        #[command(subcommand)]
        action: pins::PinsAction,
    },
}

fn report_ignored(loaded: &Loaded) {
    for key in &loaded.ignored_keys {
        tracing::warn!("{}", ignored_key_warning(key));
    }
    if loaded.ignored_unlisted > 0 {
        tracing::warn!(
            "{} more configuration keys are not used by vmcp (not listed)",
            loaded.ignored_unlisted
        );
    }
}

/// Discovered mode: the group's backends come from a Kubernetes cluster.
fn is_discovered(config: &vmcp_service::config::VmcpConfig) -> bool {
    config
        .outgoing_auth
        .as_ref()
        .is_some_and(|o| o.source == Some(vmcp_service::config::OutgoingSource::Discovered))
}

/// A file without backends is valid (they can come with a reload) but serves
/// nothing; most likely an empty or all-comment file.
fn warn_if_empty(loaded: &Loaded) {
    if loaded.config.backends.is_empty() && !is_discovered(&loaded.config) {
        tracing::warn!("no backends configured: the endpoint will serve an empty catalog");
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let logging = Logging::init(cli.log_format);
    match run(cli.command, logging).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, logging: Logging) -> anyhow::Result<()> {
    match command {
        Command::Validate { config } => {
            let loaded = load_file(&config)?;
            report_ignored(&loaded);
            warn_if_empty(&loaded);
            let discovered = match (is_discovered(&loaded.config), &loaded.config.group_ref) {
                (true, Some(group)) => format!(", and group {group}'s from the cluster"),
                _ => String::new(),
            };
            println!(
                "{}: valid ({} backend(s){discovered})",
                config.display(),
                loaded.config.backends.len()
            );
            Ok(())
        }
        Command::Pins {
            config,
            file,
            action,
        } => pins::run(pins::pin_store(config, file)?, action).await,
        Command::Schema => {
            use std::io::Write;
            let schema = vmcp_service::config::schema::json_schema();
            let text = serde_json::to_string_pretty(&schema)?;
            // `vmcp schema | head` closes the pipe early; that is not an error.
            match writeln!(std::io::stdout().lock(), "{text}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        Command::Init { output, force } => {
            if output.as_os_str() == "-" {
                print!("{STARTER_YAML}");
                return Ok(());
            }
            if output.exists() && !force {
                anyhow::bail!("{} exists; pass --force to overwrite", output.display());
            }
            std::fs::write(&output, STARTER_YAML)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))?;
            println!("wrote {}", output.display());
            Ok(())
        }
        Command::Serve {
            config,
            host,
            port,
            allowed_hosts,
            allowed_origins,
            ui,
        } => {
            let flags = Flags {
                allowed_hosts,
                allowed_origins,
                ui,
            };
            serve(config, host, port, flags, logging).await
        }
    }
}

/// `vmcp serve` flags that add to the configuration file.
struct Flags {
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    ui: bool,
}

async fn serve(
    config_path: Option<PathBuf>,
    host: IpAddr,
    port: u16,
    flags: Flags,
    logging: Logging,
) -> anyhow::Result<()> {
    let Flags {
        mut allowed_hosts,
        allowed_origins,
        ui,
    } = flags;
    let (mut config, _demo) = match &config_path {
        Some(path) => {
            let loaded = load_file(path)?;
            report_ignored(&loaded);
            warn_if_empty(&loaded);
            (loaded.config, None)
        }
        None => {
            let demo = embedded_default().await?;
            tracing::info!(
                "no --config: serving the embedded default (demo backends alpha and beta)"
            );
            (demo.config.clone(), Some(demo))
        }
    };
    if !host.is_loopback() {
        tracing::warn!(%host, "binding a non-loopback address: the endpoint is reachable from the network");
        allowed_hosts.push(host.to_string());
    }
    config.ui.enabled |= ui;
    config
        .allowed_origins
        .extend(allowed_origins.iter().cloned());
    if config.incoming_auth.as_ref().is_none_or(|a| !a.is_oidc()) {
        // Without a token there is no identity to bind a 2025-11-25 session to.
        tracing::warn!(
            "no incomingAuth oidc: a Legacy Mcp-Session-Id alone grants its session; treat session ids as bearer secrets"
        );
    }
    // Discovered mode: the group's backends come from the cluster, live, and the
    // VirtualMCPServer's status is written back.
    let discovered = is_discovered(&config);
    let sink = discovered.then(vmcp_service::discovery::StatusSink::new);
    let mut reporters: Vec<std::sync::Arc<dyn vmcp_service::status::StatusReporter>> =
        vec![std::sync::Arc::new(vmcp_service::status::LoggingReporter)];
    reporters.extend(sink.clone().map(|s| s as _));
    let gateway = std::sync::Arc::new(Vmcp::start_with_reporters(config.clone(), reporters).await?);
    let discovery = match &sink {
        Some(sink) => Some(std::sync::Arc::new(
            vmcp_service::discovery::Discovery::start(gateway.clone(), config, Some(sink)).await?,
        )),
        None => None,
    };
    // As `Vmcp::service()`: plain JSON bodies for 2026-07-28 requests that stream nothing.
    let mut http = StreamableHttpServerConfig::default().with_json_response(true);
    if !allowed_hosts.is_empty() {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        hosts.extend(allowed_hosts.iter().cloned());
        http = http.with_allowed_hosts(hosts);
    }
    // With incomingAuth, audit or telemetry configured, serve the full layer stack
    // (recovery, header checks, audit, auth, discovery, authorization, telemetry,
    // gate) at /mcp; otherwise the bare service.
    // The stack sits behind a switch: SIGHUP rebuilds its layers too.
    let mut switch = None;
    let mcp = if gateway.aggregator().config().has_layers() {
        let mut headers = vmcp_layers::headers::HeaderValidationLayer::new();
        for host in &allowed_hosts {
            headers = headers.allow_host(host.clone());
        }
        let stack = gateway.reloadable_stack(http, headers)?;
        tracing::info!(layers = ?stack.current().layers(), "request pipeline");
        let router = stack.router();
        switch = Some(stack);
        router
    } else {
        axum::Router::new().nest_service("/mcp", gateway.service_with(http))
    };
    let app = mcp.merge(gateway.status_router_with_hosts(allowed_hosts.clone()));
    if let Some(path) = config_path {
        tokio::spawn(reload_on_sighup(
            gateway.clone(),
            discovery.clone(),
            path,
            allowed_origins,
        ));
    }
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(host, port)).await?;
    let addr = listener.local_addr()?;
    // Responses leave in several writes (headers, SSE events); with Nagle's algorithm
    // on, the last one waits for the client's delayed ACK, about 40 ms per request.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let catalog = gateway.aggregator().catalog();
    tracing::info!(
        tools = catalog.tools().len(),
        backends = catalog.backends().len(),
        "vmcp listening on http://{addr}/mcp"
    );
    if gateway.aggregator().config().ui.enabled {
        tracing::info!("status page on http://{addr}/ui");
    }
    // Stop the gateway inside the graceful-shutdown future: that closes open SSE
    // streams, which graceful shutdown would otherwise wait on forever.
    let stopping = gateway.clone();
    // axum::serve's loop, with each connection's task absorbing its own wake-ups.
    let limits = gateway
        .aggregator()
        .config()
        .operational
        .connections
        .limits();
    vmcp_service::serve(listener, app)
        .with_limits(limits)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            logging.shutting_down();
            stopping.shutdown().await;
        })
        .await?;
    if let Some(telemetry) = switch.and_then(|s| s.current().telemetry().cloned()) {
        // Export what is still buffered; the exporters block, so off the runtime.
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
    tracing::info!("vmcp stopped");
    Ok(())
}

/// How long a SIGHUP waits for the configuration file to be read and checked (a
/// file on a hung network mount; a FIFO is refused without waiting).
const RELOAD_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Re-read the configuration file on SIGHUP and apply it without a restart. A file
/// that does not validate, or is not read within [`RELOAD_READ_LIMIT`], is refused
/// (logged) and the running configuration kept; later SIGHUPs are still answered.
#[cfg(unix)]
async fn reload_on_sighup(
    gateway: std::sync::Arc<Vmcp>,
    discovery: Option<std::sync::Arc<vmcp_service::discovery::Discovery>>,
    path: PathBuf,
    allowed_origins: Vec<String>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    use vmcp_service::config::ConfigError;
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; configuration reload is off");
        return;
    };
    // A read that outlived its limit: while it has not returned, SIGHUPs are refused
    // rather than piling up blocked threads.
    let mut stuck: Option<tokio::task::JoinHandle<Result<Loaded, ConfigError>>> = None;
    while hup.recv().await.is_some() {
        let io = |source: std::io::Error| ConfigError::Io {
            path: path.clone(),
            source,
        };
        let loaded = if stuck.as_ref().is_some_and(|read| !read.is_finished()) {
            Err(io(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "an earlier read of it has not returned yet",
            )))
        } else {
            // Parsing blocks: off the runtime, so in-flight requests are not held up.
            let file = path.clone();
            let mut read = tokio::task::spawn_blocking(move || load_file(&file));
            match tokio::time::timeout(RELOAD_READ_LIMIT, &mut read).await {
                Ok(joined) => joined.unwrap_or_else(|e| Err(io(std::io::Error::other(e)))),
                Err(_) => {
                    stuck = Some(read);
                    Err(io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("not read within {}s", RELOAD_READ_LIMIT.as_secs()),
                    )))
                }
            }
        };
        match loaded {
            Ok(mut loaded) => {
                report_ignored(&loaded);
                // The command line's origins stay allowed.
                loaded
                    .config
                    .allowed_origins
                    .extend(allowed_origins.iter().cloned());
                match &discovery {
                    // Applied with the discovered backends (by the same `reload`).
                    Some(discovery) => discovery.set_base(loaded.config),
                    // A refusal is logged (and audited) by `reload`; the old stack serves on.
                    None => {
                        let _ = gateway.reload(loaded.config).await;
                    }
                }
            }
            Err(error) => {
                tracing::error!("configuration reload refused: {error}");
                gateway.record_refused_reload();
            }
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(
    _: std::sync::Arc<Vmcp>,
    _: Option<std::sync::Arc<vmcp_service::discovery::Discovery>>,
    _: PathBuf,
    _: Vec<String>,
) {
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
