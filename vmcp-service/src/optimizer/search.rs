//! One `find_tool` search: the best hits a caller may see, ranked by keyword alone
//! (pages of BM25 hits until enough are the caller's) or hybrid when the semantic
//! tier is on and answering.

use std::sync::Arc;

use super::index::{Hit, Index, IndexError, query};
use super::semantic::{Ranking, Semantic, hybrid};

/// What a search found, and whether the semantic tier failed it.
#[derive(Debug)]
pub(crate) struct Found {
    /// At most the asked number of hits, best first, all visible to the caller.
    pub(crate) hits: Vec<Hit>,
    /// Keyword hits only because the embedding service failed.
    pub(crate) degraded: bool,
}

/// The best `max` hits of `texts` in `index` that `visible` admits (by position).
pub(crate) async fn best(
    index: &Arc<Index>,
    semantic: Option<&Arc<Semantic>>,
    texts: &[&str],
    max: usize,
    visible: impl Fn(usize) -> bool,
) -> Result<Found, IndexError> {
    let fts_query: Option<Arc<str>> = query(texts).map(Into::into);
    let ranking = match semantic {
        Some(semantic) => semantic.ranking(index, texts).await,
        None => Ranking::NotReady,
    };
    if let Ranking::Hybrid(vectors, query_vector) = ranking {
        // Every keyword hit: the semantic score may lift any of them.
        let keyword = match fts_query {
            Some(q) => index.search_blocking(q, i64::MAX, 0).await?,
            None => Vec::new(),
        };
        let threshold = semantic.map_or(1.0, |s| s.threshold());
        let ratio = semantic.map_or(0.0, |s| s.ratio());
        let hits = hybrid(&keyword, &vectors, &query_vector, ratio, threshold)
            .into_iter()
            .filter(|hit| visible(hit.position))
            .take(max)
            .collect();
        return Ok(Found {
            hits,
            degraded: false,
        });
    }
    let degraded = matches!(ranking, Ranking::Degraded);
    let mut hits = Vec::new();
    if let Some(fts_query) = fts_query {
        // Pages of hits, best first, until enough of them are this caller's.
        let page = i64::try_from(max.max(8) * 4).unwrap_or(32);
        let mut offset = 0;
        loop {
            let page_hits = index
                .search_blocking(fts_query.clone(), page, offset)
                .await?;
            let full = i64::try_from(page_hits.len()).unwrap_or(0) == page;
            hits.extend(page_hits.into_iter().filter(|hit| visible(hit.position)));
            if hits.len() >= max || !full {
                break;
            }
            offset += page;
        }
        hits.truncate(max);
    }
    Ok(Found { hits, degraded })
}
