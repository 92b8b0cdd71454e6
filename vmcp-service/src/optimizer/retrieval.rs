//! The optimizer's search outside a gateway, for the retrieval benchmark
//! (`vmcp-retrieval-bench`, docs/benchmarks.md): the same keyword index, query
//! building and hybrid ranking `find_tool` uses, over a list of tools.

use std::sync::Arc;

use rmcp::model::Tool;

pub use super::embed_client::{EmbedClient, EmbedError};
use super::index::{Hit, Index, query};
use super::semantic::hybrid;
pub use super::semantic::{DEFAULT_RATIO, DEFAULT_THRESHOLD, tool_text};

/// The keyword index of a list of tools.
pub struct KeywordSearch {
    index: Arc<Index>,
}

impl std::fmt::Debug for KeywordSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeywordSearch").finish_non_exhaustive()
    }
}

impl KeywordSearch {
    /// Index `tools`.
    pub fn build(tools: &[Tool]) -> Result<Self, String> {
        Index::build(tools)
            .map(|index| Self {
                index: Arc::new(index),
            })
            .map_err(|e| e.to_string())
    }

    /// `find_tool`'s keyword search of `texts` (description, then keywords): every
    /// matching tool as (position in the list, score), best first.
    pub fn search(&self, texts: &[&str]) -> Result<Vec<(usize, f64)>, String> {
        let Some(query) = query(texts) else {
            return Ok(Vec::new());
        };
        self.index
            .search_page(&query, i64::MAX, 0)
            .map(|hits| hits.into_iter().map(|h| (h.position, h.score)).collect())
            .map_err(|e| e.to_string())
    }

    /// What `find_tool`'s keyword tier does for one search of a caller who may see
    /// every tool: the best `max` positions, in pages on the blocking pool.
    pub async fn find(&self, texts: &[&str], max: usize) -> Result<Vec<usize>, String> {
        super::search::best(&self.index, None, texts, max, |_| true)
            .await
            .map(|found| found.hits.into_iter().map(|h| h.position).collect())
            .map_err(|e| e.to_string())
    }
}

/// The hybrid ranking of keyword hits (from [`KeywordSearch::search`]) with each
/// tool's vector and the query's: positions, best first.
pub fn hybrid_positions(
    keyword: &[(usize, f64)],
    vectors: &[Arc<[f32]>],
    query: &[f32],
    ratio: f64,
    threshold: f64,
) -> Vec<usize> {
    let hits: Vec<Hit> = keyword
        .iter()
        .map(|&(position, score)| Hit { position, score })
        .collect();
    let vectors: Vec<Option<Arc<[f32]>>> = vectors.iter().cloned().map(Some).collect();
    hybrid(&hits, &vectors, query, ratio, threshold)
        .into_iter()
        .map(|h| h.position)
        .collect()
}
