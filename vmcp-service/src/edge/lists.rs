//! List pages served as bytes: each page of the catalog is serialized once per
//! catalog version (and page size), then every request for it copies bytes.
//!
//! A list filtered per caller is cut from the items the caller's admission admits,
//! as the handler cuts it (filter, then page, private cache scope). Its pages are
//! kept by *view*: the set of admitted items, as a bit mask over the catalog's list.
//! Callers who see the same items share pages, whoever they are; deciding the mask
//! costs one cached decision per item, never a serialization, and a caller whose
//! admission has a stable key decides it once per catalog version. Cursors are the
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
use vmcp_layers::context::{Admission, AdmissionKey, ListKind};

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
    /// The views of admissions whose answers are stable ([`Admission::stable_key`]),
    /// by list: a caller's next list of this catalog costs one lookup, not one
    /// decision per item. The keys hold the caller's identity; they go with the
    /// catalog version, or all at once when `MAX_VIEWS` are kept.
    views: HashMap<(ListKind, AdmissionKey), Box<[u64]>>,
}

/// Views kept per catalog version (callers that listed since it changed).
const MAX_VIEWS: usize = 4096;

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
        let stable = admission
            .and_then(|a| a.stable_key())
            .map(|key| (kind, key));
        let mut mask = None;
        {
            let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pages) = current
                .as_ref()
                .filter(|p| Arc::ptr_eq(&p.catalog, catalog) && p.page_size == page_size)
            {
                mask = stable
                    .as_ref()
                    .and_then(|key| pages.views.get(key).cloned());
                if admission.is_none() || mask.is_some() {
                    let key = (kind, cursor.map(Into::into), legacy, mask);
                    if let Some(bytes) = pages.pages.get(&key) {
                        return Ok(bytes.clone());
                    }
                    mask = key.3;
                }
            }
        }
        // Decided outside the lock, as the page is serialized.
        let decided = admission.is_some() && mask.is_none();
        let mask = mask.or_else(|| admission.map(|a| view(a, catalog, kind)));
        let key = (kind, cursor.map(Into::into), legacy, mask);
        if decided && let Some(bytes) = self.kept_page(catalog, page_size, &key, stable.as_ref()) {
            return Ok(bytes);
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
                views: HashMap::new(),
            });
        }
        if let Some(pages) = current.as_mut() {
            if pages.pages.len() >= MAX_PAGES {
                pages.pages.clear();
            }
            if let (Some(stable), Some(mask)) = (stable, &key.3) {
                pages.remember(stable, mask);
            }
            pages.pages.insert(key, bytes.clone());
        }
        Ok(bytes)
    }

    /// A page already kept for a view just decided (another caller's with the same
    /// view filled it), the view remembered for `stable`.
    fn kept_page(
        &self,
        catalog: &Arc<Catalog>,
        page_size: usize,
        key: &PageKey,
        stable: Option<&(ListKind, AdmissionKey)>,
    ) -> Option<Bytes> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let pages = current
            .as_mut()
            .filter(|p| Arc::ptr_eq(&p.catalog, catalog) && p.page_size == page_size)?;
        let bytes = pages.pages.get(key).cloned()?;
        if let (Some(stable), Some(mask)) = (stable, &key.3) {
            pages.remember(stable.clone(), mask);
        }
        Some(bytes)
    }
}

impl Pages {
    fn remember(&mut self, stable: (ListKind, AdmissionKey), mask: &[u64]) {
        if self.views.len() >= MAX_VIEWS {
            self.views.clear();
        }
        self.views.insert(stable, mask.into());
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rmcp::model::Tool;
    use vmcp_layers::context::ToolAnnotations;

    use super::*;
    use crate::backend::BackendCapabilities;

    /// Admits the tools whose name contains `admits`, counting its decisions.
    struct Counting {
        admits: &'static str,
        key: Option<AdmissionKey>,
        decisions: AtomicUsize,
    }

    impl Counting {
        fn new(admits: &'static str, key: Option<AdmissionKey>) -> Self {
            Self {
                admits,
                key,
                decisions: AtomicUsize::new(0),
            }
        }
    }

    impl Admission for Counting {
        fn list_hidden(&self, _: ListKind) -> bool {
            false
        }
        fn tool(&self, name: &str, _: Option<&str>, _: &ToolAnnotations) -> bool {
            self.decisions.fetch_add(1, Ordering::Relaxed);
            name.contains(self.admits)
        }
        fn tool_call(
            &self,
            _: &str,
            _: Option<&str>,
            _: &ToolAnnotations,
            _: &serde_json::Map<String, serde_json::Value>,
        ) -> bool {
            unreachable!("lists decide without arguments")
        }
        fn prompt(&self, _: &str, _: Option<&str>) -> bool {
            true
        }
        fn resource(&self, _: &str, _: Option<&str>) -> bool {
            true
        }
        fn stable_key(&self) -> Option<AdmissionKey> {
            self.key.clone()
        }
    }

    fn catalog() -> Arc<Catalog> {
        let config = crate::config::load_str("backends: [{name: a, url: 'http://h'}]")
            .unwrap()
            .config;
        let tool = |name: &str| Tool::new(name.to_owned(), "d", Arc::new(serde_json::Map::new()));
        let caps = BackendCapabilities {
            tools: vec![tool("red"), tool("blue"), tool("green")],
            ..Default::default()
        };
        Arc::new(Catalog::build(&config, vec![("a".into(), caps)]).0)
    }

    fn names(page: &Bytes) -> Vec<String> {
        let page: serde_json::Value = serde_json::from_slice(page).unwrap();
        page["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_stable_admissions_view_is_decided_once_per_catalog_and_never_shared() {
        let cache = PageCache::default();
        let catalog = catalog();
        let policies: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
        let key = |subject: &Arc<dyn std::any::Any + Send + Sync>| {
            Some(AdmissionKey::new(policies.clone(), subject.clone()))
        };
        let (alice, bob): (
            Arc<dyn std::any::Any + Send + Sync>,
            Arc<dyn std::any::Any + Send + Sync>,
        ) = (Arc::new(1u8), Arc::new(2u8));
        let red = Counting::new("red", key(&alice));
        let list = |admission: &dyn Admission, catalog: &Arc<Catalog>| {
            names(
                &cache
                    .page(catalog, ListKind::Tools, None, 100, false, Some(admission))
                    .unwrap(),
            )
        };
        assert_eq!(list(&red, &catalog), ["a_red"]);
        assert_eq!(red.decisions.load(Ordering::Relaxed), 3);
        assert_eq!(list(&red, &catalog), ["a_red"]);
        assert_eq!(
            red.decisions.load(Ordering::Relaxed),
            3,
            "the view was kept"
        );

        // Another subject under the same policies is decided for itself, even when
        // its answers differ from the kept view's.
        let blue = Counting::new("blue", key(&bob));
        assert_eq!(list(&blue, &catalog), ["a_blue"]);
        assert_eq!(blue.decisions.load(Ordering::Relaxed), 3);
        // And the same subject under other policies (a reload).
        let reloaded = Counting::new(
            "green",
            Some(AdmissionKey::new(Arc::new(()), alice.clone())),
        );
        assert_eq!(list(&reloaded, &catalog), ["a_green"]);

        // Without a stable key, every list decides.
        let unstable = Counting::new("red", None);
        list(&unstable, &catalog);
        list(&unstable, &catalog);
        assert_eq!(unstable.decisions.load(Ordering::Relaxed), 6);

        // A new catalog version decides again.
        let next = self::catalog();
        assert_eq!(list(&red, &next), ["a_red"]);
        assert_eq!(red.decisions.load(Ordering::Relaxed), 6);
        // Unfiltered pages are untouched by views.
        let all = cache
            .page(&next, ListKind::Tools, None, 100, false, None)
            .unwrap();
        assert_eq!(names(&all), ["a_blue", "a_green", "a_red"]);
    }
}
