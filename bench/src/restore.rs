//! `vmcp-bench restore`: what a Legacy session costs when it moves between replicas
//! that share one Redis (`sessionStorage: redis`). Sessions are opened on replica A;
//! each one's first request on replica B restores it from Redis, and that request's
//! latency is what is reported.

use std::time::Instant;

use crate::client::{Client, Prepared, Revision, Target};
use crate::profile::percentile_us;

/// Open `sessions` Legacy sessions on `a`; with `b`, then time each one's first
/// `tools/call` there (the restore) and a second one (held by B by then).
pub async fn run(a: &Target, b: Option<&Target>, sessions: usize) -> anyhow::Result<()> {
    let mut ids = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let client = Client::connect(a, Revision::Legacy).await?;
        ids.push(
            client
                .session()
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("no session id"))?,
        );
    }
    println!("{sessions} Legacy sessions opened on {}", a.addr);
    let Some(b) = b else {
        return Ok(());
    };
    let call = Prepared::call(b, Revision::Legacy, r#"{"text":"hello"}"#);
    let (mut first, mut second) = (Vec::with_capacity(sessions), Vec::with_capacity(sessions));
    for id in ids {
        let mut client = Client::resume(b, id).await?;
        let start = Instant::now();
        let body = client.send(&call).await?;
        first.push(start.elapsed().as_nanos() as u64);
        let message = crate::client::jsonrpc_message(&body)?;
        anyhow::ensure!(
            message["result"]["isError"] != true,
            "the restored session's call failed: {message}"
        );
        let start = Instant::now();
        client.send(&call).await?;
        second.push(start.elapsed().as_nanos() as u64);
    }
    first.sort_unstable();
    second.sort_unstable();
    println!(
        "first call on {} (restore): p50 {:.0} µs, p99 {:.0} µs; second call (held): p50 {:.0} µs, p99 {:.0} µs ({sessions} sessions)",
        b.addr,
        percentile_us(&first, 0.50),
        percentile_us(&first, 0.99),
        percentile_us(&second, 0.50),
        percentile_us(&second, 0.99),
    );
    Ok(())
}
