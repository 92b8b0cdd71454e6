//! `vmcp-bench`: the gateway against a direct connection, in one run on one machine.
//!
//! ```sh
//! cargo run --release -p vmcp-bench            # about three minutes; --quick for a smoke run
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
//! (b)/(a) and (c)/(a); (u), the stack of (c) without Cedar, on lists only, and the
//! ratio (c)/(u). Then: memory per idle Legacy session, aggregation time for
//! 50 backends × 100 tools, and `tools/list` latency over the 5,000 aggregated tools.
//!
//! Knobs for experiments: `VMCP_BENCH_GATEWAY_WORKERS` / `VMCP_BENCH_BACKEND_WORKERS`
//! (runtime threads, default 2), `VMCP_BENCH_GATEWAY_NAGLE=1` (leave Nagle's algorithm
//! on for the gateway's accepted connections, to see what `TCP_NODELAY` saves).
//! `vmcp-bench serve-backend`, `serve-gateway URL [--stack] [--rate-limit]` and
//! `drive URL TOOL [--bearer TOKEN]` run the parts as separate processes (see
//! `scripts/profile-gateway.sh`).
//!
//! Modules: `cli` (arguments), `gateway` (the gateway under test), `stack` (what
//! variant (c) wires; `issuer`, its JWT key), `throughput` (load rounds and rows), `report` (tables),
//! `memory` (idle sessions), `aggregation` (many backends), `client` (the load
//! client), `backend` (the in-process backend), `sys` (`/proc` accounting) and
//! `profile` (the separate-process modes).

/// The allocator the bundled `vmcp` server ships with (see `docs/benchmarks.md`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod aggregation;
mod backend;
mod cli;
mod client;
mod gateway;
mod gateway_rss;
mod issuer;
mod memory;
mod profile;
mod report;
mod restore;
mod stack;
mod sys;
mod throughput;
mod token_endpoint;

use anyhow::Context;
use http::HeaderMap;
use tokio::runtime::Handle;

use cli::{Args, Mode};
use client::Target;
use gateway::{Layers, composite_config, exchange_config, single_backend_config, start_gateway};

const BACKEND_THREADS: &str = "bench-backend";
const GATEWAY_THREADS: &str = "bench-gateway";
const CLIENT_THREADS: [&str; 1] = ["bench-client"];
/// Tools of the backend behind (a), (b), (c), (w) and (x).
const BACKEND_TOOLS: usize = 10;

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
    let args = cli::parse_args()?;
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

/// The benchmark: memory, throughput and latency of (a), (b) and (c), ratios,
/// aggregation, targets.
async fn run(args: Args, bk: Handle, gw: Handle) -> anyhow::Result<()> {
    if let Some(kind) = &args.session_probe {
        return memory::session_probe(kind, &args, &bk, &gw).await;
    }
    report::preamble(&args);

    let gateway_session = if args.only.is_none() {
        memory::section(&args)?
    } else {
        0.0
    };

    let backend = bk
        .spawn(backend::spawn(backend::Backend::new(
            "bench",
            BACKEND_TOOLS,
        )))
        .await??;
    let direct = Target {
        addr: backend.addr,
        tool: "echo".into(),
        extra_headers: HeaderMap::new(),
    };
    let (bare, _) = start_gateway(&gw, single_backend_config(&backend.url())?, Layers::Bare)
        .await?
        .map_err(anyhow::Error::msg)?;
    let through_bare = Target {
        addr: bare.addr,
        tool: "bench_echo".into(),
        extra_headers: HeaderMap::new(),
    };
    let layered = start_gateway(&gw, single_backend_config(&backend.url())?, Layers::Full).await?;
    let unfiltered = start_gateway(
        &gw,
        single_backend_config(&backend.url())?,
        Layers::WithoutCedar,
    )
    .await?;

    let mut variants: Vec<(char, Target)> =
        vec![('a', direct.clone()), ('b', through_bare.clone())];
    let layered_reason = match &layered {
        Ok((gateway, stack)) => {
            let stack = stack.as_ref().context("(c) started without its stack")?;
            let target = Target {
                addr: gateway.addr,
                tool: "bench_echo".into(),
                extra_headers: stack.headers.clone(),
            };
            stack::check(&target, &stack.outsider_headers, BACKEND_TOOLS).await?;
            variants.push(('c', target));
            None
        }
        Err(reason) => Some(reason.clone()),
    };
    // (u): (c) without Cedar, for lists: (c)/(u) is what filtering by view costs.
    if let Ok((gateway, Some(stack))) = &unfiltered {
        variants.push((
            'u',
            Target {
                addr: gateway.addr,
                tool: "bench_echo".into(),
                extra_headers: stack.headers.clone(),
            },
        ));
    }
    // (x): (c) whose backend takes exchanged tokens; (w): (b) with a 3-step composite.
    let token_endpoint = bk.spawn(token_endpoint::spawn()).await??;
    let exchanging = start_gateway(
        &gw,
        exchange_config(&backend.url(), &token_endpoint.url())?,
        Layers::Full,
    )
    .await?;
    if let Ok((gateway, Some(stack))) = &exchanging {
        let target = Target {
            addr: gateway.addr,
            tool: "bench_echo".into(),
            extra_headers: stack.headers.clone(),
        };
        // Also warms the exchange cache and the caller's connection.
        stack::check(&target, &stack.outsider_headers, BACKEND_TOOLS).await?;
        variants.push(('x', target));
    }
    let (composite, _) = start_gateway(&gw, composite_config(&backend.url())?, Layers::Bare)
        .await?
        .map_err(anyhow::Error::msg)?;
    variants.push((
        'w',
        Target {
            addr: composite.addr,
            tool: gateway::COMPOSITE.into(),
            extra_headers: HeaderMap::new(),
        },
    ));

    report::throughput_header();
    let rows = throughput::measure(&variants, &args).await?;
    report::throughput_footer(layered_reason.as_deref());
    if let Ok((_, Some(stack))) = &layered {
        report::layered(stack);
    }
    let mut misses = report::ratios(&rows, layered_reason.as_deref());
    report::client_share(&rows);
    let grants = exchanging.is_ok().then(|| {
        let grants = &token_endpoint.grants;
        (
            grants.exchanges.load(std::sync::atomic::Ordering::Relaxed),
            grants
                .client_credentials
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    });
    report::exchange(&rows, grants);
    report::composite(&rows);
    misses.extend(report::filtered(&rows));

    for gateway in [
        Some(bare),
        Some(composite),
        layered.ok().map(|(g, _)| g),
        unfiltered.ok().map(|(g, _)| g),
        exchanging.ok().map(|(g, _)| g),
    ]
    .into_iter()
    .flatten()
    {
        gateway.stop(&gw).await;
    }
    drop(token_endpoint);
    drop(backend);
    if args.only.is_some() {
        return Ok(());
    }

    let gateway_rss = gateway_rss::section(&args, &bk).await?;
    aggregation::run(&args, &bk, &gw).await?;
    report::targets(misses, gateway_session, gateway_rss, args.rounds);
    Ok(())
}
