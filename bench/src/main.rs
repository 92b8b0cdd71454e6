//! `vmcp-bench`: the gateway against a direct connection, in one run on one machine.
//!
//! ```sh
//! cargo run --release -p vmcp-bench            # about two minutes; --quick for a smoke run
//! ```
//!
//! One process, three runtimes with named threads so CPU time can be attributed:
//! the in-process rmcp backend (`bench-backend`, 2 workers), the gateway
//! (`bench-gateway`, 2 workers) and the load client (the main thread, one
//! current-thread runtime). On a 2-core machine all of them share the cores.
//!
//! Measured, for Legacy sessions and Modern stateless requests, `tools/call` and
//! `tools/list`, with 1 and 8 concurrent clients:
//! (a) directly against the backend, (b) through the bare aggregating service
//! (`Vmcp::service()` mounted in axum), (c) through the full layer stack (see
//! `stack.rs`). Reported: requests/s, p50/p90/p99 latency, CPU per request of the
//! client, gateway and backend threads, peak RSS of the process, and the ratios
//! (b)/(a) and (c)/(a). Then: memory per idle Legacy session, aggregation time for
//! 50 backends × 100 tools, and `tools/list` latency over the 5,000 aggregated tools.
//!
//! Knobs for experiments: `VMCP_BENCH_GATEWAY_WORKERS` / `VMCP_BENCH_BACKEND_WORKERS`
//! (runtime threads, default 2), `VMCP_BENCH_GATEWAY_NAGLE=1` (leave Nagle's algorithm
//! on for the gateway's accepted connections, to see what `TCP_NODELAY` saves).
//! `vmcp-bench serve-backend`, `serve-gateway URL` and `drive URL TOOL` run the parts
//! as separate processes (see `scripts/profile-gateway.sh`).

mod backend;
mod client;
mod profile;
mod stack;
mod sys;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use client::{Client, Op, Revision, Target};
use http::HeaderMap;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use vmcp_service::{Vmcp, VmcpConfig};

const BACKEND_THREADS: &str = "bench-backend";
const GATEWAY_THREADS: &str = "bench-gateway";
const CLIENT_THREADS: [&str; 1] = ["bench-client"];

struct Args {
    warmup: Duration,
    window: Duration,
    rounds: usize,
    sessions: usize,
    aggregation_backends: usize,
    aggregation_tools: usize,
    /// Only the throughput rows whose `variant:revision:op:clients` label contains this.
    only: Option<String>,
    /// Child mode: measure idle sessions of one server kind and print KiB per session.
    session_probe: Option<String>,
    /// Profiling modes (see `profile`): serve a backend or a gateway, or drive a
    /// fixed number of requests at a running server.
    mode: Mode,
}

/// What this invocation does.
enum Mode {
    /// The benchmark.
    Bench,
    /// `serve-backend`: serve the benchmark backend until SIGINT/SIGTERM.
    ServeBackend,
    /// `serve-gateway URL`: serve the bare gateway fronting the backend at URL.
    ServeGateway(String),
    /// `drive URL TOOL`: send exactly `requests` requests and report the wall time.
    Drive {
        url: String,
        tool: String,
        revision: Revision,
        op: Op,
        requests: usize,
        clients: usize,
    },
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        warmup: Duration::from_millis(300),
        window: Duration::from_secs(1),
        rounds: 3,
        sessions: 10_000,
        aggregation_backends: 50,
        aggregation_tools: 100,
        only: None,
        session_probe: None,
        mode: Mode::Bench,
    };
    let mut it = std::env::args().skip(1).peekable();
    match it.peek().map(String::as_str) {
        Some("serve-backend") => {
            it.next();
            args.mode = Mode::ServeBackend;
        }
        Some("serve-gateway") => {
            it.next();
            args.mode = Mode::ServeGateway(it.next().context("serve-gateway BACKEND_URL")?);
        }
        Some("drive") => {
            it.next();
            let url = it.next().context("drive URL TOOL")?;
            let tool = it.next().context("drive URL TOOL")?;
            args.mode = Mode::Drive {
                url,
                tool,
                revision: Revision::Modern,
                op: Op::Call,
                requests: 1000,
                clients: 1,
            };
        }
        _ => {}
    }
    while let Some(arg) = it.next() {
        let mut value = || it.next().context("missing value");
        if let Mode::Drive {
            revision,
            op,
            requests,
            clients,
            ..
        } = &mut args.mode
        {
            match arg.as_str() {
                "--legacy" => {
                    *revision = Revision::Legacy;
                    continue;
                }
                "--list" => {
                    *op = Op::List;
                    continue;
                }
                "--requests" => {
                    *requests = value()?.parse()?;
                    continue;
                }
                "--clients" => {
                    *clients = value()?.parse()?;
                    continue;
                }
                _ => {}
            }
        }
        match arg.as_str() {
            "--quick" => {
                args.warmup = Duration::from_millis(100);
                args.window = Duration::from_millis(300);
                args.rounds = 1;
                args.sessions = 1_000;
            }
            "--window-ms" => args.window = Duration::from_millis(value()?.parse()?),
            "--warmup-ms" => args.warmup = Duration::from_millis(value()?.parse()?),
            "--rounds" => args.rounds = value()?.parse::<usize>()?.max(1),
            "--sessions" => args.sessions = value()?.parse()?,
            "--only" => args.only = Some(value()?),
            "--session-probe" => args.session_probe = Some(value()?),
            _ => anyhow::bail!(
                "usage: vmcp-bench [--quick] [--window-ms N] [--warmup-ms N] [--rounds N] [--sessions N] [--only a:modern:tools/call:8]\n\
                 \x20      vmcp-bench serve-backend | serve-gateway BACKEND_URL\n\
                 \x20      vmcp-bench drive URL TOOL [--legacy] [--list] [--requests N] [--clients N]"
            ),
        }
    }
    Ok(args)
}

/// A runtime of `workers` threads (default 2, or `VMCP_BENCH_<NAME>_WORKERS`).
fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    let knob = format!(
        "VMCP_BENCH_{}_WORKERS",
        name.trim_start_matches("bench-").to_uppercase()
    );
    let workers = std::env::var(&knob)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let backend_rt = runtime(BACKEND_THREADS)?;
    let gateway_rt = runtime(GATEWAY_THREADS)?;
    let (bk, gw) = (backend_rt.handle().clone(), gateway_rt.handle().clone());
    // The load client runs on its own named thread so its CPU time can be told apart.
    std::thread::Builder::new()
        .name(CLIENT_THREADS[0].into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(async move {
                    match &args.mode {
                        Mode::Bench => run(args, bk, gw).await,
                        _ => profile::run_mode(args.mode, bk, gw).await,
                    }
                })
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
}

/// A gateway serving on loopback in the gateway runtime.
struct Gateway {
    vmcp: Arc<Vmcp>,
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Gateway {
    async fn stop(self, gw: &Handle) {
        self.stop.cancel();
        let vmcp = self.vmcp;
        let _ = gw.spawn(async move { vmcp.shutdown().await }).await;
    }
}

/// Start a gateway for `config`, bare (b) or with the full stack (c). For (c), the
/// headers its clients send; `Err` with the reason when (c) cannot be built.
async fn start_gateway(
    gw: &Handle,
    config: VmcpConfig,
    layered: bool,
) -> anyhow::Result<Result<(Gateway, HeaderMap), String>> {
    gw.spawn(async move {
        let vmcp = Arc::new(Vmcp::start(config).await?);
        let (app, headers) = if layered {
            match stack::full_stack(&vmcp) {
                Ok(stack) => (stack.router, stack.headers),
                Err(reason) => {
                    vmcp.shutdown().await;
                    return Ok(Err(reason));
                }
            }
        } else {
            (
                axum::Router::new().nest_service("/mcp", vmcp.service()),
                HeaderMap::new(),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let nodelay = std::env::var_os("VMCP_BENCH_GATEWAY_NAGLE").is_none();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |tcp| {
            let _ = tcp.set_nodelay(nodelay);
        });
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled_owned().await })
                .await;
        });
        anyhow::Ok(Ok((Gateway { vmcp, addr, stop }, headers)))
    })
    .await?
}

fn config(yaml: &str) -> anyhow::Result<VmcpConfig> {
    Ok(vmcp_service::config::load_str(yaml)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .config)
}

fn single_backend_config(url: &str) -> anyhow::Result<VmcpConfig> {
    config(&format!(
        "backends:\n  - name: bench\n    url: {url}\naggregation:\n  conflictResolution: prefix\n"
    ))
}

/// CPU time by thread group: client, gateway, backend (ns).
fn cpu_split() -> [u64; 3] {
    let by_name = sys::cpu_ns_by_thread_name();
    let sum = |names: &[&str]| -> u64 {
        by_name
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, ns)| ns)
            .sum()
    };
    [
        sum(&CLIENT_THREADS),
        sum(&[GATEWAY_THREADS]),
        sum(&[BACKEND_THREADS]),
    ]
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64) * q).floor() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1_000.0
}

#[derive(Clone)]
struct Row {
    variant: char,
    revision: Revision,
    op: Op,
    clients: usize,
    /// Median over rounds, and the lowest and highest round.
    rps: f64,
    rps_min: f64,
    rps_max: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    cpu_us: [f64; 3],
    peak_rss_mib: f64,
}

/// Measurements of one variant, accumulated over rounds.
#[derive(Default)]
struct Samples {
    latencies: Vec<u64>,
    rps: Vec<f64>,
    cpu_ns: [u64; 3],
    requests: f64,
    peak_rss_kib: u64,
}

impl Samples {
    /// One round: warm-up plus one window of load.
    async fn round(
        &mut self,
        target: &Target,
        revision: Revision,
        op: Op,
        clients: usize,
        args: &Args,
    ) -> anyhow::Result<()> {
        sys::reset_peak_rss();
        let before = cpu_split();
        let started = Instant::now();
        let result = client::load(target, revision, op, clients, args.warmup, args.window).await?;
        let elapsed = started.elapsed();
        let after = cpu_split();
        let n = result.latencies.len() as f64;
        self.rps.push(n / result.window.as_secs_f64());
        // CPU is spent over the whole round (warm-up included), so count its requests too.
        self.requests += n * elapsed.as_secs_f64() / result.window.as_secs_f64();
        for i in 0..3 {
            self.cpu_ns[i] += after[i].saturating_sub(before[i]);
        }
        self.latencies.extend(result.latencies);
        self.peak_rss_kib = self.peak_rss_kib.max(sys::peak_rss_kib());
        Ok(())
    }

    fn row(mut self, variant: char, revision: Revision, op: Op, clients: usize) -> Row {
        self.latencies.sort_unstable();
        self.rps.sort_by(f64::total_cmp);
        let requests = self.requests.max(1.0);
        Row {
            variant,
            revision,
            op,
            clients,
            rps: self.rps[self.rps.len() / 2],
            rps_min: self.rps[0],
            rps_max: self.rps[self.rps.len() - 1],
            p50: percentile(&self.latencies, 0.50),
            p90: percentile(&self.latencies, 0.90),
            p99: percentile(&self.latencies, 0.99),
            cpu_us: self.cpu_ns.map(|ns| ns as f64 / 1_000.0 / requests),
            peak_rss_mib: self.peak_rss_kib as f64 / 1024.0,
        }
    }
}

fn print_row(row: &Row) {
    println!(
        "| {} | {} | {} | {} | {:.0} ({:.0}–{:.0}) | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} |",
        row.variant,
        row.revision.label(),
        row.op.label(),
        row.clients,
        row.rps,
        row.rps_min,
        row.rps_max,
        row.p50,
        row.p90,
        row.p99,
        row.cpu_us[0],
        row.cpu_us[1],
        row.cpu_us[2],
        row.peak_rss_mib
    );
}

/// Memory per idle Legacy session: open `n` sessions and never use them again.
async fn session_cost(target: &Target, n: usize) -> anyhow::Result<f64> {
    let before = sys::rss_kib();
    let per_task = n.div_ceil(8);
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..8 {
        let target = target.clone();
        let count = per_task.min(n.saturating_sub(t * per_task));
        tasks.spawn(async move {
            let mut client = Client::connect(&target, Revision::Modern).await?;
            for _ in 0..count {
                client.initialize(&target).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let after = sys::rss_kib();
    Ok(after.saturating_sub(before) as f64 / n as f64)
}

/// Child mode (`--session-probe gateway|backend`): open `args.sessions` idle Legacy
/// sessions on a fresh server in this fresh process; print KiB per session.
async fn session_probe(kind: &str, args: &Args, bk: &Handle, gw: &Handle) -> anyhow::Result<()> {
    let backend = bk
        .spawn(backend::spawn(backend::Backend::new("bench", 10)))
        .await??;
    let (target, gateway) = match kind {
        "backend" => (
            Target {
                addr: backend.addr,
                tool: "echo".into(),
                extra_headers: HeaderMap::new(),
            },
            None,
        ),
        "gateway" => {
            let (gateway, _) = start_gateway(gw, single_backend_config(&backend.url())?, false)
                .await?
                .map_err(anyhow::Error::msg)?;
            let target = Target {
                addr: gateway.addr,
                tool: "bench_echo".into(),
                extra_headers: HeaderMap::new(),
            };
            (target, Some(gateway))
        }
        other => anyhow::bail!("--session-probe takes gateway or backend, not {other}"),
    };
    // Warm up allocator and runtime with a few sessions before the baseline.
    session_cost(&target, 64).await?;
    let kib = session_cost(&target, args.sessions).await?;
    println!("{kib:.2}");
    if let Some(gateway) = gateway {
        gateway.stop(gw).await;
    }
    Ok(())
}

/// Run a session probe in a child process, so it starts from a fresh heap.
fn probe_in_child(kind: &str, sessions: usize) -> anyhow::Result<f64> {
    let output = std::process::Command::new(std::env::current_exe()?)
        .args(["--session-probe", kind, "--sessions", &sessions.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(output.status.success(), "session probe {kind} failed");
    Ok(String::from_utf8(output.stdout)?.trim().parse()?)
}

async fn run(args: Args, bk: Handle, gw: Handle) -> anyhow::Result<()> {
    if let Some(kind) = &args.session_probe {
        return session_probe(kind, &args, &bk, &gw).await;
    }
    println!("# vmcp-bench");
    println!();
    println!("machine: {}", sys::machine());
    println!(
        "runtimes: backend 2 workers, gateway 2 workers, client 1 thread; per row {} round(s) of {:?} warm-up + {:?} measured, variants alternating",
        args.rounds, args.warmup, args.window
    );
    println!();

    let mut gateway_session = 0.0;
    if args.only.is_none() {
        println!(
            "## Memory per idle Legacy session ({} sessions, each server in a fresh process)",
            args.sessions
        );
        println!();
        gateway_session = probe_in_child("gateway", args.sessions)?;
        let backend_session = probe_in_child("backend", args.sessions)?;
        println!("| server | KiB per idle session |");
        println!("|---|---|");
        println!("| (b) gateway (bare service) | {gateway_session:.1} |");
        println!("| (a) backend (rmcp server, for comparison) | {backend_session:.1} |");
        println!();
    }

    let backend = bk
        .spawn(backend::spawn(backend::Backend::new("bench", 10)))
        .await??;
    let direct = Target {
        addr: backend.addr,
        tool: "echo".into(),
        extra_headers: HeaderMap::new(),
    };
    let (bare, _) = start_gateway(&gw, single_backend_config(&backend.url())?, false)
        .await?
        .map_err(anyhow::Error::msg)?;
    let through_bare = Target {
        addr: bare.addr,
        tool: "bench_echo".into(),
        extra_headers: HeaderMap::new(),
    };
    let layered = start_gateway(&gw, single_backend_config(&backend.url())?, true).await?;

    println!("## Throughput and latency");
    println!();
    println!(
        "CPU columns: CPU time per request of the client thread, the gateway runtime and the backend runtime (µs)."
    );
    println!();
    println!(
        "| variant | revision | op | clients | req/s (min–max) | p50 µs | p90 µs | p99 µs | CPU client | CPU gateway | CPU backend | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut variants: Vec<(char, Target)> =
        vec![('a', direct.clone()), ('b', through_bare.clone())];
    let layered_reason = match &layered {
        Ok((gateway, headers)) => {
            variants.push((
                'c',
                Target {
                    addr: gateway.addr,
                    tool: "bench_echo".into(),
                    extra_headers: headers.clone(),
                },
            ));
            None
        }
        Err(reason) => Some(reason.clone()),
    };
    let mut rows = Vec::new();
    for revision in [Revision::Legacy, Revision::Modern] {
        for op in [Op::Call, Op::List] {
            for clients in [1, 8] {
                let selected: Vec<&(char, Target)> = variants
                    .iter()
                    .filter(|(variant, _)| {
                        let label =
                            format!("{variant}:{}:{}:{clients}", revision.label(), op.label());
                        args.only
                            .as_ref()
                            .is_none_or(|only| label.contains(only.as_str()))
                    })
                    .collect();
                // Variants take turns, round by round, so that slow phases of a shared
                // machine hit all of them alike; each row reports the median round.
                let mut samples: Vec<Samples> =
                    selected.iter().map(|_| Samples::default()).collect();
                for _ in 0..args.rounds {
                    for ((variant, target), acc) in selected.iter().zip(samples.iter_mut()) {
                        acc.round(target, revision, op, clients, &args)
                            .await
                            .with_context(|| {
                                format!(
                                    "({variant}) {} {} x{clients}",
                                    revision.label(),
                                    op.label()
                                )
                            })?;
                    }
                }
                for ((variant, _), acc) in selected.iter().zip(samples) {
                    let row = acc.row(*variant, revision, op, clients);
                    print_row(&row);
                    rows.push(row);
                }
            }
        }
    }
    if let Some(reason) = &layered_reason {
        println!("| c | – | – | – | {reason} | | | | | | | |");
    }
    println!();

    println!("## Ratios against the direct connection (a)");
    println!();
    println!(
        "| revision | op | clients | (b)/(a) req/s | (b) added p50 µs | (b) added p99 µs | (c)/(a) req/s | (c) added p50 µs | (c) added p99 µs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let find = |v: char, r: Revision, o: Op, c: usize| {
        rows.iter()
            .find(|x| x.variant == v && x.revision == r && x.op == o && x.clients == c)
    };
    let mut misses = Vec::new();
    for revision in [Revision::Legacy, Revision::Modern] {
        for op in [Op::Call, Op::List] {
            for clients in [1, 8] {
                let Some(a) = find('a', revision, op, clients) else {
                    continue;
                };
                let rel = |v: char| match find(v, revision, op, clients) {
                    Some(x) => (
                        format!("{:.2}", x.rps / a.rps),
                        format!("{:.0}", x.p50 - a.p50),
                        format!("{:.0}", x.p99 - a.p99),
                    ),
                    None => ("n/a".into(), "n/a".into(), "n/a".into()),
                };
                let (b, c) = (rel('b'), rel('c'));
                println!(
                    "| {} | {} | {clients} | {} | {} | {} | {} | {} | {} |",
                    revision.label(),
                    op.label(),
                    b.0,
                    b.1,
                    b.2,
                    c.0,
                    c.1,
                    c.2
                );
                if let Some(x) = find('b', revision, op, clients) {
                    let label = format!("{} {} x{clients}", revision.label(), op.label());
                    if clients == 8 && x.rps / a.rps < 0.5 {
                        misses.push(format!(
                            "{label}: (b)/(a) throughput {:.2} < 0.5",
                            x.rps / a.rps
                        ));
                    }
                    if clients == 1 && x.p50 - a.p50 >= 150.0 {
                        misses.push(format!(
                            "{label}: added p50 {:.0} µs >= 150 µs",
                            x.p50 - a.p50
                        ));
                    }
                }
            }
        }
    }
    if let Some(reason) = &layered_reason {
        println!();
        println!("(c) {reason}");
    }
    println!();
    let client_share: f64 = {
        let (mut client, mut all) = (0.0, 0.0);
        for row in rows.iter().filter(|r| r.variant == 'b') {
            client += row.cpu_us[0];
            all += row.cpu_us.iter().sum::<f64>();
        }
        100.0 * client / all.max(f64::MIN_POSITIVE)
    };
    println!(
        "Client cost: the load client used {client_share:.0}% of the CPU time of the (b) rows; the rest is gateway and backend."
    );
    println!();

    bare.stop(&gw).await;
    if let Ok((gateway, _)) = layered {
        gateway.stop(&gw).await;
    }
    drop(backend);
    if args.only.is_some() {
        return Ok(());
    }

    aggregation(&args, &bk, &gw).await?;

    println!("## Targets");
    println!();
    if gateway_session >= 64.0 {
        misses.push(format!(
            "idle Legacy session {gateway_session:.1} KiB >= 64 KiB"
        ));
    }
    if misses.is_empty() {
        println!(
            "all met: (b)/(a) throughput >= 0.5 at 8 clients, added p50 < 150 µs at 1 client, idle Legacy session < 64 KiB"
        );
    } else {
        for miss in &misses {
            println!("missed: {miss}");
        }
    }
    Ok(())
}

/// 50 backends × 100 tools: aggregation time, then `tools/list` over 5,000 tools.
async fn aggregation(args: &Args, bk: &Handle, gw: &Handle) -> anyhow::Result<()> {
    let (n, t) = (args.aggregation_backends, args.aggregation_tools);
    println!("## Aggregation: {n} backends × {t} tools");
    println!();
    let mut backends = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("b{i:02}");
        backends.push(
            bk.spawn(backend::spawn(backend::Backend::new(&name, t)))
                .await??,
        );
    }
    let mut yaml = String::from("backends:\n");
    for (i, backend) in backends.iter().enumerate() {
        yaml.push_str(&format!("  - name: b{i:02}\n    url: {}\n", backend.url()));
    }
    let started = Instant::now();
    let (gateway, _) = start_gateway(gw, config(&yaml)?, false)
        .await?
        .map_err(anyhow::Error::msg)?;
    let cold = started.elapsed();
    let aggregator = gateway.vmcp.aggregator().clone();
    let tools = aggregator.catalog().tools().len();
    anyhow::ensure!(
        tools == n * t,
        "expected {} tools, the catalog has {tools}",
        n * t
    );
    let mut warm = Vec::new();
    for _ in 0..5 {
        let aggregator = aggregator.clone();
        let elapsed = gw
            .spawn(async move {
                let started = Instant::now();
                aggregator.refresh_all().await;
                started.elapsed()
            })
            .await?;
        warm.push(elapsed);
    }
    warm.sort();
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| `Vmcp::start` (connect {n} backends, list, build the catalog, serve) | {:.1} ms |",
        cold.as_secs_f64() * 1e3
    );
    println!(
        "| `refresh_all` on open connections (median of 5) | {:.1} ms |",
        warm[warm.len() / 2].as_secs_f64() * 1e3
    );

    let target = Target {
        addr: gateway.addr,
        tool: "b00_echo".into(),
        extra_headers: HeaderMap::new(),
    };
    let mut by_revision = BTreeMap::new();
    for revision in [Revision::Legacy, Revision::Modern] {
        let mut client = Client::connect(&target, revision).await?;
        let mut full = Vec::new();
        let mut first = Vec::new();
        let mut pages = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let (count, p) = client.list_all(&target, revision).await?;
            full.push(started.elapsed());
            anyhow::ensure!(count == n * t, "listed {count} tools, expected {}", n * t);
            pages = p;
            let started = Instant::now();
            client.once(&target, revision, Op::List).await?;
            first.push(started.elapsed());
        }
        full.sort();
        first.sort();
        by_revision.insert(
            revision.label(),
            (full[full.len() / 2], first[first.len() / 2], pages),
        );
    }
    for (label, (full, first, pages)) in by_revision {
        println!(
            "| `tools/list` of {} tools, {label}: all {pages} pages (median of 20) | {:.2} ms |",
            n * t,
            full.as_secs_f64() * 1e3
        );
        println!(
            "| `tools/list` of {} tools, {label}: first page of 1000 (median of 20) | {:.2} ms |",
            n * t,
            first.as_secs_f64() * 1e3
        );
    }
    println!();
    gateway.stop(gw).await;
    drop(backends);
    Ok(())
}
