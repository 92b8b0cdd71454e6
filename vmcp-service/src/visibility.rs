//! What one caller may see of the catalog, for list filtering and for deciding
//! which change notifications reach it.
//!
//! The per-item predicates are the ones list answers use, so a session is told
//! about a change exactly when its next list answer would differ: a tool that only
//! identity A may call changing does not notify identity B, and B's session never
//! receives `resources/updated` for a URI it may not read.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use vmcp_layers::context::{Admission, Identity, ListKind};

use crate::catalog::{Catalog, annotations};

/// Whether `admission` admits this advertised tool.
pub(crate) fn tool(admission: &dyn Admission, catalog: &Catalog, tool: &Tool) -> bool {
    let backend = catalog.tool(&tool.name).map(|e| e.route.backend.clone());
    admission.tool(&tool.name, backend.as_deref(), &annotations(tool))
}

/// Whether `admission` admits this prompt.
pub(crate) fn prompt(admission: &dyn Admission, catalog: &Catalog, prompt: &Prompt) -> bool {
    let backend = catalog
        .prompt(&prompt.name)
        .map(|e| e.route.backend.clone());
    admission.prompt(&prompt.name, backend.as_deref())
}

/// Whether `admission` admits reading this resource.
pub(crate) fn resource(admission: &dyn Admission, catalog: &Catalog, resource: &Resource) -> bool {
    admission.resource(
        &resource.uri,
        catalog.resource_owner(&resource.uri).map(|b| &**b),
    )
}

/// Whether `admission` admits this template (decided on the template string).
pub(crate) fn template(
    admission: &dyn Admission,
    catalog: &Catalog,
    template: &ResourceTemplate,
) -> bool {
    let backend = catalog.completion_owner_for_resource(&template.uri_template);
    admission.resource(&template.uri_template, backend.map(|b| &**b))
}

/// The list kinds a change notification covers, as bit positions.
pub(crate) const TOOLS: u8 = 1;
pub(crate) const PROMPTS: u8 = 2;
pub(crate) const RESOURCES: u8 = 4;

/// One listener's view: its caller, what that caller may see (`None`: everything,
/// no authorization) and a fingerprint of each list it was last told about.
pub(crate) struct Visibility {
    identity: Option<Arc<Identity>>,
    state: Mutex<State>,
}

struct State {
    admission: Option<Arc<dyn Admission>>,
    /// Fingerprints of the admitted tools, prompts, resources+templates (kept
    /// only while there is an admission).
    seen: [u64; 3],
}

impl std::fmt::Debug for Visibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Visibility(..)")
    }
}

fn fingerprint<T: serde::Serialize>(
    items: &[T],
    hidden: bool,
    admitted: impl Fn(&T) -> bool,
) -> u64 {
    let mut hasher = DefaultHasher::new();
    if !hidden {
        for item in items.iter().filter(|item| admitted(item)) {
            // The whole item: a changed description is a change too.
            serde_json::to_vec(item)
                .unwrap_or_default()
                .hash(&mut hasher);
        }
    }
    hasher.finish()
}

fn fingerprints(a: &dyn Admission, catalog: &Catalog, bits: u8) -> [u64; 3] {
    let mut out = [0; 3];
    if bits & TOOLS != 0 {
        out[0] = fingerprint(catalog.tools(), a.list_hidden(ListKind::Tools), |t| {
            tool(a, catalog, t)
        });
    }
    if bits & PROMPTS != 0 {
        out[1] = fingerprint(catalog.prompts(), a.list_hidden(ListKind::Prompts), |p| {
            prompt(a, catalog, p)
        });
    }
    if bits & RESOURCES != 0 {
        let resources = fingerprint(
            catalog.resources(),
            a.list_hidden(ListKind::Resources),
            |r| resource(a, catalog, r),
        );
        let templates = fingerprint(
            catalog.templates(),
            a.list_hidden(ListKind::ResourceTemplates),
            |t| template(a, catalog, t),
        );
        out[2] = resources ^ templates.rotate_left(1);
    }
    out
}

/// Of the kinds in `bits`, those whose fingerprint moved; `seen` is updated.
fn moved(seen: &mut [u64; 3], now: [u64; 3], bits: u8) -> u8 {
    let mut out = 0;
    for (i, bit) in [TOOLS, PROMPTS, RESOURCES].into_iter().enumerate() {
        if bits & bit != 0 && seen[i] != now[i] {
            seen[i] = now[i];
            out |= bit;
        }
    }
    out
}

const ALL: u8 = TOOLS | PROMPTS | RESOURCES;

impl Visibility {
    /// The view of `identity` through `admission` over `catalog`, as of now.
    pub(crate) fn new(
        identity: Option<Arc<Identity>>,
        admission: Option<Arc<dyn Admission>>,
        catalog: &Catalog,
    ) -> Self {
        let seen = admission
            .as_deref()
            .map_or([0; 3], |a| fingerprints(a, catalog, ALL));
        Self {
            identity,
            state: Mutex::new(State { admission, seen }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The caller, when the session or stream was opened behind the layers.
    pub(crate) fn identity(&self) -> Option<&Arc<Identity>> {
        self.identity.as_ref()
    }

    /// Of the changed kinds in `bits`, those whose admitted list differs from what
    /// this listener last saw (and remember the new lists). Without authorization,
    /// all of `bits`.
    pub(crate) fn changed(&self, catalog: &Catalog, bits: u8) -> u8 {
        let mut state = self.state();
        let Some(admission) = state.admission.clone() else {
            return bits;
        };
        let now = fingerprints(&*admission, catalog, bits);
        moved(&mut state.seen, now, bits)
    }

    /// Decide with `admission` from now on (the policies were reloaded); the kinds
    /// whose admitted list is not what the listener last saw.
    pub(crate) fn readmit(&self, admission: Option<Arc<dyn Admission>>, catalog: &Catalog) -> u8 {
        let mut state = self.state();
        let had = state.admission.is_some();
        state.admission = admission.clone();
        match admission {
            Some(admission) => {
                let now = fingerprints(&*admission, catalog, ALL);
                if had {
                    moved(&mut state.seen, now, ALL)
                } else {
                    state.seen = now;
                    ALL
                }
            }
            None if had => ALL,
            None => 0,
        }
    }

    /// Whether this listener may read `uri` (served by `backend`).
    pub(crate) fn may_read(&self, uri: &str, backend: &str) -> bool {
        let admission = self.state().admission.clone();
        admission.is_none_or(|a| a.resource(uri, Some(backend)))
    }
}
