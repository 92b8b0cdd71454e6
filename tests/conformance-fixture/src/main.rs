//! `vmcp-conformance-fixture [--port P] [--host H]`: serve the conformance fixtures
//! at `http://H:P/mcp` until SIGINT/SIGTERM. Prints `listening on <url>` once bound.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

fn usage() -> ! {
    eprintln!("usage: vmcp-conformance-fixture [--port PORT] [--host ADDR]");
    std::process::exit(2);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut host = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut port = 0u16;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--port" => port = value.parse().unwrap_or_else(|_| usage()),
            "--host" => host = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    let running = vmcp_conformance_fixture::serve(SocketAddr::new(host, port)).await?;
    println!("listening on {}", running.url());
    std::io::stdout().flush()?;
    shutdown_signal().await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
