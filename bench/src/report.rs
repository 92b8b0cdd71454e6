//! The report: the preamble, the throughput table and its rows, the ratio table
//! against the direct connection (and which targets the bare service misses), the
//! client's share of the CPU, and the closing targets section. Markdown on stdout.

use crate::cli::Args;
use crate::client::{Op, Revision};
use crate::stack::Stack;
use crate::sys;
use crate::throughput::Row;

/// The title, the machine and the measurement settings.
pub fn preamble(args: &Args) {
    println!("# vmcp-bench");
    println!();
    println!("machine: {}", sys::machine());
    println!(
        "runtimes: backend 2 workers, gateway 2 workers, client 1 thread; per row {} round(s) of {:?} warm-up + {:?} measured, variants alternating",
        args.rounds, args.warmup, args.window
    );
    println!();
}

/// The throughput section's title, legend and table head.
pub fn throughput_header() {
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
}

/// One line of the throughput table.
pub fn print_row(row: &Row) {
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

/// The end of the throughput table: a line with the reason when (c) is missing.
pub fn throughput_footer(layered_reason: Option<&str>) {
    if let Some(reason) = layered_reason {
        println!("| c | – | – | – | {reason} | | | | | | | |");
    }
    println!();
}

/// What (c) wired, and what its audit layer wrote over the run.
pub fn layered(stack: &Stack) {
    let (lines, bytes) = stack.audit.get();
    println!(
        "(c) layers, outermost first: {}; audit: {lines} lines serialized, {:.0} bytes each on average.",
        stack.layers.join(", "),
        bytes as f64 / lines.max(1) as f64
    );
    println!();
}

/// The ratio table of (b) and (c) against (a); returns the targets (b) misses.
pub fn ratios(rows: &[Row], layered_reason: Option<&str>) -> Vec<String> {
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
    if let Some(reason) = layered_reason {
        println!();
        println!("(c) {reason}");
    }
    println!();
    misses
}

/// The load client's share of the CPU time of the (b) rows.
pub fn client_share(rows: &[Row]) {
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
}

/// The targets section: every target met, or each one missed.
pub fn targets(mut misses: Vec<String>, gateway_session: f64) {
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
}
