//! List pages served as bytes: each page of the catalog is serialized once per
//! catalog version (and page size), then every request for it copies bytes.
//!
//! A list filtered per caller is cut from the items the caller's admission admits,
//! as the handler cuts it (filter, then page, private cache scope). Its pages are
//! kept by *view*: the set of admitted items, as a bit mask over the catalog's list.
//! Callers who see the same items share pages, whoever they are; deciding the mask
//! costs one cached decision per item, never a serialization. Cursors are the
//! handler's ([`crate::pagination`]), so a cursor from either side works on the
//! other.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rmcp::ErrorData;
use rmcp::model::{
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    ServerResult,
};
use vmcp_layers::context::{Admission, ListKind};

use crate::catalog::Catalog;
use crate::pagination::page;
use crate::visibility;

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
    /// By list, cursor, whether shaped for a pre-2026-07-28 peer, and the view
    /// (`None`: unfiltered; else the admitted items' bit mask).
    pages: HashMap<PageKey, Bytes>,
}

type PageKey = (ListKind, Option<Box<str>>, bool, Option<Box<[u64]>>);

/// Which of a list's items an admission admits: bit `i` for item `i`.
fn view(admission: &dyn Admission, catalog: &Catalog, kind: ListKind) -> Box<[u64]> {
    let len = match kind {
        ListKind::Tools => catalog.tools().len(),
        ListKind::Prompts => catalog.prompts().len(),
        ListKind::Resources => catalog.resources().len(),
        ListKind::ResourceTemplates => catalog.templates().len(),
    };
    let mut mask = vec![0u64; len.div_ceil(64)].into_boxed_slice();
    if admission.list_hidden(kind) {
        return mask;
    }
    let mut set = |i: usize, admitted: bool| {
        if admitted {
            mask[i / 64] |= 1 << (i % 64);
        }
    };
    match kind {
        ListKind::Tools => {
            for (i, item) in catalog.tools().iter().enumerate() {
                set(i, visibility::tool(admission, catalog, item));
            }
        }
        ListKind::Prompts => {
            for (i, item) in catalog.prompts().iter().enumerate() {
                set(i, visibility::prompt(admission, catalog, item));
            }
        }
        ListKind::Resources => {
            for (i, item) in catalog.resources().iter().enumerate() {
                set(i, visibility::resource(admission, catalog, item));
            }
        }
        ListKind::ResourceTemplates => {
            for (i, item) in catalog.templates().iter().enumerate() {
                set(i, visibility::template(admission, catalog, item));
            }
        }
    }
    mask
}

/// The items of `items` whose bit is set in `mask`, in order.
fn admitted<T: Clone>(items: &[T], mask: &[u64]) -> Vec<T> {
    items
        .iter()
        .enumerate()
        .filter(|(i, _)| mask[i / 64] & (1 << (i % 64)) != 0)
        .map(|(_, item)| item.clone())
        .collect()
}

impl PageCache {
    /// The serialized `result` of one page, or the handler's error for a bad cursor;
    /// `legacy`: as rmcp shapes it for a pre-2026-07-28 peer; `admission`: the
    /// caller's, whose view of the list the page is cut from.
    pub(super) fn page(
        &self,
        catalog: &Arc<Catalog>,
        kind: ListKind,
        cursor: Option<&str>,
        page_size: usize,
        legacy: bool,
        admission: Option<&dyn Admission>,
    ) -> Result<Bytes, ErrorData> {
        let mask = admission.map(|a| view(a, catalog, kind));
        let key = (kind, cursor.map(Into::into), legacy, mask);
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
        let bytes = serialize(catalog, kind, cursor, page_size, legacy, key.3.as_deref())?;
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

/// One page as the handler builds it, serialized: the catalog's merged hints
/// (SEP-2549), private when the list is the caller's own view (`mask`).
fn serialize(
    catalog: &Catalog,
    kind: ListKind,
    cursor: Option<&str>,
    page_size: usize,
    legacy: bool,
    mask: Option<&[u64]>,
) -> Result<Bytes, ErrorData> {
    let mut hint = catalog.hint(kind);
    if mask.is_some() {
        hint.public = false;
    }
    fn cut<'a, T: Clone>(items: &'a [T], mask: Option<&[u64]>) -> Cow<'a, [T]> {
        match mask {
            None => Cow::Borrowed(items),
            Some(mask) => Cow::Owned(admitted(items, mask)),
        }
    }
    let mut result = match kind {
        ListKind::Tools => {
            let (items, next) = page(
                &cut(catalog.tools(), mask),
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
                &cut(catalog.prompts(), mask),
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
                &cut(catalog.resources(), mask),
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
                &cut(catalog.templates(), mask),
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
