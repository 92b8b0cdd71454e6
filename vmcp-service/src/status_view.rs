//! What one caller of the status routes (`/status`, `/ui`, `/ui/events`) may see.
//!
//! An operator (`status.operators`), or anyone when the routes want no token, sees
//! the whole gateway. Any other caller sees what its own lists would show: the
//! advertised tools, prompts, resources and templates its Cedar admission admits
//! (every advertised one without authorization), and only the backends serving
//! those. So a tool the caller may not call is as absent from `/ui` as from its
//! `tools/list`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use vmcp_layers::auth::RequiredClaim;
use vmcp_layers::authz::cedar::CedarAuthorizer;
use vmcp_layers::context::{Admission, Identity, ListKind, ToolAnnotations};

use crate::aggregator::Aggregator;
use crate::catalog::Catalog;
use crate::config::{Authz, VmcpConfig};

/// What one rendering shows.
pub(crate) enum View {
    /// Everything.
    Full,
    /// What the caller's lists show; `None`: no authorization, every advertised item.
    Caller(Option<Arc<dyn Admission>>),
}

impl View {
    /// Whether this is the operator's view.
    pub(crate) fn is_full(&self) -> bool {
        matches!(self, View::Full)
    }

    fn admits(&self, kind: ListKind, item: impl FnOnce(&dyn Admission) -> bool) -> bool {
        match self {
            View::Full | View::Caller(None) => true,
            View::Caller(Some(a)) => !a.list_hidden(kind) && item(&**a),
        }
    }

    /// Whether a tool of the catalog (`advertised`: not hidden by a filter) is shown.
    pub(crate) fn tool(&self, catalog: &Catalog, tool: &Tool, advertised: bool) -> bool {
        self.is_full()
            || (advertised
                && self.admits(ListKind::Tools, |a| {
                    crate::visibility::tool(a, catalog, tool)
                }))
    }

    /// Whether the catalog's tool (a backend's or a composite) called `name` is
    /// shown; an unknown name is not.
    pub(crate) fn tool_named(&self, catalog: &Catalog, name: &str) -> bool {
        match (catalog.tool_any(name), catalog.local_tool(name)) {
            (Some(entry), _) => self.tool(catalog, &entry.tool, entry.advertised),
            (None, Some(tool)) => self.tool(catalog, tool, true),
            (None, None) => self.is_full(),
        }
    }

    /// Whether a prompt is shown.
    pub(crate) fn prompt(&self, catalog: &Catalog, prompt: &Prompt) -> bool {
        self.admits(ListKind::Prompts, |a| {
            crate::visibility::prompt(a, catalog, prompt)
        })
    }

    /// Whether a resource is shown.
    pub(crate) fn resource(&self, catalog: &Catalog, resource: &Resource) -> bool {
        self.admits(ListKind::Resources, |a| {
            crate::visibility::resource(a, catalog, resource)
        })
    }

    /// Whether a resource template is shown.
    pub(crate) fn template(&self, catalog: &Catalog, template: &ResourceTemplate) -> bool {
        self.admits(ListKind::ResourceTemplates, |a| {
            crate::visibility::template(a, catalog, template)
        })
    }

    /// The backends shown: `None` for all of them, else those serving something
    /// this view shows.
    pub(crate) fn backends(&self, catalog: &Catalog) -> Option<BTreeSet<Arc<str>>> {
        if self.is_full() {
            return None;
        }
        let mut out = BTreeSet::new();
        for entry in catalog.tool_entries() {
            if self.tool(catalog, &entry.tool, entry.advertised) {
                out.insert(entry.route.backend.clone());
            }
        }
        for prompt in catalog.prompts() {
            if let Some(entry) = catalog.prompt(&prompt.name)
                && self.prompt(catalog, prompt)
            {
                out.insert(entry.route.backend.clone());
            }
        }
        for resource in catalog.resources() {
            if let Some(owner) = catalog.resource_owner(&resource.uri)
                && self.resource(catalog, resource)
            {
                out.insert(owner.clone());
            }
        }
        for template in catalog.templates() {
            if let Some(owner) = catalog.completion_owner_for_resource(&template.uri_template)
                && self.template(catalog, template)
            {
                out.insert(owner.clone());
            }
        }
        Some(out)
    }
}

/// Admits nothing: the view of a caller whose policies could not be built.
struct Nothing;

impl Admission for Nothing {
    fn list_hidden(&self, _: ListKind) -> bool {
        true
    }
    fn tool(&self, _: &str, _: Option<&str>, _: &ToolAnnotations) -> bool {
        false
    }
    fn tool_call(
        &self,
        _: &str,
        _: Option<&str>,
        _: &ToolAnnotations,
        _: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        false
    }
    fn prompt(&self, _: &str, _: Option<&str>) -> bool {
        false
    }
    fn resource(&self, _: &str, _: Option<&str>) -> bool {
        false
    }
}

/// What the status routes need to decide a caller's view.
pub(crate) struct Scope {
    aggregator: Arc<Aggregator>,
    /// Set when the routes want the token; `None`: everyone sees everything.
    callers: Option<Callers>,
}

struct Callers {
    operators: Option<RequiredClaim>,
    /// The Cedar authorizer of the configuration it was built from (the
    /// aggregator's configuration changes on reload).
    authorizer: Mutex<Option<BuiltFrom>>,
}

/// A configuration and the Cedar authorizer built from it (none without authz).
type BuiltFrom = (Arc<VmcpConfig>, Option<Arc<CedarAuthorizer>>);

impl Scope {
    /// The scope of the status routes of `aggregator`'s gateway: per caller when
    /// they want the token.
    pub(crate) fn new(aggregator: Arc<Aggregator>) -> Self {
        let config = aggregator.config();
        let callers = config.status_requires_auth().then(|| Callers {
            operators: config.status.operators.as_ref().map(|o| o.required()),
            authorizer: Mutex::new(None),
        });
        Self {
            aggregator,
            callers,
        }
    }

    /// The view of `identity` (as authenticated by the routes' guard) now.
    pub(crate) fn view(&self, identity: Option<&Arc<Identity>>) -> View {
        let Some(callers) = &self.callers else {
            return View::Full;
        };
        let Some(identity) = identity else {
            // The guard authenticates every request; without an identity show nothing.
            return View::Caller(Some(Arc::new(Nothing)));
        };
        if callers
            .operators
            .as_ref()
            .is_some_and(|o| o.admits(identity))
        {
            return View::Full;
        }
        match callers.authorizer(&self.aggregator.config()) {
            Ok(None) => View::Caller(None),
            Ok(Some(authorizer)) => View::Caller(Some(
                vmcp_layers::authz::admission(authorizer, identity.clone()).0,
            )),
            Err(()) => View::Caller(Some(Arc::new(Nothing))),
        }
    }
}

impl Callers {
    /// The authorizer `config` asks for (`Err` when its policies do not load).
    fn authorizer(&self, config: &Arc<VmcpConfig>) -> Result<Option<Arc<CedarAuthorizer>>, ()> {
        let mut cached = self.authorizer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((built_from, authorizer)) = &*cached
            && Arc::ptr_eq(built_from, config)
        {
            return Ok(authorizer.clone());
        }
        let authz = config
            .incoming_auth
            .as_ref()
            .and_then(|a| a.authz.as_ref())
            .and_then(|a| a.authorization());
        let authorizer = match authz {
            None | Some(Authz::None) => None,
            Some(Authz::Cedar(authz)) => Some(Arc::new(
                authz
                    .authorizer("incomingAuth.authz", config.name.as_deref())
                    .map_err(|e| {
                        tracing::error!("status routes: the Cedar policies do not load: {e}");
                    })?,
            )),
        };
        *cached = Some((config.clone(), authorizer.clone()));
        Ok(authorizer)
    }
}

/// The caller of one status request, put there by the routes' guard.
#[derive(Clone)]
pub(crate) struct Viewer {
    pub(crate) scope: Arc<Scope>,
    pub(crate) identity: Option<Arc<Identity>>,
}

impl Viewer {
    /// What this caller may see now.
    pub(crate) fn view(&self) -> View {
        self.scope.view(self.identity.as_ref())
    }
}
