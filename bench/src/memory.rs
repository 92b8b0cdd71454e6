//! Memory per idle Legacy session: each server kind (the bare gateway, and the rmcp
//! backend for comparison) runs in a fresh child process (`--session-probe`), opens
//! many 2025-11-25 sessions that are never used again, and reports the RSS growth
//! per session.

use http::HeaderMap;
use tokio::runtime::Handle;

use crate::cli::Args;
use crate::client::{Client, Revision, Target};
use crate::gateway::start_gateway;
use crate::{backend, sys};

/// The memory section of the report; returns the gateway's KiB per idle session.
pub fn section(args: &Args) -> anyhow::Result<f64> {
    println!(
        "## Memory per idle Legacy session ({} sessions, each server in a fresh process)",
        args.sessions
    );
    println!();
    let gateway_session = probe_in_child("gateway", args.sessions)?;
    let backend_session = probe_in_child("backend", args.sessions)?;
    println!("| server | KiB per idle session |");
    println!("|---|---|");
    println!("| (b) gateway (bare service) | {gateway_session:.1} |");
    println!("| (a) backend (rmcp server, for comparison) | {backend_session:.1} |");
    println!();
    Ok(gateway_session)
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
pub async fn session_probe(
    kind: &str,
    args: &Args,
    bk: &Handle,
    gw: &Handle,
) -> anyhow::Result<()> {
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
            // The gateway caps live sessions (`operational.sessions.maxSessions`,
            // default 1000); the probe opens more, so it raises the cap.
            let yaml = format!(
                "backends:\n  - name: bench\n    url: {}\naggregation:\n  conflictResolution: prefix\n\
                 operational:\n  sessions:\n    maxSessions: {}\n",
                backend.url(),
                args.sessions + 1000
            );
            let (gateway, _) = start_gateway(
                gw,
                crate::gateway::config(&yaml)?,
                crate::gateway::Layers::Bare,
            )
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
