//! The catalog: one aggregated, conflict-resolved view of every backend's tools,
//! resources, resource templates and prompts, with the route behind each name.
//!
//! A [`Catalog`] is immutable once built; the gateway swaps in a new one when the
//! backends change. Items are kept sorted by their key so list pages are stable and
//! lookups are a hash probe.

mod composite_problem;
pub(crate) mod conflict;
pub(crate) mod filter;
mod template;
mod view;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

use crate::backend::BackendCapabilities;
pub use crate::backend::hints::{CacheHint, ListHints};
use crate::config::VmcpConfig;
pub use composite_problem::CompositeProblem;
use conflict::{Claim, Naming};
pub use template::{TemplateError, UriTemplate};
pub(crate) use view::annotations;

/// Where a name leads: a backend and the backend's own name for the capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The owning backend.
    pub backend: Arc<str>,
    /// The backend's own name (tool or prompt name, or the URI itself).
    pub name: String,
}

/// A tool in the catalog.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// The tool as advertised (resolved name, overrides applied).
    pub tool: Tool,
    /// Where calls go.
    pub route: Route,
    /// False for tools hidden by filters: routable internally, invisible to clients.
    pub advertised: bool,
}

/// A prompt in the catalog.
#[derive(Debug, Clone)]
pub struct PromptEntry {
    /// The prompt as advertised.
    pub prompt: Prompt,
    /// Where `prompts/get` goes.
    pub route: Route,
}

/// A resource in the catalog (URIs are never rewritten).
#[derive(Debug, Clone)]
pub struct ResourceEntry {
    /// The resource as advertised by its owner.
    pub resource: Resource,
    /// The owning backend.
    pub backend: Arc<str>,
}

/// A resource template in the catalog (never rewritten).
#[derive(Debug, Clone)]
pub struct TemplateEntry {
    /// The template as advertised by its owner.
    pub template: ResourceTemplate,
    /// The owning backend.
    pub backend: Arc<str>,
    /// The compiled matcher for reads of expanded URIs.
    pub matcher: UriTemplate,
}

/// A name index of the catalog: foldhash, not SipHash, because every routed
/// request looks a name up (twice for a call) and SipHash cost it about 190
/// instructions a lookup; foldhash's per-map random seed keeps a backend's chosen
/// names from being made to collide.
type Index = HashMap<String, usize, foldhash::fast::RandomState>;

/// The aggregated, conflict-resolved view.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tools: Vec<ToolEntry>,
    tool_index: Index,
    advertised_tools: Vec<Tool>,
    prompts: Vec<PromptEntry>,
    prompt_index: Index,
    advertised_prompts: Vec<Prompt>,
    resources: Vec<ResourceEntry>,
    resource_index: Index,
    advertised_resources: Vec<Resource>,
    templates: Vec<TemplateEntry>,
    advertised_templates: Vec<ResourceTemplate>,
    completions: BTreeSet<Arc<str>>,
    backends: Vec<Arc<str>>,
    hints: ListHints,
    /// Tools the gateway serves itself (composite tools): advertised, never routed.
    local_tools: HashMap<String, Tool>,
}

/// What building a catalog produced besides the catalog.
#[derive(Debug, Clone, Default)]
pub struct BuildReport {
    /// Tool collisions left unresolved under `manual` (startup fails on these).
    pub unresolved: Vec<String>,
    /// Composite tools the backends' tool lists contradict (startup fails on those
    /// the backends that answered make certain).
    pub composites: Vec<CompositeProblem>,
}

impl Catalog {
    /// Build the catalog from what each backend reported.
    ///
    /// `reports` may come in any order; it is sorted by backend name first so the
    /// outcome does not depend on which backend answered first.
    pub(crate) fn build(
        config: &VmcpConfig,
        mut reports: Vec<(Arc<str>, BackendCapabilities)>,
    ) -> (Self, BuildReport) {
        reports.sort_by(|a, b| a.0.cmp(&b.0));
        let naming = Naming {
            strategy: config.strategy(),
            prefix_format: config.prefix_format(),
            priority_order: &config.aggregation.conflict_resolution_config.priority_order,
        };
        let mut catalog = Catalog {
            hints: ListHints::merged(reports.iter().map(|(_, caps)| &caps.hints)),
            ..Catalog::default()
        };
        let mut report = BuildReport::default();

        // Tools: overrides and visibility, then names over all of them (hidden ones
        // included: they stay routable).
        let mut prepared = Vec::new();
        for (backend, caps) in &mut reports {
            let mut tools = filter::prepare_tools(config, backend, std::mem::take(&mut caps.tools));
            tools.sort_by(|a, b| {
                a.tool
                    .name
                    .cmp(&b.tool.name)
                    .then(a.original.cmp(&b.original))
            });
            prepared.extend(tools.into_iter().map(|p| (backend.clone(), p)));
        }
        let claims: Vec<Claim<'_>> = prepared
            .iter()
            .map(|(backend, p)| Claim {
                backend,
                base: p.tool.name.as_ref(),
            })
            .collect();
        let resolution = conflict::resolve_tools(naming, &claims);
        report.unresolved = resolution.unresolved;
        for ((backend, p), name) in prepared.into_iter().zip(resolution.names) {
            let Some(name) = name else { continue };
            let mut tool = p.tool;
            tool.name = name.into();
            catalog.tools.push(ToolEntry {
                tool,
                route: Route {
                    backend,
                    name: p.original,
                },
                advertised: p.advertised,
            });
        }
        catalog.tools.sort_by(|a, b| a.tool.name.cmp(&b.tool.name));

        // Prompts.
        let mut prompts = Vec::new();
        for (backend, caps) in &mut reports {
            let mut list = std::mem::take(&mut caps.prompts);
            list.sort_by(|a, b| a.name.cmp(&b.name));
            prompts.extend(list.into_iter().map(|p| (backend.clone(), p)));
        }
        let claims: Vec<Claim<'_>> = prompts
            .iter()
            .map(|(backend, p)| Claim {
                backend,
                base: &p.name,
            })
            .collect();
        let resolution = conflict::resolve_prompts(naming, &claims);
        for ((backend, mut prompt), name) in prompts.into_iter().zip(resolution.names) {
            let Some(name) = name else { continue };
            let original = std::mem::replace(&mut prompt.name, name);
            catalog.prompts.push(PromptEntry {
                prompt,
                route: Route {
                    backend,
                    name: original,
                },
            });
        }
        catalog
            .prompts
            .sort_by(|a, b| a.prompt.name.cmp(&b.prompt.name));

        // Resources and templates: locators, never renamed; the earliest backend in
        // sorted order keeps a duplicate.
        let mut uri_owner: HashMap<String, Arc<str>> = HashMap::new();
        let mut template_owner: HashMap<String, Arc<str>> = HashMap::new();
        for (backend, caps) in &mut reports {
            for resource in std::mem::take(&mut caps.resources) {
                if let Some(owner) = uri_owner.get(&resource.uri) {
                    tracing::warn!(uri = %resource.uri, kept = %owner, dropped = %backend, "duplicate resource URI");
                    continue;
                }
                uri_owner.insert(resource.uri.clone(), backend.clone());
                catalog.resources.push(ResourceEntry {
                    resource,
                    backend: backend.clone(),
                });
            }
            for template in std::mem::take(&mut caps.templates) {
                if let Some(owner) = template_owner.get(&template.uri_template) {
                    tracing::warn!(template = %template.uri_template, kept = %owner, dropped = %backend, "duplicate resource template");
                    continue;
                }
                template_owner.insert(template.uri_template.clone(), backend.clone());
                match UriTemplate::parse(&template.uri_template) {
                    Ok(matcher) => catalog.templates.push(TemplateEntry {
                        template,
                        backend: backend.clone(),
                        matcher,
                    }),
                    Err(e) => {
                        tracing::warn!(backend = %backend, template = %template.uri_template, "resource template skipped: {e}")
                    }
                }
            }
            if caps.completions {
                catalog.completions.insert(backend.clone());
            }
            catalog.backends.push(backend.clone());
        }
        catalog
            .resources
            .sort_by(|a, b| a.resource.uri.cmp(&b.resource.uri));
        catalog
            .templates
            .sort_by(|a, b| a.template.uri_template.cmp(&b.template.uri_template));

        catalog.index();
        (catalog, report)
    }

    fn index(&mut self) {
        self.tool_index = self
            .tools
            .iter()
            .enumerate()
            // A backend tool a composite's name shadows is found by its route only.
            .filter(|(_, e)| !self.local_tools.contains_key(e.tool.name.as_ref()))
            .map(|(i, e)| (e.tool.name.to_string(), i))
            .collect();
        self.advertised_tools = self
            .tools
            .iter()
            .filter(|e| e.advertised)
            .map(|e| e.tool.clone())
            .chain(self.local_tools.values().cloned())
            .collect();
        self.advertised_tools.sort_by(|a, b| a.name.cmp(&b.name));
        self.prompt_index = self
            .prompts
            .iter()
            .enumerate()
            .map(|(i, e)| (e.prompt.name.clone(), i))
            .collect();
        self.advertised_prompts = self.prompts.iter().map(|e| e.prompt.clone()).collect();
        self.resource_index = self
            .resources
            .iter()
            .enumerate()
            .map(|(i, e)| (e.resource.uri.clone(), i))
            .collect();
        self.advertised_resources = self.resources.iter().map(|e| e.resource.clone()).collect();
        self.advertised_templates = self.templates.iter().map(|e| e.template.clone()).collect();
    }

    /// Advertised tools, sorted by name.
    pub fn tools(&self) -> &[Tool] {
        &self.advertised_tools
    }

    /// Advertised prompts, sorted by name.
    pub fn prompts(&self) -> &[Prompt] {
        &self.advertised_prompts
    }

    /// Resources, sorted by URI.
    pub fn resources(&self) -> &[Resource] {
        &self.advertised_resources
    }

    /// Resource templates, sorted by template string.
    pub fn templates(&self) -> &[ResourceTemplate] {
        &self.advertised_templates
    }

    /// Every tool entry, hidden ones included.
    pub fn tool_entries(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// A tool a client may call, by advertised name. Hidden tools are not found.
    pub fn tool(&self, name: &str) -> Option<&ToolEntry> {
        self.tool_any(name).filter(|e| e.advertised)
    }

    /// Any tool by resolved name, hidden ones included (for internal callers such as
    /// composite tools).
    pub fn tool_any(&self, name: &str) -> Option<&ToolEntry> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// Add tools the gateway serves itself (composite tools). A backend tool of the
    /// same name gives way: it is neither advertised nor routed under that name, so a
    /// composite never disappears because a backend started offering its name. It
    /// stays in the catalog, hidden, so composite steps naming it as
    /// `<backend>.<tool>` still reach it. Each such collision is returned.
    pub(crate) fn add_local_tools(&mut self, tools: Vec<Tool>) -> Vec<CompositeProblem> {
        let mut collisions = Vec::new();
        for tool in tools {
            let name = tool.name.to_string();
            for entry in self.tools.iter_mut().filter(|e| e.tool.name == name) {
                collisions.push(CompositeProblem::NameTaken {
                    composite: name.clone(),
                    backend: entry.route.backend.clone(),
                    tool: entry.route.name.clone(),
                });
                entry.advertised = false;
            }
            self.local_tools.insert(name, tool);
        }
        self.index();
        collisions
    }

    /// A tool the gateway serves itself (a composite tool), by name.
    pub fn local_tool(&self, name: &str) -> Option<&Tool> {
        self.local_tools.get(name)
    }

    /// A prompt by advertised name.
    pub fn prompt(&self, name: &str) -> Option<&PromptEntry> {
        self.prompt_index.get(name).map(|&i| &self.prompts[i])
    }

    /// The backend that serves `uri`: an exact resource first, then the first
    /// template (in sorted order) that matches.
    pub fn resource_owner(&self, uri: &str) -> Option<&Arc<str>> {
        if let Some(&i) = self.resource_index.get(uri) {
            return Some(&self.resources[i].backend);
        }
        self.templates
            .iter()
            .find(|t| t.matcher.matches(uri))
            .map(|t| &t.backend)
    }

    /// The backend that completes arguments of a resource reference: the exact
    /// template, then an exact resource, then a template matching the URI.
    pub fn completion_owner_for_resource(&self, uri: &str) -> Option<&Arc<str>> {
        self.templates
            .iter()
            .find(|t| t.template.uri_template == uri)
            .map(|t| &t.backend)
            .or_else(|| self.resource_owner(uri))
    }

    /// The SEP-2549 cache hint of one merged list (before per-caller filtering).
    pub fn hint(&self, kind: vmcp_layers::context::ListKind) -> CacheHint {
        self.hints.get(kind)
    }

    /// Whether `backend` serves `completion/complete`.
    pub fn completes(&self, backend: &str) -> bool {
        self.completions.contains(backend)
    }

    /// The backends that contributed to this catalog, sorted.
    pub fn backends(&self) -> &[Arc<str>] {
        &self.backends
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "d", Arc::new(serde_json::Map::new()))
    }

    fn caps(tools: &[&str], resources: &[&str], prompts: &[&str]) -> BackendCapabilities {
        BackendCapabilities {
            tools: tools.iter().map(|t| tool(t)).collect(),
            resources: resources
                .iter()
                .map(|u| Resource::new(u.to_string(), u.to_string()))
                .collect(),
            prompts: prompts
                .iter()
                .map(|p| Prompt::new(p.to_string(), None::<String>, None))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn build_is_independent_of_report_order() {
        let config = load_str("backends: [{name: a, url: 'http://h'}, {name: b, url: 'http://h'}]")
            .unwrap()
            .config;
        let r1 = vec![
            ("a".into(), caps(&["echo"], &["shared://x"], &["p"])),
            ("b".into(), caps(&["echo"], &["shared://x"], &["p"])),
        ];
        let mut r2 = r1.clone();
        r2.reverse();
        let (c1, _) = Catalog::build(&config, r1);
        let (c2, _) = Catalog::build(&config, r2);
        let names = |c: &Catalog| {
            c.tools()
                .iter()
                .map(|t| t.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&c1), vec!["a_echo", "b_echo"]);
        assert_eq!(names(&c1), names(&c2));
        assert_eq!(c1.resource_owner("shared://x").map(|b| &**b), Some("a"));
        assert_eq!(c2.resource_owner("shared://x").map(|b| &**b), Some("a"));
        assert_eq!(c1.prompt("b_p").unwrap().route.name, "p");
    }

    #[test]
    fn hidden_tools_route_internally_only() {
        let config = load_str(
            "backends: [{name: a, url: 'http://h'}]\naggregation: {tools: [{workload: a, filter: [shown]}]}",
        )
        .unwrap()
        .config;
        let (c, _) = Catalog::build(
            &config,
            vec![("a".into(), caps(&["shown", "hidden"], &[], &[]))],
        );
        assert_eq!(c.tools().len(), 1);
        assert!(c.tool("a_hidden").is_none());
        let hidden = c.tool_any("a_hidden").unwrap();
        assert_eq!(hidden.route.name, "hidden");
        assert_eq!(&*hidden.route.backend, "a");
    }
}
