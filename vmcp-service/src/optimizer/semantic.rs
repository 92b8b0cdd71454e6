//! The semantic tier: each tool's text embedded once by the configured endpoint
//! ([`EmbedClient`]), reused by a content hash (a catalog change embeds only the
//! tools whose text changed, in the background: no `find_tool` waits for it), and
//! the keyword hits re-ranked by [`hybrid`]:
//! `ratio × cosine + (1 − ratio) × BM25 / best BM25`.
//!
//! When the endpoint is down or slow the search answers with the keyword hits, with
//! one WARN when it goes down and one INFO when it is back; while down it is asked
//! again at most every [`RETRY`], so an outage does not cost every search the timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::Tool;

use super::embed_client::{EmbedClient, EmbedError};
use super::index::{Hit, Index, words};
use crate::config::OptimizerConfig;

/// How long after a failure the endpoint is left alone.
pub(crate) const RETRY: Duration = Duration::from_secs(5);
/// The default share of the semantic score.
pub const DEFAULT_RATIO: f64 = 0.5;
/// The default largest cosine distance (1 − cosine) of a semantic-only match.
pub const DEFAULT_THRESHOLD: f64 = 1.0;

/// A content hash: the same text for the same model is embedded once.
type Key = [u8; 32];

/// The text of `tool` that is embedded: its name's words, its title and description
/// and its parameters' names.
pub fn tool_text(tool: &Tool) -> String {
    let mut text = words(&tool.name).join(" ");
    for part in [tool.title.as_deref(), tool.description.as_deref()]
        .into_iter()
        .flatten()
    {
        text.push_str(". ");
        text.push_str(part.trim().trim_end_matches('.'));
    }
    if let Some(serde_json::Value::Object(properties)) = tool.input_schema.get("properties") {
        let names: Vec<String> = properties.keys().map(|k| words(k).join(" ")).collect();
        if !names.is_empty() {
            text.push_str(". Parameters: ");
            text.push_str(&names.join(", "));
        }
    }
    text
}

/// `keyword` hits re-ranked with the semantic score: every tool whose cosine
/// distance to the query is at most `threshold`, or that matched a keyword, scored
/// `ratio × cosine + (1 − ratio) × bm25 / best bm25`, best first.
pub(crate) fn hybrid(
    keyword: &[Hit],
    vectors: &[Option<Arc<[f32]>>],
    query: &[f32],
    ratio: f64,
    threshold: f64,
) -> Vec<Hit> {
    let best = keyword
        .iter()
        .map(|h| h.score)
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut bm25 = vec![None; vectors.len()];
    for hit in keyword {
        if let Some(slot) = bm25.get_mut(hit.position) {
            *slot = Some(hit.score / best);
        }
    }
    let mut hits: Vec<Hit> = vectors
        .iter()
        .enumerate()
        .filter_map(|(position, vector)| {
            let cosine = vector.as_ref().map_or(0.0, |v| f64::from(dot(v, query)));
            let keyword = bm25.get(position).copied().flatten();
            let near = vector.is_some() && 1.0 - cosine <= threshold;
            (near || keyword.is_some()).then(|| Hit {
                position,
                score: ratio * cosine + (1.0 - ratio) * keyword.unwrap_or(0.0),
            })
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.position.cmp(&b.position))
    });
    hits
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The vectors of one index's tools, by position (`None`: not embedded).
pub(crate) type Vectors = Arc<Vec<Option<Arc<[f32]>>>>;

/// The semantic tier of one gateway.
pub(crate) struct Semantic {
    client: EmbedClient,
    ratio: f64,
    threshold: f64,
    cache: Mutex<HashMap<Key, Arc<[f32]>>>,
    /// The index whose vectors are ready, and the vectors.
    ready: Mutex<Option<(Arc<Index>, Vectors)>>,
    /// An embedding of an index's tools is under way.
    embedding: AtomicBool,
    /// Down since the last failure, and when to try again.
    down: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic")
            .field("ratio", &self.ratio)
            .field("threshold", &self.threshold)
            .finish_non_exhaustive()
    }
}

fn decimal(value: Option<&String>, default: f64) -> f64 {
    value.and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

impl Semantic {
    /// The semantic tier `config` asks for, or `None` without `embeddingService`.
    pub(crate) fn from_config(config: &OptimizerConfig) -> Result<Option<Self>, EmbedError> {
        Ok(EmbedClient::from_config(config)?.map(|client| Self {
            client,
            ratio: decimal(config.hybrid_search_semantic_ratio.as_ref(), DEFAULT_RATIO),
            threshold: decimal(
                config.semantic_distance_threshold.as_ref(),
                DEFAULT_THRESHOLD,
            ),
            cache: Mutex::default(),
            ready: Mutex::default(),
            embedding: AtomicBool::new(false),
            down: Mutex::default(),
        }))
    }

    /// The share of the semantic score.
    pub(crate) fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The largest cosine distance of a semantic-only match.
    pub(crate) fn threshold(&self) -> f64 {
        self.threshold
    }

    fn key(&self, text: &str) -> Key {
        let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        context.update(self.client.identity().as_bytes());
        context.update(&[0]);
        context.update(text.as_bytes());
        let mut key = [0; 32];
        key.copy_from_slice(context.finish().as_ref());
        key
    }

    fn vectors_of(&self, index: &Arc<Index>) -> Option<Vectors> {
        let ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        ready
            .as_ref()
            .filter(|(built, _)| Arc::ptr_eq(built, index))
            .map(|(_, vectors)| vectors.clone())
    }

    /// Start embedding `index`'s tools in the background unless its vectors are
    /// ready or an embedding is under way. Called when a new index is built.
    pub(crate) fn prepare(self: &Arc<Self>, index: &Arc<Index>) {
        if self.vectors_of(index).is_some() || self.embedding.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, index) = (self.clone(), index.clone());
        tokio::spawn(async move {
            let result = this.embed_tools(&index).await;
            this.embedding.store(false, Ordering::Release);
            match result {
                Ok((vectors, asked)) => {
                    // All cached (the same tools in a new catalog): the endpoint was
                    // not asked, and says nothing of an outage.
                    if asked {
                        this.healthy();
                    }
                    *this.ready.lock().unwrap_or_else(|e| e.into_inner()) = Some((index, vectors));
                }
                Err(e) => this.failed(&e),
            }
        });
    }

    /// The vectors of `index`'s tools: cached ones reused, the others embedded; the
    /// cache keeps only this index's afterwards. Also whether the endpoint was asked.
    async fn embed_tools(&self, index: &Index) -> Result<(Vectors, bool), EmbedError> {
        let texts: Vec<String> = index.tools().iter().map(tool_text).collect();
        let keys: Vec<Key> = texts.iter().map(|t| self.key(t)).collect();
        let missing: Vec<usize> = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            (0..texts.len())
                .filter(|&i| !cache.contains_key(&keys[i]))
                .collect()
        };
        if !missing.is_empty() {
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self.client.embed(&batch).await?;
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            for (&i, vector) in missing.iter().zip(vectors) {
                cache.insert(keys[i], vector.into());
            }
        }
        tracing::debug!(
            tools = texts.len(),
            embedded = missing.len(),
            "optimizer: tool embeddings ready"
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let vectors: Vec<Option<Arc<[f32]>>> = keys.iter().map(|k| cache.get(k).cloned()).collect();
        // Tools gone from the catalog: their vectors go too.
        let live: std::collections::HashSet<&Key> = keys.iter().collect();
        cache.retain(|k, _| live.contains(k));
        Ok((Arc::new(vectors), !missing.is_empty()))
    }

    fn healthy(&self) {
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        if down.take().is_some() {
            tracing::info!("optimizer: the embedding service answers again; hybrid search is back");
        }
    }

    fn failed(&self, error: &EmbedError) {
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        if down.is_none() {
            tracing::warn!(
                "optimizer: {error}; find_tool answers with keyword search until it is back"
            );
        }
        *down = Some(Instant::now() + RETRY);
    }

    /// Whether the endpoint is down and not yet due for another try.
    fn resting(&self) -> bool {
        let down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        down.is_some_and(|retry_at| Instant::now() < retry_at)
    }

    /// How this search of `index` is ranked: hybrid when the index's tools are
    /// embedded and the endpoint embeds the query, keyword only otherwise (a tool
    /// embedding not ready starts one, in the background).
    pub(crate) async fn ranking(self: &Arc<Self>, index: &Arc<Index>, texts: &[&str]) -> Ranking {
        if self.resting() {
            return Ranking::Degraded;
        }
        let Some(vectors) = self.vectors_of(index) else {
            self.prepare(index);
            let down = self
                .down
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
            return if down {
                Ranking::Degraded
            } else {
                Ranking::NotReady
            };
        };
        match self.client.embed(&[texts.join(" ")]).await {
            Ok(mut query) => {
                self.healthy();
                match query.pop() {
                    Some(query) => Ranking::Hybrid(vectors, query),
                    None => Ranking::Degraded,
                }
            }
            Err(e) => {
                self.failed(&e);
                Ranking::Degraded
            }
        }
    }
}

/// How one `find_tool` search is ranked.
pub(crate) enum Ranking {
    /// Hybrid ([`hybrid`]): the index's tool vectors and the query's.
    Hybrid(Vectors, Vec<f32>),
    /// Keyword only: the catalog's tools are being embedded (a new catalog).
    NotReady,
    /// Keyword only: the embedding service failed (degraded mode, counted).
    Degraded,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[f32]) -> Option<Arc<[f32]>> {
        Some(Arc::from(x))
    }

    #[test]
    fn hybrid_mixes_cosine_and_normalised_bm25() {
        let vectors = [v(&[1.0, 0.0]), v(&[0.0, 1.0]), v(&[0.6, 0.8]), None];
        let keyword = [
            Hit {
                position: 1,
                score: 4.0,
            },
            Hit {
                position: 3,
                score: 2.0,
            },
        ];
        let hits = hybrid(&keyword, &vectors, &[1.0, 0.0], 0.5, 1.0);
        let order: Vec<usize> = hits.iter().map(|h| h.position).collect();
        // 0: 0.5×1 = 0.5; 1: 0.5×0 + 0.5×1 = 0.5; 2: 0.5×0.6 = 0.3; 3: 0.5×0.5 = 0.25.
        assert_eq!(order, [0, 1, 2, 3]);
        assert!((hits[2].score - 0.3).abs() < 1e-6);
        // Ratio 0: keyword order only, semantic-only matches at the end with 0.
        let hits = hybrid(&keyword, &vectors, &[1.0, 0.0], 0.0, 1.0);
        assert_eq!(hits[0].position, 1);
        // A threshold of 0.5 drops the semantic-only match at distance 1 (position 1
        // stays: it matched a keyword) and keeps distance 0.4.
        let hits = hybrid(&keyword, &vectors, &[1.0, 0.0], 0.5, 0.5);
        let mut kept: Vec<usize> = hits.iter().map(|h| h.position).collect();
        kept.sort_unstable();
        assert_eq!(kept, [0, 1, 2, 3]);
        let hits = hybrid(&[], &vectors, &[1.0, 0.0], 0.5, 0.3);
        assert_eq!(hits.iter().map(|h| h.position).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn tool_text_has_words_description_and_parameters() {
        let schema = serde_json::json!({"type": "object", "properties": {"repoName": {}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let tool = Tool::new("gh_createIssue", "Open an issue.", Arc::new(schema));
        assert_eq!(
            tool_text(&tool),
            "gh create issue. Open an issue. Parameters: repo name"
        );
    }
}
