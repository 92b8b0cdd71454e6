//! Aggregation at scale: many backends with many tools each. Times `Vmcp::start`
//! (connect, list, build the catalog) and `refresh_all`, then `tools/list` over the
//! whole aggregated catalog, for both revisions.

use std::collections::BTreeMap;
use std::time::Instant;

use http::HeaderMap;
use tokio::runtime::Handle;

use crate::backend;
use crate::cli::Args;
use crate::client::{Client, Op, Revision, Target};
use crate::gateway::{config, start_gateway};

/// 50 backends × 100 tools: aggregation time, then `tools/list` over 5,000 tools.
pub async fn run(args: &Args, bk: &Handle, gw: &Handle) -> anyhow::Result<()> {
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
    let (gateway, _) = start_gateway(gw, config(&yaml)?, crate::gateway::Layers::Bare)
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
