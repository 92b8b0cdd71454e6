//! The gateway process's own peak memory: the bench measures everything in one
//! process, so its peak RSS is client, backends and gateway together. Here the bare
//! gateway runs alone in a child process (`vmcp-bench serve-gateway URL1,URL2`) in
//! front of two backends, both revisions load it at once, and its `VmHWM` is read
//! from `/proc/<pid>/status` afterwards.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::HeaderMap;
use tokio::runtime::Handle;

use crate::cli::Args;
use crate::client::{self, Op, Revision, Target};
use crate::{backend, sys};

/// Clients per revision (and backend) during the load.
const CLIENTS: usize = 8;

/// The child gateway, killed when dropped.
struct ChildGateway(Child);

impl Drop for ChildGateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Measure and print the section; returns the peak RSS in MiB.
pub async fn section(args: &Args, bk: &Handle) -> anyhow::Result<f64> {
    let one = bk
        .spawn(backend::spawn(backend::Backend::new(
            "bench",
            crate::BACKEND_TOOLS,
        )))
        .await??;
    let two = bk
        .spawn(backend::spawn(backend::Backend::new(
            "bench2",
            crate::BACKEND_TOOLS,
        )))
        .await??;
    let urls = format!("{},{}", one.url(), two.url());
    let mut child = ChildGateway(
        Command::new(std::env::current_exe()?)
            .args(["serve-gateway", &urls])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let stdout = child
        .0
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    // The child prints its URL once it serves; a bounded wait on a blocking thread.
    let url = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("listening on ").map(str::to_owned))
    });
    let url = tokio::time::timeout(Duration::from_secs(60), url)
        .await??
        .ok_or_else(|| anyhow::anyhow!("the gateway process printed no URL"))?;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()?;
    let target = |tool: &str| Target {
        addr,
        tool: tool.into(),
        extra_headers: HeaderMap::new(),
    };
    let (modern, legacy) = (target("bench_echo"), target("bench2_echo"));
    let window = args.window * 3;
    let (m_call, l_call, m_list, l_list) = tokio::join!(
        client::load(
            &modern,
            Revision::Modern,
            Op::Call,
            CLIENTS,
            args.warmup,
            window
        ),
        client::load(
            &legacy,
            Revision::Legacy,
            Op::Call,
            CLIENTS,
            args.warmup,
            window
        ),
        client::load(&modern, Revision::Modern, Op::List, 2, args.warmup, window),
        client::load(&legacy, Revision::Legacy, Op::List, 2, args.warmup, window),
    );
    let served: usize = [m_call?, l_call?, m_list?, l_list?]
        .iter()
        .map(|r| r.latencies.len())
        .sum();
    let peak = sys::peak_rss_kib_of(child.0.id())
        .ok_or_else(|| anyhow::anyhow!("no VmHWM for the gateway process"))?;
    drop(child);
    let mib = peak as f64 / 1024.0;
    println!("## Gateway process peak RSS");
    println!();
    println!(
        "The bare gateway alone in a child process, two backends (one per revision's load), {CLIENTS} Modern and {CLIENTS} Legacy clients calling plus 2 + 2 listing at once for {:?}: {served} requests measured.",
        window
    );
    println!();
    println!("| process | peak RSS MiB (VmHWM) |");
    println!("|---|---|");
    println!("| gateway (`vmcp-bench serve-gateway`, two backends, under load) | {mib:.1} |");
    println!();
    Ok(mib)
}
