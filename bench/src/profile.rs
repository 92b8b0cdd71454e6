//! Profiling modes: the backend and the gateway as separate processes, and a driver
//! that sends an exact number of requests. Run only the gateway under a profiler
//! (for example `valgrind --tool=callgrind`) and divide by the request count to get
//! its cost per request; `scripts/profile-gateway.sh` does exactly that.

use std::time::Instant;

use http::HeaderMap;
use tokio::runtime::Handle;

use crate::cli::Mode;
use crate::client::{Client, Target};

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
            rate_limit,
        } => {
            let (gateway, stack) = crate::gateway::start_gateway(
                &gw,
                crate::gateway::backends_config(
                    &backend_url.split(',').collect::<Vec<_>>(),
                    rate_limit,
                )?,
                stack,
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
        }
        Mode::Drive {
            url,
            tool,
            revision,
            op,
            requests,
            clients,
            bearer,
        } => {
            let target = target(&url, &tool, bearer.as_deref())?;
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..clients {
                let target = target.clone();
                let count = requests / clients + usize::from(i < requests % clients);
                tasks.spawn(async move {
                    let mut client = Client::connect(&target, revision).await?;
                    for _ in 0..count {
                        client.once(&target, revision, op).await?;
                    }
                    anyhow::Ok(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            let elapsed = started.elapsed();
            println!(
                "{requests} {} {} requests over {clients} connection(s) in {:.3} s",
                revision.label(),
                op.label(),
                elapsed.as_secs_f64()
            );
        }
    }
    Ok(())
}
