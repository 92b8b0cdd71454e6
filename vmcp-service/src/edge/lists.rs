//! List pages served as bytes: each page of the catalog is serialized once per
//! catalog version (and page size), then every request for it copies bytes.
//!
//! Only unfiltered lists come here (per-caller filtering stays with the handler), so
//! a page is the same for every caller. Cursors are the handler's
//! ([`crate::pagination`]), so a cursor from either side works on the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rmcp::ErrorData;
use rmcp::model::{
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    ServerResult,
};
use vmcp_layers::context::ListKind;

use crate::catalog::Catalog;
use crate::pagination::page;

/// Pages kept per catalog version; a client can name any cursor, so the cache is
/// bounded and simply refilled when full.
const MAX_PAGES: usize = 256;

/// The serialized pages of one catalog version.
#[derive(Default)]
pub(super) struct PageCache {
    current: Mutex<Option<Pages>>,
}

struct Pages {
    /// The catalog they were cut from (compared by identity: a rebuilt catalog is a
    /// new `Arc`).
    catalog: Arc<Catalog>,
    page_size: usize,
    /// By list, cursor, and whether shaped for a pre-2026-07-28 peer.
    pages: HashMap<(ListKind, Option<Box<str>>, bool), Bytes>,
}

impl PageCache {
    /// The serialized `result` of one page, or the handler's error for a bad cursor;
    /// `legacy`: as rmcp shapes it for a pre-2026-07-28 peer.
    pub(super) fn page(
        &self,
        catalog: &Arc<Catalog>,
        kind: ListKind,
        cursor: Option<&str>,
        page_size: usize,
        legacy: bool,
    ) -> Result<Bytes, ErrorData> {
        let key = (kind, cursor.map(Into::into), legacy);
        {
            let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pages) = current
                .as_ref()
                .filter(|p| Arc::ptr_eq(&p.catalog, catalog) && p.page_size == page_size)
                && let Some(bytes) = pages.pages.get(&key)
            {
                return Ok(bytes.clone());
            }
        }
        // Serialized outside the lock; two callers may race to fill the same page.
        let bytes = serialize(catalog, kind, cursor, page_size, legacy)?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = current
            .as_ref()
            .is_none_or(|p| !Arc::ptr_eq(&p.catalog, catalog) || p.page_size != page_size);
        if fresh {
            *current = Some(Pages {
                catalog: catalog.clone(),
                page_size,
                pages: HashMap::new(),
            });
        }
        if let Some(pages) = current.as_mut() {
            if pages.pages.len() >= MAX_PAGES {
                pages.pages.clear();
            }
            pages.pages.insert(key, bytes.clone());
        }
        Ok(bytes)
    }
}

/// One page as the handler builds it (no TTL, private cache scope), serialized.
fn serialize(
    catalog: &Catalog,
    kind: ListKind,
    cursor: Option<&str>,
    page_size: usize,
    legacy: bool,
) -> Result<Bytes, ErrorData> {
    // Unfiltered pages only: the merged hints of the catalog's sources (SEP-2549).
    let hint = catalog.hint(kind);
    let mut result = match kind {
        ListKind::Tools => {
            let (items, next) = page(
                catalog.tools(),
                |t| t.name.as_ref(),
                kind,
                cursor,
                page_size,
            )?;
            let mut result = ListToolsResult::with_all_items(items)
                .with_ttl_ms(hint.ttl_ms)
                .with_cache_scope(hint.scope());
            result.next_cursor = next;
            ServerResult::ListToolsResult(result)
        }
        ListKind::Prompts => {
            let (items, next) = page(
                catalog.prompts(),
                |p| p.name.as_str(),
                kind,
                cursor,
                page_size,
            )?;
            let mut result = ListPromptsResult::with_all_items(items)
                .with_ttl_ms(hint.ttl_ms)
                .with_cache_scope(hint.scope());
            result.next_cursor = next;
            ServerResult::ListPromptsResult(result)
        }
        ListKind::Resources => {
            let (items, next) = page(
                catalog.resources(),
                |r| r.uri.as_str(),
                kind,
                cursor,
                page_size,
            )?;
            let mut result = ListResourcesResult::with_all_items(items)
                .with_ttl_ms(hint.ttl_ms)
                .with_cache_scope(hint.scope());
            result.next_cursor = next;
            ServerResult::ListResourcesResult(result)
        }
        ListKind::ResourceTemplates => {
            let (items, next) = page(
                catalog.templates(),
                |t| t.uri_template.as_str(),
                kind,
                cursor,
                page_size,
            )?;
            let mut result = ListResourceTemplatesResult::with_all_items(items)
                .with_ttl_ms(hint.ttl_ms)
                .with_cache_scope(hint.scope());
            result.next_cursor = next;
            ServerResult::ListResourceTemplatesResult(result)
        }
    };
    if legacy {
        result = super::session::for_legacy_peer(result);
    }
    serde_json::to_vec(&result)
        .map(Bytes::from)
        .map_err(|e| ErrorData::internal_error(format!("could not serialize a page: {e}"), None))
}
