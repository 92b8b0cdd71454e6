//! Profiling modes: the backend and the gateway as separate processes, and a driver
//! that sends an exact number of requests. Run only the gateway under a profiler
//! (for example `valgrind --tool=callgrind`) and divide by the request count to get
//! its cost per request; `scripts/profile-gateway.sh` does exactly that.

use std::time::Instant;

use http::HeaderMap;
use tokio::runtime::Handle;

use crate::cli::Mode;
use crate::client::{Client, Op, Prepared, Target};

/// The `q` quantile of sorted nanoseconds, in µs (NaN when empty).
pub fn percentile_us(sorted: &[u64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n as f64 * q) as usize).min(n - 1)] as f64 / 1_000.0,
    }
}

fn target(url: &str, tool: &str, bearer: Option<&str>) -> anyhow::Result<Target> {
    let uri: http::Uri = url.parse()?;
    let authority = uri
        .authority()
        .ok_or_else(|| anyhow::anyhow!("{url} has no host:port"))?;
    Ok(Target {
        addr: authority.as_str().parse()?,
        tool: tool.to_owned(),
        extra_headers: match bearer {
            Some(token) => HeaderMap::from_iter([(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_str(&format!("Bearer {token}"))?,
            )]),
            None => HeaderMap::new(),
        },
    })
}

async fn until_stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Run one of the non-benchmark modes.
pub async fn run_mode(mode: Mode, bk: Handle, gw: Handle) -> anyhow::Result<()> {
    match mode {
        Mode::Bench => unreachable!("the benchmark is run by main"),
        Mode::ServeBackend => {
            let backend = bk
                .spawn(crate::backend::spawn(crate::backend::Backend::new(
                    "bench", 10,
                )))
                .await??;
            println!("listening on {}", backend.url());
            until_stopped().await;
            drop(backend);
        }
        Mode::ServeGateway {
            backend_url,
            stack,
            exchange,
            rate_limit,
            extra_yaml,
        } => {
            let extra = extra_yaml.map(std::fs::read_to_string).transpose()?;
            // (x): the endpoint runs in the backend runtime, outside what is profiled
            // only in that it is another thread; its grants are few (the cache is warm
            // after the first call).
            let token_endpoint = if exchange {
                Some(bk.spawn(crate::token_endpoint::spawn()).await??)
            } else {
                None
            };
            let config = match &token_endpoint {
                Some(endpoint) => {
                    anyhow::ensure!(
                        !rate_limit && extra.is_none() && !backend_url.contains(','),
                        "--exchange takes one backend and no other option"
                    );
                    crate::gateway::exchange_config(&backend_url, &endpoint.url())?
                }
                None => crate::gateway::backends_config(
                    &backend_url.split(',').collect::<Vec<_>>(),
                    rate_limit,
                    extra.as_deref(),
                )?,
            };
            let (gateway, stack) = crate::gateway::start_gateway(
                &gw,
                config,
                if stack {
                    crate::gateway::Layers::Full
                } else {
                    crate::gateway::Layers::Bare
                },
            )
            .await?
            .map_err(anyhow::Error::msg)?;
            if let Some(stack) = &stack {
                // The token the driver must send (`drive … --bearer TOKEN`).
                let value = stack
                    .headers
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .ok_or_else(|| anyhow::anyhow!("(c) has no bearer token"))?;
                println!("bearer {value}");
                println!("layers {}", stack.layers.join(" > "));
            }
            println!("listening on http://{}/mcp", gateway.addr);
            until_stopped().await;
            gateway.stop(&gw).await;
            drop(token_endpoint);
        }
        Mode::Drive {
            url,
            tool,
            revision,
            op,
            requests,
            clients,
            bearer,
            arguments,
            per_op,
        } => {
            let target = target(&url, &tool, bearer.as_deref())?;
            let prepared = match (&arguments, op) {
                (Some(arguments), Op::Call) => Some(Prepared::call(&target, revision, arguments)),
                (Some(_), Op::List) => anyhow::bail!("--arguments is for calls"),
                (None, _) => None,
            };
            // Sessions are opened before the clock starts: the figures are per request.
            let mut connected = Vec::with_capacity(clients);
            for _ in 0..clients {
                connected.push(Client::connect(&target, revision).await?);
            }
            if let Some(prepared) = &prepared {
                // A tool error is an answer too: the first one is checked in full.
                let body = connected[0].send(prepared).await?;
                let message = crate::client::jsonrpc_message(&body)?;
                anyhow::ensure!(
                    message["result"]["isError"] != true,
                    "the call failed: {message}"
                );
            }
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for (i, mut client) in connected.into_iter().enumerate() {
                let target = target.clone();
                let prepared = prepared.clone();
                let count = requests / clients + usize::from(i < requests % clients);
                tasks.spawn(async move {
                    let mut latencies = Vec::with_capacity(count);
                    for _ in 0..count {
                        let start = Instant::now();
                        for _ in 0..per_op {
                            match &prepared {
                                Some(prepared) => client.send(prepared).await?,
                                None => client.once(&target, revision, op).await?,
                            };
                        }
                        latencies.push(start.elapsed().as_nanos() as u64);
                    }
                    anyhow::Ok(latencies)
                });
            }
            let mut latencies = Vec::with_capacity(requests);
            while let Some(done) = tasks.join_next().await {
                latencies.extend(done??);
            }
            let elapsed = started.elapsed();
            latencies.sort_unstable();
            println!(
                "{requests} {} {} requests over {clients} connection(s) in {:.3} s: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs",
                revision.label(),
                if per_op > 1 {
                    format!("{}×{per_op}", op.label())
                } else {
                    op.label().to_owned()
                },
                elapsed.as_secs_f64(),
                requests as f64 / elapsed.as_secs_f64(),
                percentile_us(&latencies, 0.50),
                percentile_us(&latencies, 0.99),
            );
        }
        Mode::Restore {
            url_a,
            url_b,
            tool,
            sessions,
        } => {
            let a = target(&url_a, &tool, None)?;
            let b = url_b.map(|url| target(&url, &tool, None)).transpose()?;
            crate::restore::run(&a, b.as_ref(), sessions).await?;
        }
    }
    Ok(())
}
