//! SEP-2549 cache hints of the merged lists: how long a client may keep a list
//! (`ttlMs`) and whether it may share it (`cacheScope`).
//!
//! A merged list is only as fresh as its stalest source, and only as shareable as
//! its most private one: its `ttlMs` is the minimum of its sources' and it is
//! public only when every source said public. A source that gave no hint (every
//! 2025-11-25 backend) counts as `0`/private. A list the caller's admission
//! filtered is private whatever the sources said (see the handler).

use rmcp::model::CacheScope;
use vmcp_layers::context::ListKind;

/// One list's hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheHint {
    /// How long the list may be kept, in milliseconds.
    pub ttl_ms: u64,
    /// Whether any client (or intermediary) may reuse it.
    pub public: bool,
}

impl CacheHint {
    /// The hint of a backend's merged pages; a missing part counts as `0`/private.
    pub fn new(ttl_ms: Option<u64>, scope: Option<CacheScope>) -> Self {
        Self {
            ttl_ms: ttl_ms.unwrap_or(0),
            public: matches!(scope, Some(CacheScope::Public)),
        }
    }

    /// The hint of a list merged from `self`'s and `other`'s sources.
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        Self {
            ttl_ms: self.ttl_ms.min(other.ttl_ms),
            public: self.public && other.public,
        }
    }

    /// The scope to answer with.
    pub fn scope(self) -> CacheScope {
        if self.public {
            CacheScope::Public
        } else {
            CacheScope::Private
        }
    }
}

/// The hints of a backend's four lists; `None` for a list it does not offer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListHints {
    /// `tools/list`.
    pub tools: Option<CacheHint>,
    /// `prompts/list`.
    pub prompts: Option<CacheHint>,
    /// `resources/list`.
    pub resources: Option<CacheHint>,
    /// `resources/templates/list`.
    pub templates: Option<CacheHint>,
}

impl ListHints {
    /// The hints of lists merged from every backend in `sources`.
    pub fn merged<'a>(sources: impl IntoIterator<Item = &'a ListHints>) -> Self {
        fn fold(a: Option<CacheHint>, b: Option<CacheHint>) -> Option<CacheHint> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.merge(b)),
                (a, b) => a.or(b),
            }
        }
        sources.into_iter().fold(Self::default(), |acc, h| Self {
            tools: fold(acc.tools, h.tools),
            prompts: fold(acc.prompts, h.prompts),
            resources: fold(acc.resources, h.resources),
            templates: fold(acc.templates, h.templates),
        })
    }

    /// The hint of one list; an empty list (no source) is `0`/private.
    pub fn get(&self, kind: ListKind) -> CacheHint {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources => self.resources,
            ListKind::ResourceTemplates => self.templates,
        }
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(ttl: u64, public: bool) -> Option<CacheHint> {
        Some(CacheHint {
            ttl_ms: ttl,
            public,
        })
    }

    #[test]
    fn merged_lists_take_the_minimum_ttl_and_the_most_private_scope() {
        let a = ListHints {
            tools: hint(5000, true),
            resources: hint(1000, true),
            ..Default::default()
        };
        let b = ListHints {
            tools: hint(2000, true),
            resources: hint(9000, false),
            prompts: hint(300, true),
            ..Default::default()
        };
        let merged = ListHints::merged([&a, &b]);
        assert_eq!(
            merged.get(ListKind::Tools),
            CacheHint {
                ttl_ms: 2000,
                public: true
            }
        );
        assert_eq!(
            merged.get(ListKind::Resources),
            CacheHint {
                ttl_ms: 1000,
                public: false
            }
        );
        // Only b offers prompts: a does not drag them down.
        assert_eq!(
            merged.get(ListKind::Prompts),
            CacheHint {
                ttl_ms: 300,
                public: true
            }
        );
        // Nobody offers templates.
        assert_eq!(
            merged.get(ListKind::ResourceTemplates),
            CacheHint::default()
        );
        // A source without hints (a Legacy backend) is 0/private.
        assert_eq!(CacheHint::new(None, None), CacheHint::default());
        assert_eq!(
            CacheHint::new(Some(7), Some(CacheScope::Public)).scope(),
            CacheScope::Public
        );
    }
}
