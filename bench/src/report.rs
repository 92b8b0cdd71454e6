//! The report: the preamble, the throughput table and its rows, the ratio table
//! against the direct connection (and which targets the bare service misses), the
//! client's share of the CPU, and the closing targets section. Markdown on stdout.

use crate::cli::Args;
use crate::client::{Op, Revision};
use crate::stack::Stack;
use crate::sys;
use crate::throughput::{Row, median, range};

/// The fewest rounds whose medians judge the targets.
pub const MIN_ROUNDS: usize = 5;

/// Over the rounds that ran side by side (round `i` of `x` and of `a`): the median
/// of `f(x_i, a_i)` and its range. Targets are judged on the median.
fn paired(x: &Row, a: &Row, f: impl Fn(usize) -> f64) -> Paired {
    let rounds = x.rps_rounds.len().min(a.rps_rounds.len());
    let values: Vec<f64> = (0..rounds).map(f).collect();
    let (min, max) = range(&values);
    Paired {
        median: median(&values),
        min,
        max,
    }
}

struct Paired {
    median: f64,
    min: f64,
    max: f64,
}

impl Paired {
    fn show(&self, digits: usize) -> String {
        format!(
            "{:.digits$} ({:.digits$}–{:.digits$})",
            self.median, self.min, self.max
        )
    }
}

/// The title, the machine and the measurement settings.
pub fn preamble(args: &Args) {
    println!("# vmcp-bench");
    println!();
    println!("machine: {}", sys::machine());
    println!(
        "runtimes: backend 2 workers, gateway 2 workers, client 1 thread; per row {} round(s) of {:?} warm-up + {:?} measured, variants alternating",
        args.rounds, args.warmup, args.window
    );
    if args.rounds < MIN_ROUNDS {
        println!(
            "fewer than {MIN_ROUNDS} rounds: a smoke run; targets are judged on medians of at least {MIN_ROUNDS} rounds"
        );
    }
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
        "| variant | revision | op | clients | req/s median (min–max) | p50 µs median (min–max) | p90 µs | p99 µs | CPU client | CPU gateway | CPU backend | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
}

/// One line of the throughput table.
pub fn print_row(row: &Row) {
    let (rps_min, rps_max) = range(&row.rps_rounds);
    let (p50_min, p50_max) = range(&row.p50_rounds);
    println!(
        "| {} | {} | {} | {} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} |",
        row.variant,
        row.revision.label(),
        row.op.label(),
        row.clients,
        row.rps,
        rps_min,
        rps_max,
        row.p50,
        p50_min,
        p50_max,
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

/// The ratio table of (b) and (c) against (a); returns the targets (b) and (c)
/// miss. Each figure is the median over the rounds that ran side by side (round `i`
/// of the variant against round `i` of (a)), with its range; targets are judged on
/// the medians.
pub fn ratios(rows: &[Row], layered_reason: Option<&str>) -> Vec<String> {
    println!("## Ratios against the direct connection (a)");
    println!();
    println!("Median over paired rounds (min–max).");
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
                let compare = |x: &Row| {
                    (
                        paired(x, a, |i| x.rps_rounds[i] / a.rps_rounds[i]),
                        paired(x, a, |i| x.p50_rounds[i] - a.p50_rounds[i]),
                    )
                };
                let rel = |v: char| match find(v, revision, op, clients) {
                    Some(x) => {
                        let (rps, p50) = compare(x);
                        (rps.show(2), p50.show(0), format!("{:.0}", x.p99 - a.p99))
                    }
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
                let label = format!("{} {} x{clients}", revision.label(), op.label());
                // (c) the full stack; (x) it with a per-caller (token-exchange)
                // backend, warm cache (issue 30).
                for variant in ['c', 'x'] {
                    if let Some(x) = find(variant, revision, op, clients)
                        && op == Op::Call
                        && clients == 8
                    {
                        let (rps, _) = compare(x);
                        if rps.median < 0.5 {
                            misses.push(format!(
                                "{label}: ({variant})/(a) median throughput {:.2} < 0.5",
                                rps.median
                            ));
                        }
                    }
                }
                if let Some(x) = find('b', revision, op, clients) {
                    let (rps, p50) = compare(x);
                    if op == Op::List && rps.median < 1.0 {
                        misses.push(format!(
                            "{label}: (b)/(a) median throughput {:.2} < 1.0",
                            rps.median
                        ));
                    }
                    if op == Op::Call && clients == 8 && rps.median < 0.6 {
                        misses.push(format!(
                            "{label}: (b)/(a) median throughput {:.2} < 0.6",
                            rps.median
                        ));
                    }
                    if clients == 1 && p50.median > 100.0 {
                        misses.push(format!(
                            "{label}: median added p50 {:.0} µs > 100 µs",
                            p50.median
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
pub fn targets(mut misses: Vec<String>, gateway_session: f64, gateway_rss_mib: f64, rounds: usize) {
    println!("## Targets");
    println!();
    if rounds < MIN_ROUNDS {
        println!(
            "(a smoke run of {rounds} round(s): the throughput targets below stand on fewer than {MIN_ROUNDS} rounds and are not a verdict)"
        );
        println!();
    }
    if gateway_session >= 64.0 {
        misses.push(format!(
            "idle Legacy session {gateway_session:.1} KiB >= 64 KiB"
        ));
    }
    if gateway_rss_mib > 40.0 {
        misses.push(format!(
            "gateway process peak RSS {gateway_rss_mib:.1} MiB > 40 MiB"
        ));
    }
    if misses.is_empty() {
        println!(
            "all met (issue 30's targets): (b)/(a) tools/call >= 0.6, (c)/(a) >= 0.5 and (x)/(a) >= 0.5 at 8 clients, (b)/(a) tools/list >= 1.0, (c)/(u) tools/list >= 0.9, (b) added p50 <= 100 µs at 1 client, idle Legacy session < 64 KiB, gateway peak RSS <= 40 MiB"
        );
    } else {
        for miss in &misses {
            println!("missed: {miss}");
        }
    }
}

/// The token-exchange variant (x) against (c), the same stack without exchange:
/// what a warm per-caller token cache and a per-caller connection cost per call.
/// `grants` is (token exchanges, client-credentials grants) served over the run.
pub fn exchange(rows: &[Row], grants: Option<(u64, u64)>) {
    let Some((exchanges, client_credentials)) = grants else {
        return;
    };
    println!("## Token exchange: (x) against (c)");
    println!();
    println!(
        "(x) is (c) with the backend's `outgoingAuth` set to `token_exchange` against an in-process RFC 8693 endpoint; the cache is warm before measuring. The endpoint served {exchanges} exchange(s) and {client_credentials} client-credentials grant(s) (health checks) over the whole run."
    );
    println!();
    println!(
        "| revision | clients | (x) req/s | (c) req/s | (x)/(c) | (x) − (c) p50 µs | gateway CPU µs/call (c) | (x) | (x) − (c) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for_pairs(rows, 'x', 'c', Op::Call, |revision, clients, x, c| {
        println!(
            "| {} | {clients} | {:.0} | {:.0} | {:.2} | {:.0} | {:.1} | {:.1} | {:+.1} |",
            revision.label(),
            x.rps,
            c.rps,
            x.rps / c.rps,
            x.p50 - c.p50,
            c.cpu_us[1],
            x.cpu_us[1],
            x.cpu_us[1] - c.cpu_us[1]
        );
    });
    println!();
}

/// The 3-step composite (w) against the sum of its three calls made directly (a)
/// and through the bare gateway (b).
pub fn composite(rows: &[Row]) {
    if !rows.iter().any(|r| r.variant == 'w') {
        return;
    }
    println!("## 3-step composite: (w) against three single calls");
    println!();
    println!(
        "(w) calls `{}`, three sequential `bench_echo` steps, through the bare gateway. Overhead = (w) minus three direct calls (a); gateway CPU compared with three forwarded calls (b).",
        crate::gateway::COMPOSITE
    );
    println!();
    println!(
        "| revision | clients | (w) req/s | (w) p50 µs | 3 × (a) p50 µs | overhead p50 µs | 3 × (b) p50 µs | gateway CPU µs (w) | 3 × (b) | backend CPU µs (w) | 3 × (a) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for_pairs(rows, 'w', 'a', Op::Call, |revision, clients, w, a| {
        let b = rows.iter().find(|r| {
            r.variant == 'b' && r.revision == revision && r.op == Op::Call && r.clients == clients
        });
        let (b_p50, b_cpu) = b.map_or((f64::NAN, f64::NAN), |b| (3.0 * b.p50, 3.0 * b.cpu_us[1]));
        println!(
            "| {} | {clients} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
            revision.label(),
            w.rps,
            w.p50,
            3.0 * a.p50,
            w.p50 - 3.0 * a.p50,
            b_p50,
            w.cpu_us[1],
            b_cpu,
            w.cpu_us[2],
            3.0 * a.cpu_us[2]
        );
    });
    println!();
}

/// Filtering a list by the caller's view: (c), the stack with Cedar, against (u), the
/// same stack without it, on `tools/list`; a miss when the median paired ratio is
/// under 0.9 (issue 30).
pub fn filtered(rows: &[Row]) -> Vec<String> {
    let mut misses = Vec::new();
    if !rows.iter().any(|r| r.variant == 'u') {
        return misses;
    }
    println!("## Filtered lists: (c) against (u)");
    println!();
    println!(
        "(u) is (c) without Cedar: the same JWT, audit and layers, every list unfiltered. Median over paired rounds (min–max)."
    );
    println!();
    println!("| revision | clients | (c) req/s | (u) req/s | (c)/(u) | (c) − (u) p50 µs |");
    println!("|---|---|---|---|---|---|");
    for_pairs(rows, 'c', 'u', Op::List, |revision, clients, c, u| {
        let ratio = paired(c, u, |i| c.rps_rounds[i] / u.rps_rounds[i]);
        let p50 = paired(c, u, |i| c.p50_rounds[i] - u.p50_rounds[i]);
        println!(
            "| {} | {clients} | {:.0} | {:.0} | {} | {} |",
            revision.label(),
            c.rps,
            u.rps,
            ratio.show(2),
            p50.show(0)
        );
        if ratio.median < 0.9 {
            misses.push(format!(
                "{} tools/list x{clients}: (c)/(u) median throughput {:.2} < 0.9",
                revision.label(),
                ratio.median
            ));
        }
    });
    println!();
    misses
}

/// Call `f` for every `op` row of `variant` that has a `base` row alike.
fn for_pairs(
    rows: &[Row],
    variant: char,
    base: char,
    op: Op,
    mut f: impl FnMut(Revision, usize, &Row, &Row),
) {
    for row in rows.iter().filter(|r| r.variant == variant && r.op == op) {
        if let Some(other) = rows.iter().find(|r| {
            r.variant == base
                && r.revision == row.revision
                && r.op == op
                && r.clients == row.clients
        }) {
            f(row.revision, row.clients, row, other);
        }
    }
}
