//! `vmcp-retrieval-bench`: how well and how fast the optimizer's `find_tool` finds
//! the right tool (docs/benchmarks.md, "Tool retrieval").
//!
//! ```sh
//! cargo run --release -p vmcp-bench --bin vmcp-retrieval-bench
//! # hybrid too: an embedding endpoint (tests/peers/py_embed.py serves all-MiniLM-L6-v2)
//! cargo run --release -p vmcp-bench --bin vmcp-retrieval-bench -- --embed http://127.0.0.1:PORT
//! ```
//!
//! The catalog is bench/catalog/tools.json (real tools/list answers of the MCP servers
//! it names, collected by bench/catalog/collect.py), each tool named `server_tool` as a
//! gateway prefixes them; the queries are bench/catalog/queries.tsv (query → the tool
//! that should be found). Reported: recall@1, recall@5 and MRR of the keyword tier and,
//! with `--embed`, of the hybrid ranking; then, over the catalog replicated with
//! renamed copies to 5,000 tools, the latency of the keyword search `find_tool` runs
//! and of `find_tool` itself through a gateway over loopback HTTP.

mod gateway;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::Tool;
use serde_json::Value;
use vmcp_service::config::EmbeddingProvider;
use vmcp_service::tool_retrieval::{
    DEFAULT_RATIO, DEFAULT_THRESHOLD, EmbedClient, KeywordSearch, hybrid_positions, tool_text,
};

const LATENCY_TOOLS: usize = 5_000;
/// How many tools find_tool returns by default (maxToolsToReturn).
const RETURNED: usize = 8;

struct Args {
    catalog: String,
    queries: String,
    embed: Option<String>,
    ratio: f64,
    rounds: usize,
}

fn args() -> anyhow::Result<Args> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog");
    let mut args = Args {
        catalog: format!("{root}/tools.json"),
        queries: format!("{root}/queries.tsv"),
        embed: None,
        ratio: DEFAULT_RATIO,
        rounds: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--catalog" => args.catalog = value()?,
            "--queries" => args.queries = value()?,
            "--embed" => args.embed = Some(value()?),
            "--ratio" => args.ratio = value()?.parse()?,
            "--rounds" => args.rounds = value()?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn catalog(path: &str) -> anyhow::Result<Vec<Tool>> {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let tools = json["tools"].as_array().context("no tools array")?;
    tools
        .iter()
        .map(|t| {
            let mut t = t.clone();
            let name = format!(
                "{}_{}",
                t["server"].as_str().context("server")?,
                t["name"].as_str().context("name")?
            );
            t["name"] = Value::String(name);
            Ok(serde_json::from_value(t)?)
        })
        .collect()
}

fn queries(path: &str) -> anyhow::Result<Vec<(String, String)>> {
    std::fs::read_to_string(path)?
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (tool, query) = l.split_once('\t').context("expected TOOL<TAB>QUERY")?;
            Ok((tool.to_owned(), query.to_owned()))
        })
        .collect()
}

/// recall@1, recall@5, MRR of the rankings (positions, best first) against the
/// expected positions.
fn quality(rankings: &[Vec<usize>], expected: &[usize]) -> (f64, f64, f64) {
    let (mut r1, mut r5, mut rr) = (0.0, 0.0, 0.0);
    for (ranking, want) in rankings.iter().zip(expected) {
        if let Some(rank) = ranking.iter().position(|p| p == want) {
            r1 += f64::from(u8::from(rank == 0));
            r5 += f64::from(u8::from(rank < 5));
            #[allow(clippy::cast_precision_loss)]
            let reciprocal = 1.0 / (rank + 1) as f64;
            rr += reciprocal;
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let n = expected.len().max(1) as f64;
    (r1 / n, r5 / n, rr / n)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let tools = catalog(&args.catalog)?;
    let queries = queries(&args.queries)?;
    let expected: Vec<usize> = queries
        .iter()
        .map(|(tool, _)| {
            tools
                .iter()
                .position(|t| t.name == *tool)
                .with_context(|| format!("{tool} is not in the catalog"))
        })
        .collect::<anyhow::Result<_>>()?;
    println!("catalog: {} tools; queries: {}", tools.len(), queries.len());
    let index = KeywordSearch::build(&tools).map_err(anyhow::Error::msg)?;
    let keyword: Vec<Vec<(usize, f64)>> = queries
        .iter()
        .map(|(_, q)| index.search(&[q.as_str()]).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    let rankings: Vec<Vec<usize>> = keyword
        .iter()
        .map(|hits| hits.iter().map(|h| h.0).collect())
        .collect();
    println!("\n| tier | recall@1 | recall@5 | MRR |\n|---|---|---|---|");
    let (r1, r5, mrr) = quality(&rankings, &expected);
    println!("| keyword (BM25) | {r1:.3} | {r5:.3} | {mrr:.3} |");
    let misses: Vec<&str> = rankings
        .iter()
        .zip(&expected)
        .zip(&queries)
        .filter(|((ranking, want), _)| !ranking.iter().take(5).any(|p| p == *want))
        .map(|(_, (tool, _))| tool.as_str())
        .collect();

    if let Some(url) = &args.embed {
        let client = EmbedClient::new(
            url,
            EmbeddingProvider::Tei,
            None,
            http::HeaderMap::new(),
            Duration::from_secs(600),
        );
        let texts: Vec<String> = tools.iter().map(tool_text).collect();
        let started = Instant::now();
        let vectors: Vec<Arc<[f32]>> = client
            .embed(&texts)
            .await?
            .into_iter()
            .map(Arc::from)
            .collect();
        let embed_time = started.elapsed();
        let query_texts: Vec<String> = queries.iter().map(|(_, q)| q.clone()).collect();
        let query_vectors = client.embed(&query_texts).await?;
        let hybrid: Vec<Vec<usize>> = keyword
            .iter()
            .zip(&query_vectors)
            .map(|(hits, q)| hybrid_positions(hits, &vectors, q, args.ratio, DEFAULT_THRESHOLD))
            .collect();
        let (r1, r5, mrr) = quality(&hybrid, &expected);
        println!(
            "| hybrid (ratio {}) | {r1:.3} | {r5:.3} | {mrr:.3} |",
            args.ratio
        );
        let semantic: Vec<Vec<usize>> = query_vectors
            .iter()
            .map(|q| hybrid_positions(&[], &vectors, q, 1.0, DEFAULT_THRESHOLD))
            .collect();
        let (r1, r5, mrr) = quality(&semantic, &expected);
        println!("| semantic only (ratio 1) | {r1:.3} | {r5:.3} | {mrr:.3} |");
        println!(
            "\nembedding the {} tools took {:.1}s",
            tools.len(),
            embed_time.as_secs_f64()
        );
    }
    println!("\nkeyword misses (not in the top 5): {misses:?}");

    // Latency: the catalog replicated with renamed copies up to 5,000 tools.
    let mut many: Vec<Tool> = Vec::with_capacity(LATENCY_TOOLS);
    let mut copy = 0;
    while many.len() < LATENCY_TOOLS {
        for tool in &tools {
            if many.len() == LATENCY_TOOLS {
                break;
            }
            let mut tool = tool.clone();
            if copy > 0 {
                tool.name = format!("{}_copy{copy}", tool.name).into();
            }
            many.push(tool);
        }
        copy += 1;
    }
    let started = Instant::now();
    let big = KeywordSearch::build(&many).map_err(anyhow::Error::msg)?;
    let build = started.elapsed();
    let mut times = Vec::with_capacity(queries.len() * args.rounds);
    for _ in 0..args.rounds {
        for (_, q) in &queries {
            let started = Instant::now();
            let hits = big
                .find(&[q.as_str()], RETURNED)
                .await
                .map_err(anyhow::Error::msg)?;
            std::hint::black_box(hits);
            times.push(started.elapsed());
        }
    }
    times.sort_unstable();
    println!(
        "\nkeyword find_tool search over {} tools: index built in {:.0} ms; {} searches: p50 {:.3} ms, p99 {:.3} ms",
        many.len(),
        millis(build),
        times.len(),
        millis(percentile(&times, 0.5)),
        millis(percentile(&times, 0.99)),
    );
    let texts: Vec<&str> = queries.iter().map(|(_, q)| q.as_str()).collect();
    let (first, mut times) = gateway::find_tool_latency(many, &texts, args.rounds).await?;
    times.sort_unstable();
    println!(
        "find_tool through the gateway (Modern, loopback HTTP, maxToolsToReturn 8): first (builds the index) {:.0} ms; {} calls: p50 {:.3} ms, p99 {:.3} ms",
        millis(first),
        times.len(),
        millis(percentile(&times, 0.5)),
        millis(percentile(&times, 0.99)),
    );
    Ok(())
}
