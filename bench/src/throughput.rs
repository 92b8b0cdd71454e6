//! Throughput and latency: load rounds against each variant, taking turns, with the
//! CPU time of the client, gateway and backend threads and the peak RSS per round,
//! reduced to one [`Row`] per variant, revision, operation and client count.

use std::time::Instant;

use anyhow::Context;

use crate::cli::Args;
use crate::client::{self, Op, Revision, Target};
use crate::{BACKEND_THREADS, CLIENT_THREADS, GATEWAY_THREADS, report, sys};

/// CPU time by thread group: client, gateway, backend (ns).
fn cpu_split() -> [u64; 3] {
    let by_name = sys::cpu_ns_by_thread_name();
    let sum = |names: &[&str]| -> u64 {
        by_name
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, ns)| ns)
            .sum()
    };
    [
        sum(&CLIENT_THREADS),
        sum(&[GATEWAY_THREADS]),
        sum(&[BACKEND_THREADS]),
    ]
}

/// The `q` quantile of `sorted` nanoseconds, in µs.
fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64) * q).floor() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1_000.0
}

/// One line of the throughput table.
#[derive(Clone)]
pub struct Row {
    pub variant: char,
    pub revision: Revision,
    pub op: Op,
    pub clients: usize,
    /// Median over rounds, and the lowest and highest round.
    pub rps: f64,
    pub rps_min: f64,
    pub rps_max: f64,
    /// Latency percentiles over all measured requests, µs.
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    /// CPU time per request of the client, gateway and backend threads, µs.
    pub cpu_us: [f64; 3],
    pub peak_rss_mib: f64,
}

/// Measurements of one variant, accumulated over rounds.
#[derive(Default)]
struct Samples {
    latencies: Vec<u64>,
    rps: Vec<f64>,
    cpu_ns: [u64; 3],
    requests: f64,
    peak_rss_kib: u64,
}

impl Samples {
    /// One round: warm-up plus one window of load.
    async fn round(
        &mut self,
        target: &Target,
        revision: Revision,
        op: Op,
        clients: usize,
        args: &Args,
    ) -> anyhow::Result<()> {
        sys::reset_peak_rss();
        let before = cpu_split();
        let started = Instant::now();
        let result = client::load(target, revision, op, clients, args.warmup, args.window).await?;
        let elapsed = started.elapsed();
        let after = cpu_split();
        let n = result.latencies.len() as f64;
        self.rps.push(n / result.window.as_secs_f64());
        // CPU is spent over the whole round (warm-up included), so count its requests too.
        self.requests += n * elapsed.as_secs_f64() / result.window.as_secs_f64();
        for i in 0..3 {
            self.cpu_ns[i] += after[i].saturating_sub(before[i]);
        }
        self.latencies.extend(result.latencies);
        self.peak_rss_kib = self.peak_rss_kib.max(sys::peak_rss_kib());
        Ok(())
    }

    fn row(mut self, variant: char, revision: Revision, op: Op, clients: usize) -> Row {
        self.latencies.sort_unstable();
        self.rps.sort_by(f64::total_cmp);
        let requests = self.requests.max(1.0);
        Row {
            variant,
            revision,
            op,
            clients,
            rps: self.rps[self.rps.len() / 2],
            rps_min: self.rps[0],
            rps_max: self.rps[self.rps.len() - 1],
            p50: percentile(&self.latencies, 0.50),
            p90: percentile(&self.latencies, 0.90),
            p99: percentile(&self.latencies, 0.99),
            cpu_us: self.cpu_ns.map(|ns| ns as f64 / 1_000.0 / requests),
            peak_rss_mib: self.peak_rss_kib as f64 / 1024.0,
        }
    }
}

/// Variants measured on `tools/call` only: (w) calls a composite, and (x) lists
/// exactly as (c) does (lists never exchange tokens).
const CALL_ONLY: [char; 2] = ['w', 'x'];

/// Every row, for Legacy then Modern, `tools/call` then `tools/list`, 1 then 8
/// clients, for each of `variants` whose label `--only` selects; each row is
/// printed as soon as it is measured.
pub async fn measure(variants: &[(char, Target)], args: &Args) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for revision in [Revision::Legacy, Revision::Modern] {
        for op in [Op::Call, Op::List] {
            for clients in [1, 8] {
                let selected: Vec<&(char, Target)> = variants
                    .iter()
                    .filter(|(variant, _)| op == Op::Call || !CALL_ONLY.contains(variant))
                    .filter(|(variant, _)| {
                        let label =
                            format!("{variant}:{}:{}:{clients}", revision.label(), op.label());
                        args.only
                            .as_ref()
                            .is_none_or(|only| label.contains(only.as_str()))
                    })
                    .collect();
                // Variants take turns, round by round, so that slow phases of a shared
                // machine hit all of them alike; each row reports the median round.
                let mut samples: Vec<Samples> =
                    selected.iter().map(|_| Samples::default()).collect();
                for _ in 0..args.rounds {
                    for ((variant, target), acc) in selected.iter().zip(samples.iter_mut()) {
                        acc.round(target, revision, op, clients, args)
                            .await
                            .with_context(|| {
                                format!(
                                    "({variant}) {} {} x{clients}",
                                    revision.label(),
                                    op.label()
                                )
                            })?;
                    }
                }
                for ((variant, _), acc) in selected.iter().zip(samples) {
                    let row = acc.row(*variant, revision, op, clients);
                    report::print_row(&row);
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}
