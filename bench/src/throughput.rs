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

/// The median of `values` (the mean of the middle two for an even count); NaN when
/// empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The lowest and highest of `values`.
pub fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// One line of the throughput table.
#[derive(Clone)]
pub struct Row {
    pub variant: char,
    pub revision: Revision,
    pub op: Op,
    pub clients: usize,
    /// Requests/s of each round, in round order (rounds alternate between the
    /// variants of a row, so round `i` of two variants ran side by side).
    pub rps_rounds: Vec<f64>,
    /// The median of `rps_rounds`.
    pub rps: f64,
    /// p50 latency of each round, µs, in round order.
    pub p50_rounds: Vec<f64>,
    /// The median of `p50_rounds`, µs.
    pub p50: f64,
    /// Tail latency percentiles over all measured requests of all rounds, µs (a
    /// tail needs every sample).
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
    p50s: Vec<f64>,
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
        let mut round = result.latencies.clone();
        round.sort_unstable();
        self.p50s.push(percentile(&round, 0.50));
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
        let requests = self.requests.max(1.0);
        Row {
            variant,
            revision,
            op,
            clients,
            rps: median(&self.rps),
            rps_rounds: self.rps,
            p50: median(&self.p50s),
            p50_rounds: self.p50s,
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
/// Variants measured on `tools/list` only: (u), the unfiltered list (c) is compared with.
const LIST_ONLY: [char; 1] = ['u'];

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
                    .filter(|(variant, _)| op == Op::List || !LIST_ONLY.contains(variant))
                    .filter(|(variant, _)| {
                        let label =
                            format!("{variant}:{}:{}:{clients}", revision.label(), op.label());
                        args.only
                            .as_ref()
                            .is_none_or(|only| label.contains(only.as_str()))
                    })
                    .collect();
                // Variants take turns, round by round, so that slow phases of a shared
                // machine hit all of them alike; each row reports the median round,
                // and ratios pair the rounds that ran side by side.
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

#[cfg(test)]
mod tests {
    use super::{median, range};

    #[test]
    fn one_outlying_round_moves_neither_the_median_nor_another_round() {
        assert_eq!(median(&[5.0, 1.0, 4.0, 100.0, 3.0]), 4.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(range(&[5.0, 1.0, 4.0, 100.0, 3.0]), (1.0, 100.0));
    }
}
