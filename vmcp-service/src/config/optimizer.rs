//! `optimizer:` — tool search instead of the full tool list (docs/optimizer.md).
//!
//! The keyword tier (SQLite FTS5, BM25, porter stemming) needs no settings beyond
//! `maxToolsToReturn`. The embedding keys of the reference's semantic tier are
//! accepted and validated so a migrated file keeps them, but not used yet: the
//! gateway logs one WARN at start when they are set.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The optimizer's search tool, advertised instead of the catalog's tools.
pub const FIND_TOOL: &str = "find_tool";
/// The optimizer's call tool.
pub const CALL_TOOL: &str = "call_tool";

/// Default number of tools `find_tool` returns.
pub const DEFAULT_MAX_TOOLS_TO_RETURN: usize = 8;
/// The largest `maxToolsToReturn`.
pub const MAX_TOOLS_TO_RETURN: usize = 50;
/// The most `embeddingHeaders` entries (the reference's cap).
pub const MAX_EMBEDDING_HEADERS: usize = 32;

/// The embedding endpoint's protocol (semantic tier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    /// Hugging Face text-embeddings-inference (`POST /embed`).
    Tei,
    /// An OpenAI-compatible `POST /v1/embeddings`.
    Openai,
}

/// `optimizer:` — when present, `tools/list` advertises only `find_tool` and
/// `call_tool` (both revisions, with or without authorization).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OptimizerConfig {
    /// How many tools one `find_tool` returns at most (1–50, default 8).
    #[serde(default)]
    pub max_tools_to_return: Option<usize>,
    /// Semantic tier (not used yet): the embedding endpoint's base URL.
    #[serde(default)]
    pub embedding_service: Option<String>,
    /// Semantic tier (not used yet): `tei` or `openai`.
    #[serde(default)]
    pub embedding_provider: Option<EmbeddingProvider>,
    /// Semantic tier (not used yet): the model name sent to the endpoint.
    #[serde(default)]
    pub embedding_model: Option<String>,
    /// Semantic tier (not used yet): extra headers of each embedding request
    /// (`openai` only, at most 32).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub embedding_headers: BTreeMap<String, String>,
    /// Semantic tier (not used yet): bound on one embedding request. Default 30s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub embedding_service_timeout: Option<Duration>,
    /// Semantic tier (not used yet): the share of the semantic score in the hybrid
    /// ranking, a decimal string from "0" to "1" (default "0.5").
    #[serde(default)]
    pub hybrid_search_semantic_ratio: Option<String>,
    /// Semantic tier (not used yet): the largest cosine distance a semantic match
    /// may have, a decimal string from "0" to "2" (default "1.0").
    #[serde(default)]
    pub semantic_distance_threshold: Option<String>,
}

impl OptimizerConfig {
    /// How many tools `find_tool` returns at most.
    pub fn max_tools(&self) -> usize {
        self.max_tools_to_return
            .unwrap_or(DEFAULT_MAX_TOOLS_TO_RETURN)
    }

    /// The semantic-tier keys that are set (none of them is used yet).
    pub fn semantic_keys(&self) -> Vec<&'static str> {
        let set = [
            ("embeddingService", self.embedding_service.is_some()),
            ("embeddingProvider", self.embedding_provider.is_some()),
            ("embeddingModel", self.embedding_model.is_some()),
            ("embeddingHeaders", !self.embedding_headers.is_empty()),
            (
                "embeddingServiceTimeout",
                self.embedding_service_timeout.is_some(),
            ),
            (
                "hybridSearchSemanticRatio",
                self.hybrid_search_semantic_ratio.is_some(),
            ),
            (
                "semanticDistanceThreshold",
                self.semantic_distance_threshold.is_some(),
            ),
        ];
        set.into_iter()
            .filter_map(|(key, on)| on.then_some(key))
            .collect()
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        const AT: &str = "optimizer";
        if let Some(n) = self.max_tools_to_return
            && !(1..=MAX_TOOLS_TO_RETURN).contains(&n)
        {
            errors.push(format!(
                "{AT}.maxToolsToReturn must be between 1 and {MAX_TOOLS_TO_RETURN}, not {n}"
            ));
        }
        if let Some(url) = &self.embedding_service
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            errors.push(format!(
                "{AT}.embeddingService must be an http:// or https:// URL"
            ));
        }
        if self.embedding_service.is_none() {
            for (key, set) in [
                ("embeddingProvider", self.embedding_provider.is_some()),
                ("embeddingModel", self.embedding_model.is_some()),
                ("embeddingHeaders", !self.embedding_headers.is_empty()),
            ] {
                if set {
                    errors.push(format!("{AT}.{key} needs {AT}.embeddingService"));
                }
            }
        }
        if self.embedding_model.as_deref().is_some_and(str::is_empty) {
            errors.push(format!("{AT}.embeddingModel must not be empty"));
        }
        if !self.embedding_headers.is_empty()
            && self.embedding_provider != Some(EmbeddingProvider::Openai)
        {
            errors.push(format!(
                "{AT}.embeddingHeaders is only sent to embeddingProvider openai"
            ));
        }
        if self.embedding_headers.len() > MAX_EMBEDDING_HEADERS {
            errors.push(format!(
                "{AT}.embeddingHeaders must have at most {MAX_EMBEDDING_HEADERS} entries, not {}",
                self.embedding_headers.len()
            ));
        }
        if self
            .embedding_headers
            .keys()
            .any(|name| http::HeaderName::from_bytes(name.as_bytes()).is_err())
        {
            errors.push(format!(
                "{AT}.embeddingHeaders has a key that is not an HTTP header name"
            ));
        }
        if self.embedding_service_timeout.is_some_and(|d| d.is_zero()) {
            errors.push(format!(
                "{AT}.embeddingServiceTimeout must be greater than 0"
            ));
        }
        for (key, value, max) in [
            (
                "hybridSearchSemanticRatio",
                &self.hybrid_search_semantic_ratio,
                1.0,
            ),
            (
                "semanticDistanceThreshold",
                &self.semantic_distance_threshold,
                2.0,
            ),
        ] {
            if let Some(value) = value
                && !value
                    .trim()
                    .parse::<f64>()
                    .is_ok_and(|v| (0.0..=max).contains(&v))
            {
                errors.push(format!(
                    "{AT}.{key} must be a decimal string from 0 to {max}"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<String> {
        let config: OptimizerConfig = serde_yaml_ng::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        config.validate(&mut errors);
        errors
    }

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(OptimizerConfig::default().max_tools(), 8);
        assert!(errors("maxToolsToReturn: 50").is_empty());
        assert_eq!(
            errors("maxToolsToReturn: 0"),
            ["optimizer.maxToolsToReturn must be between 1 and 50, not 0"]
        );
        assert_eq!(
            errors("maxToolsToReturn: 51"),
            ["optimizer.maxToolsToReturn must be between 1 and 50, not 51"]
        );
    }

    #[test]
    fn semantic_keys_are_validated_and_listed() {
        let ok = "embeddingService: http://127.0.0.1:8080\nembeddingProvider: openai\n\
                  embeddingModel: m\nembeddingHeaders: {X-Key: v}\nembeddingServiceTimeout: 5s\n\
                  hybridSearchSemanticRatio: \"0.7\"\nsemanticDistanceThreshold: \"1.0\"";
        assert!(errors(ok).is_empty(), "{:?}", errors(ok));
        let config: OptimizerConfig = serde_yaml_ng::from_str(ok).unwrap();
        assert_eq!(config.semantic_keys().len(), 7);
        assert!(OptimizerConfig::default().semantic_keys().is_empty());
        let bad = errors(
            "embeddingService: ftp://x\nembeddingHeaders: {X-Key: v}\nembeddingProvider: tei\n\
             embeddingServiceTimeout: 0s\nhybridSearchSemanticRatio: \"1.5\"\n\
             semanticDistanceThreshold: \"far\"",
        );
        assert_eq!(
            bad,
            [
                "optimizer.embeddingService must be an http:// or https:// URL",
                "optimizer.embeddingHeaders is only sent to embeddingProvider openai",
                "optimizer.embeddingServiceTimeout must be greater than 0",
                "optimizer.hybridSearchSemanticRatio must be a decimal string from 0 to 1",
                "optimizer.semanticDistanceThreshold must be a decimal string from 0 to 2",
            ]
        );
        assert_eq!(
            errors("embeddingModel: m"),
            ["optimizer.embeddingModel needs optimizer.embeddingService"]
        );
    }
}
