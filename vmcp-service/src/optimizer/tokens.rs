//! Token counts with the cl100k_base BPE (the tokenizer of the GPT-4 family), so
//! `token_metrics` reports what a model would be charged, not a character guess.

use std::sync::OnceLock;

use rmcp::model::Tool;
use tiktoken_rs::CoreBPE;

fn bpe() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| match tiktoken_rs::cl100k_base() {
        Ok(bpe) => Some(bpe),
        Err(e) => {
            tracing::warn!("the cl100k_base tokenizer did not load ({e}); token counts are 0");
            None
        }
    })
    .as_ref()
}

/// The tokens of `text`.
pub(crate) fn count(text: &str) -> usize {
    bpe().map_or(0, |bpe| bpe.encode_ordinary(text).len())
}

/// The tokens of a tool as `tools/list` would send it (its JSON).
pub(crate) fn tool(tool: &Tool) -> usize {
    serde_json::to_string(tool).map_or(0, |json| count(&json))
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_with_the_real_encoding() {
        // cl100k_base: "hello world" is two tokens; a character heuristic says ~3.
        assert_eq!(super::count("hello world"), 2);
        assert_eq!(super::count(""), 0);
    }
}
