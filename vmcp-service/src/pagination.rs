//! Gateway-side pagination of list results with self-describing cursors.
//!
//! The gateway holds no iteration state (Modern requests are stateless), so a cursor
//! encodes its position: base64url (no padding) of `{"k": kind, "l": last key, "d":
//! items with that key already delivered}`. Lists are sorted by key, so a cursor
//! stays meaningful when a backend joins or leaves between pages, and counting
//! within a run of equal keys means a duplicate key at a page boundary is never
//! skipped.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::ErrorData;
use serde::{Deserialize, Serialize};
use vmcp_layers::context::ListKind;

/// The longest cursor accepted (characters).
pub(crate) const MAX_CURSOR_LEN: usize = 8192;

#[derive(Debug, Serialize, Deserialize)]
struct Position {
    k: ListKind,
    l: String,
    d: usize,
}

fn invalid(reason: &str) -> ErrorData {
    ErrorData::invalid_params(format!("invalid cursor: {reason}"), None)
}

fn decode(cursor: &str, kind: ListKind) -> Result<Position, ErrorData> {
    if cursor.len() > MAX_CURSOR_LEN {
        return Err(invalid("too long"));
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| invalid("not base64url"))?;
    let position: Position = serde_json::from_slice(&bytes).map_err(|_| invalid("malformed"))?;
    if position.k != kind {
        return Err(invalid("it belongs to another list"));
    }
    Ok(position)
}

fn encode(kind: ListKind, last: &str, delivered: usize) -> String {
    let json = serde_json::to_vec(&Position {
        k: kind,
        l: last.to_owned(),
        d: delivered,
    })
    .unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

/// One page of `items` (sorted by `key`) starting at `cursor`.
///
/// Returns the page and the next cursor, which is `None` at the end (never an empty
/// string: clients must treat `""` as a real cursor). A malformed, oversized or
/// wrong-verb cursor is `-32602`.
pub fn page<T: Clone>(
    items: &[T],
    key: impl Fn(&T) -> &str,
    kind: ListKind,
    cursor: Option<&str>,
    page_size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let page_size = page_size.max(1);
    let start = match cursor {
        None => 0,
        Some(cursor) => {
            let position = decode(cursor, kind)?;
            let first = items.partition_point(|item| key(item) < position.l.as_str());
            let past = items.partition_point(|item| key(item) <= position.l.as_str());
            // `d` is client-supplied: an overflow is a bad cursor, not a panic (debug)
            // or a wrapped, wrong page (release).
            first
                .checked_add(position.d)
                .ok_or_else(|| invalid("position out of range"))?
                .min(past)
        }
    };
    let end = start.saturating_add(page_size).min(items.len());
    let page = items[start..end].to_vec();
    let next = if end < items.len() {
        let last = key(&items[end - 1]);
        let run_start = items.partition_point(|item| key(item) < last);
        Some(encode(kind, last, end - run_start))
    } else {
        None
    };
    Ok((page, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_pages(items: &[&'static str], size: usize) -> Vec<Vec<&'static str>> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) =
                page(items, |s| s, ListKind::Tools, cursor.as_deref(), size).unwrap();
            out.push(page);
            match next {
                Some(c) => cursor = Some(c),
                None => return out,
            }
        }
    }

    #[test]
    fn pages_cover_everything_once_with_duplicate_keys_at_boundaries() {
        let items = ["a", "b", "b", "b", "c", "d"];
        let pages = all_pages(&items, 2);
        assert_eq!(pages, vec![vec!["a", "b"], vec!["b", "b"], vec!["c", "d"]]);
        let flat: Vec<_> = all_pages(&items, 4).concat();
        assert_eq!(flat, items);
    }

    #[test]
    fn no_cursor_after_the_last_page() {
        let (page1, next) = page(&["a", "b"], |s| s, ListKind::Tools, None, 2).unwrap();
        assert_eq!(page1, vec!["a", "b"]);
        assert_eq!(next, None);
        let (empty, next) = page::<&str>(&[], |s| s, ListKind::Tools, None, 2).unwrap();
        assert!(empty.is_empty() && next.is_none());
    }

    #[test]
    fn cursor_survives_items_joining_and_leaving() {
        let (_, next) = page(&["a", "c", "e"], |s| s, ListKind::Tools, None, 2).unwrap();
        let cursor = next.unwrap();
        // "b" joined before the cursor, "d" after it, "a" left: resume after "c".
        let (rest, _) = page(
            &["b", "c", "d", "e"],
            |s| s,
            ListKind::Tools,
            Some(&cursor),
            2,
        )
        .unwrap();
        assert_eq!(rest, vec!["d", "e"]);
    }

    #[test]
    fn bad_cursors_are_invalid_params() {
        let (_, next) = page(&["a", "b"], |s| s, ListKind::Tools, None, 1).unwrap();
        let cursor = next.unwrap();
        for bad in [
            "!!!".to_owned(),
            URL_SAFE_NO_PAD.encode("{}"),
            "x".repeat(MAX_CURSOR_LEN + 1),
        ] {
            let err = page(&["a"], |s| s, ListKind::Tools, Some(&bad), 1).unwrap_err();
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        }
        let err = page(&["a"], |s| s, ListKind::Prompts, Some(&cursor), 1).unwrap_err();
        assert!(err.message.contains("another list"));
    }

    #[test]
    fn a_delivered_count_that_overflows_is_invalid_params() {
        let cursor = encode(ListKind::Tools, "b", usize::MAX);
        let err = page(&["a", "b", "c"], |s| s, ListKind::Tools, Some(&cursor), 2).unwrap_err();
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        // A huge page size (config) cannot overflow either.
        let (all, next) = page(&["a", "b"], |s| s, ListKind::Tools, None, usize::MAX).unwrap();
        assert_eq!((all.len(), next), (2, None));
    }
}
