// Over 600 lines: the entities, the decision and its caches are one idea; a third is tests.
//! The Cedar authorizer: entities, requests and one decision function
//! shared by the call side and list filtering.
//!
//! Entities:
//! - principal `Client::"<sub>"`, its claims as attributes (`principal.claims.<name>`,
//!   plus `principal.sub`/`principal.iss`), its groups and roles as parents
//!   (`<groupEntityType>::"<name>"`, default `THVGroup`);
//! - resources `Tool::"<advertised name>"`, `Prompt::"<advertised name>"`,
//!   `Resource::"<uri>"` with attributes `name`, `backend` and, for tools, the
//!   annotation hints (`resource.readOnlyHint`); each sits in `Backend::"<backend>"`,
//!   which sits in `MCP::"<server name>"` when the server has a name;
//! - list verbs use `FeatureType::"tool" | "prompt" | "resource"`.
//!
//! Actions: `call_tool`, `get_prompt`, `read_resource`, `list_tools`, `list_prompts`,
//! `list_resources`. Context: `arguments` (the call's arguments) and `annotations`
//! (the tool's hints). Cedar refuses JSON `null` and fractional numbers, so arguments
//! and claims are sanitized: nulls are dropped, non-integers become strings.
//!
//! Costs are kept low by building the principal's entities once per identity object
//! (the authentication layer caches identities per token) and resource entities once
//! per tool, and by caching argument-free decisions (list filtering) per identity;
//! when no policy names `context`, calls are argument-free decisions too.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Weak};

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicySet, Request, RestrictedExpression,
};
use dashmap::DashMap;
use serde_json::{Map, Value};

use crate::context::{CallKind, Identity, ListKind, ToolAnnotations};

pub use super::error::{AuthzError, PolicyError, PolicyErrors};
pub use super::policies::{PolicySource, load_policies, sources};

/// What a decision is about.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A tool call.
    Tool {
        /// Advertised name.
        name: &'a str,
        /// Serving backend, when known.
        backend: Option<&'a str>,
        /// The tool's hints.
        annotations: &'a ToolAnnotations,
    },
    /// A prompt get.
    Prompt {
        /// Advertised name.
        name: &'a str,
        /// Serving backend, when known.
        backend: Option<&'a str>,
    },
    /// A resource read (or a template string, for list filtering).
    Resource {
        /// The URI.
        uri: &'a str,
        /// Serving backend, when known.
        backend: Option<&'a str>,
    },
}

impl Target<'_> {
    /// The call kind of this target.
    pub fn kind(&self) -> CallKind {
        match self {
            Target::Tool { .. } => CallKind::Tool,
            Target::Prompt { .. } => CallKind::Prompt,
            Target::Resource { .. } => CallKind::Resource,
        }
    }

    /// A key naming the target and everything its entities are built from: the
    /// kind, the name, the backend and, for tools, each hint (`-` unset, `0`, `1`).
    /// Built by hand, not with `format!`, since every decision computes one.
    fn cache_key(&self) -> String {
        let (kind, name, backend) = match self {
            Target::Tool { name, backend, .. } => ('t', *name, *backend),
            Target::Prompt { name, backend } => ('p', *name, *backend),
            Target::Resource { uri, backend } => ('r', *uri, *backend),
        };
        let mut key = String::with_capacity(name.len() + backend.map_or(0, str::len) + 10);
        key.push(kind);
        key.push('\0');
        key.push_str(name);
        key.push('\0');
        match backend {
            Some(backend) => {
                key.push('+');
                key.push_str(backend);
            }
            None => key.push('-'),
        }
        if let Target::Tool { annotations, .. } = self {
            key.push('\0');
            for hint in [
                annotations.read_only,
                annotations.destructive,
                annotations.idempotent,
                annotations.open_world,
            ] {
                key.push(match hint {
                    None => '-',
                    Some(false) => '0',
                    Some(true) => '1',
                });
            }
        }
        key
    }
}

/// Settings of a [`CedarAuthorizer`] besides the policies.
#[derive(Debug, Clone)]
pub struct CedarSettings {
    /// The entity type of group parents (default `THVGroup`).
    pub group_entity_type: String,
    /// A claim whose values are also parents (roles), if any.
    pub role_claim: Option<String>,
    /// The server name: `MCP::"<name>"` is every backend's parent.
    pub server_name: Option<String>,
}

impl Default for CedarSettings {
    fn default() -> Self {
        Self {
            group_entity_type: "THVGroup".to_owned(),
            role_claim: None,
            server_name: None,
        }
    }
}

struct Actions {
    call_tool: EntityUid,
    get_prompt: EntityUid,
    read_resource: EntityUid,
    list_tools: EntityUid,
    list_prompts: EntityUid,
    list_resources: EntityUid,
}

struct Principal {
    uid: EntityUid,
    entities: Vec<Entity>,
}

struct CachedPrincipal {
    identity: Weak<Identity>,
    principal: Arc<Principal>,
    /// Argument-free decisions (list filtering), by target key. These maps use
    /// foldhash, not SipHash: a filtered list looks up one decision per item.
    decisions: Cache<String, bool>,
    /// The entities of a call's decision (this principal's and the target's), by
    /// target key: `Entities::from_entities` checks and closes the hierarchy, which
    /// costs more than evaluating the policies, so it is done once per caller and
    /// called target, not per call. (List decisions are cached whole instead.)
    entities: Cache<String, Arc<Entities>>,
}

/// A cache map: foldhash's per-map random seed, SipHash's cost avoided.
type Cache<K, V> = DashMap<K, V, foldhash::fast::RandomState>;

const PRINCIPAL_CACHE: usize = 4096;
const RESOURCE_CACHE: usize = 16384;
const DECISION_CACHE: usize = 16384;
/// Entity sets kept per principal (the targets it calls).
const ENTITIES_CACHE: usize = 256;

/// Decides with Cedar; see the [module docs](self).
pub struct CedarAuthorizer {
    policies: PolicySet,
    authorizer: Authorizer,
    actions: Actions,
    settings: CedarSettings,
    group_type: EntityTypeName,
    server: Option<EntityUid>,
    principals: Cache<usize, Arc<CachedPrincipal>>,
    resources: Cache<String, Arc<(EntityUid, Vec<Entity>)>>,
    /// Whether any policy or template names `context`. When none does, a call's
    /// arguments cannot change its decision, so calls are decided (and cached) as
    /// argument-free decisions are: no context record per call, no evaluation
    /// after the first call of a tool by an identity.
    reads_context: bool,
}

/// Whether Cedar source `text` names the `context` variable: the word `context`
/// outside of a longer identifier. A string literal holding the word counts too,
/// which only costs the cache, never a wrong decision.
fn names_context(text: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices("context").any(|(at, word)| {
        !text[..at].chars().next_back().is_some_and(ident)
            && !text[at + word.len()..].chars().next().is_some_and(ident)
    })
}

impl std::fmt::Debug for CedarAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarAuthorizer")
            .field("policies", &self.policies.policies().count())
            .finish_non_exhaustive()
    }
}

fn uid(kind: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(
        EntityTypeName::from_str(kind).expect("static entity type names are valid"),
        EntityId::new(id),
    )
}

/// A JSON value as a Cedar value: nulls dropped, non-integers as strings.
fn to_cedar(value: &Value, depth: usize) -> Option<RestrictedExpression> {
    if depth > 32 {
        return Some(RestrictedExpression::new_string(value.to_string()));
    }
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(n.to_string()),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => {
            RestrictedExpression::new_set(items.iter().filter_map(|v| to_cedar(v, depth + 1)))
        }
        Value::Object(map) => record(map, depth + 1)?,
    })
}

fn record(map: &Map<String, Value>, depth: usize) -> Option<RestrictedExpression> {
    RestrictedExpression::new_record(
        map.iter()
            .filter_map(|(k, v)| to_cedar(v, depth).map(|e| (k.clone(), e))),
    )
    .ok()
}

fn annotations_record(annotations: &ToolAnnotations) -> RestrictedExpression {
    RestrictedExpression::new_record(
        annotations
            .hints()
            .map(|(k, v)| (k.to_owned(), RestrictedExpression::new_bool(v))),
    )
    .expect("hint names are distinct")
}

impl CedarAuthorizer {
    /// An authorizer over `policies`.
    pub fn new(policies: PolicySet, settings: CedarSettings) -> Result<Self, AuthzError> {
        let group_type = EntityTypeName::from_str(&settings.group_entity_type).map_err(|e| {
            AuthzError::GroupEntityType {
                name: settings.group_entity_type.clone(),
                source: e.into(),
            }
        })?;
        let action = |name: &str| uid("Action", name);
        let reads_context = policies
            .policies()
            .map(ToString::to_string)
            .chain(policies.templates().map(ToString::to_string))
            .any(|text| names_context(&text));
        Ok(Self {
            reads_context,
            policies,
            authorizer: Authorizer::new(),
            actions: Actions {
                call_tool: action("call_tool"),
                get_prompt: action("get_prompt"),
                read_resource: action("read_resource"),
                list_tools: action("list_tools"),
                list_prompts: action("list_prompts"),
                list_resources: action("list_resources"),
            },
            server: settings.server_name.as_deref().map(|n| uid("MCP", n)),
            group_type,
            settings,
            principals: Cache::default(),
            resources: Cache::default(),
        })
    }

    /// Load and check `sources` (see [`load_policies`]) and build the authorizer.
    pub fn from_sources(
        sources: &[PolicySource],
        settings: CedarSettings,
    ) -> Result<Self, PolicyErrors> {
        let policies = load_policies(sources)?;
        Self::new(policies, settings).map_err(|e| PolicyErrors(vec![PolicyError::Settings(e)]))
    }

    /// Whether a policy reads `context` (a call's arguments or annotations): then
    /// a call's arguments are part of its decision.
    pub fn reads_context(&self) -> bool {
        self.reads_context
    }

    /// How many policies are loaded.
    pub fn policy_count(&self) -> usize {
        self.policies.policies().count()
    }

    fn build_principal(&self, identity: &Identity) -> Result<Principal, AuthzError> {
        let principal = uid("Client", &identity.subject);
        let mut parents = HashSet::new();
        let mut entities = Vec::new();
        let mut names: Vec<&str> = identity.groups.iter().map(String::as_str).collect();
        if let Some(claim) = &self.settings.role_claim {
            match identity.claims.get(claim) {
                Some(Value::Array(items)) => names.extend(items.iter().filter_map(Value::as_str)),
                Some(Value::String(one)) => names.push(one),
                _ => {}
            }
        }
        for name in names {
            let group =
                EntityUid::from_type_name_and_id(self.group_type.clone(), EntityId::new(name));
            if parents.insert(group.clone()) {
                entities.push(Entity::new_no_attrs(group, HashSet::new()));
            }
        }
        let mut attrs = HashMap::new();
        attrs.insert(
            "sub".to_owned(),
            RestrictedExpression::new_string(identity.subject.clone()),
        );
        if let Some(iss) = &identity.issuer {
            attrs.insert(
                "iss".to_owned(),
                RestrictedExpression::new_string(iss.clone()),
            );
        }
        if let Some(claims) = record(&identity.claims, 0) {
            attrs.insert("claims".to_owned(), claims);
        }
        let entity = Entity::new(principal.clone(), attrs, parents)
            .map_err(|e| AuthzError::Principal(e.into()))?;
        entities.push(entity);
        Ok(Principal {
            uid: principal,
            entities,
        })
    }

    fn principal(&self, identity: &Arc<Identity>) -> Result<Arc<CachedPrincipal>, AuthzError> {
        let key = Arc::as_ptr(identity) as usize;
        if let Some(hit) = self.principals.get(&key)
            && hit
                .identity
                .upgrade()
                .is_some_and(|i| Arc::ptr_eq(&i, identity))
        {
            return Ok(hit.clone());
        }
        let cached = Arc::new(CachedPrincipal {
            identity: Arc::downgrade(identity),
            principal: Arc::new(self.build_principal(identity)?),
            decisions: Cache::default(),
            entities: Cache::default(),
        });
        if self.principals.len() >= PRINCIPAL_CACHE {
            self.principals.retain(|_, c| c.identity.strong_count() > 0);
            if self.principals.len() >= PRINCIPAL_CACHE {
                self.principals.clear();
            }
        }
        self.principals.insert(key, cached.clone());
        Ok(cached)
    }

    fn resource(
        &self,
        key: &str,
        target: &Target<'_>,
    ) -> Result<Arc<(EntityUid, Vec<Entity>)>, AuthzError> {
        if let Some(hit) = self.resources.get(key) {
            return Ok(hit.clone());
        }
        let (kind, name, backend) = match target {
            Target::Tool { name, backend, .. } => ("Tool", *name, *backend),
            Target::Prompt { name, backend } => ("Prompt", *name, *backend),
            Target::Resource { uri, backend } => ("Resource", *uri, *backend),
        };
        let resource = uid(kind, name);
        let mut attrs = HashMap::new();
        attrs.insert(
            "name".to_owned(),
            RestrictedExpression::new_string(name.to_owned()),
        );
        if let Target::Tool { annotations, .. } = target {
            for (hint, value) in annotations.hints() {
                attrs.insert(hint.to_owned(), RestrictedExpression::new_bool(value));
            }
        }
        let mut entities = Vec::new();
        let mut parents = HashSet::new();
        if let Some(backend) = backend {
            attrs.insert(
                "backend".to_owned(),
                RestrictedExpression::new_string(backend.to_owned()),
            );
            let backend_uid = uid("Backend", backend);
            parents.insert(backend_uid.clone());
            let backend_parents: HashSet<EntityUid> = self.server.iter().cloned().collect();
            entities.push(Entity::new_no_attrs(backend_uid, backend_parents));
        } else if let Some(server) = &self.server {
            parents.insert(server.clone());
        }
        if let Some(server) = &self.server {
            entities.push(Entity::new_no_attrs(server.clone(), HashSet::new()));
        }
        entities.push(
            Entity::new(resource.clone(), attrs, parents)
                .map_err(|e| AuthzError::Resource(e.into()))?,
        );
        let built = Arc::new((resource, entities));
        if self.resources.len() >= RESOURCE_CACHE {
            self.resources.clear();
        }
        self.resources.insert(key.to_owned(), built.clone());
        Ok(built)
    }

    /// The entities of a decision by `cached` about the target keyed `key`.
    fn entities(
        &self,
        cached: &CachedPrincipal,
        key: &str,
        resource: &(EntityUid, Vec<Entity>),
    ) -> Result<Arc<Entities>, AuthzError> {
        if let Some(hit) = cached.entities.get(key) {
            return Ok(hit.clone());
        }
        let entities = Arc::new(build_entities(&cached.principal, resource)?);
        if cached.entities.len() >= ENTITIES_CACHE {
            cached.entities.clear();
        }
        cached.entities.insert(key.to_owned(), entities.clone());
        Ok(entities)
    }

    fn evaluate(
        &self,
        principal: &Principal,
        action: &EntityUid,
        resource: &EntityUid,
        entities: &Entities,
        context: Context,
    ) -> Result<cedar_policy::Response, AuthzError> {
        let request = Request::new(
            principal.uid.clone(),
            action.clone(),
            resource.clone(),
            context,
            None,
        )
        .map_err(|e| AuthzError::Request(e.into()))?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, entities);
        for error in response.diagnostics().errors() {
            tracing::debug!("policy evaluation error (policy skipped): {error}");
        }
        Ok(response)
    }

    /// May `identity` use `target` with `arguments`? One function for calls and list
    /// items; `arguments: None` (list filtering) decisions are cached per identity,
    /// and so are calls' decisions when no policy reads `context`.
    pub fn decide(
        &self,
        identity: &Arc<Identity>,
        target: Target<'_>,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<bool, AuthzError> {
        let cached = self.principal(identity)?;
        let key = target.cache_key();
        let argument_free = arguments.is_none() || !self.reads_context;
        if argument_free && let Some(hit) = cached.decisions.get(&key) {
            return Ok(*hit);
        }
        let action = match target.kind() {
            CallKind::Tool => &self.actions.call_tool,
            CallKind::Prompt => &self.actions.get_prompt,
            CallKind::Resource => &self.actions.read_resource,
        };
        let empty = Map::new();
        let arguments = match arguments {
            Some(arguments) if !argument_free => arguments,
            _ => &empty,
        };
        let arguments = record(arguments, 0).ok_or(AuthzError::Arguments)?;
        let annotations = match &target {
            Target::Tool { annotations, .. } => annotations_record(annotations),
            _ => annotations_record(&ToolAnnotations::default()),
        };
        let context = Context::from_pairs([
            ("arguments".to_owned(), arguments),
            ("annotations".to_owned(), annotations),
        ])
        .map_err(|e| AuthzError::Context(e.into()))?;
        let resource = self.resource(&key, &target)?;
        let entities = if argument_free {
            Arc::new(build_entities(&cached.principal, &resource)?)
        } else {
            self.entities(&cached, &key, &resource)?
        };
        let allowed = self
            .evaluate(&cached.principal, action, &resource.0, &entities, context)?
            .decision()
            == Decision::Allow;
        if argument_free {
            if cached.decisions.len() >= DECISION_CACHE {
                cached.decisions.clear();
            }
            cached.decisions.insert(key, allowed);
        }
        Ok(allowed)
    }

    /// Is a whole list hidden from `identity`? Only an explicit `forbid` on the list
    /// action hides it; no `permit` is needed to list.
    pub fn list_hidden(
        &self,
        identity: &Arc<Identity>,
        kind: ListKind,
    ) -> Result<bool, AuthzError> {
        let cached = self.principal(identity)?;
        let (action, feature) = match kind {
            ListKind::Tools => (&self.actions.list_tools, "tool"),
            ListKind::Prompts => (&self.actions.list_prompts, "prompt"),
            ListKind::Resources | ListKind::ResourceTemplates => {
                (&self.actions.list_resources, "resource")
            }
        };
        // Argument-free, so cached per identity like list items (the key cannot
        // collide with a target key, which starts with `t`, `p` or `r`).
        let key = format!("list\0{feature}");
        if let Some(hit) = cached.decisions.get(&key) {
            return Ok(*hit);
        }
        let resource = (uid("FeatureType", feature), Vec::new());
        let entities = build_entities(&cached.principal, &resource)?;
        let response = self.evaluate(
            &cached.principal,
            action,
            &resource.0,
            &entities,
            Context::empty(),
        )?;
        let hidden = response.decision() == Decision::Deny
            && response.diagnostics().reason().next().is_some();
        cached.decisions.insert(key, hidden);
        Ok(hidden)
    }
}

/// The entities of a decision: the principal's and the resource's.
fn build_entities(
    principal: &Principal,
    resource: &(EntityUid, Vec<Entity>),
) -> Result<Entities, AuthzError> {
    Entities::from_entities(
        principal.entities.iter().chain(resource.1.iter()).cloned(),
        None,
    )
    .map_err(|e| AuthzError::Entities(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn authorizer(policies: &[&str]) -> CedarAuthorizer {
        let sources: Vec<String> = policies.iter().map(|p| p.to_string()).collect();
        CedarAuthorizer::from_sources(
            &super::sources("authz", &sources, &[]),
            CedarSettings {
                server_name: Some("eng".into()),
                ..CedarSettings::default()
            },
        )
        .unwrap()
    }

    fn alice(groups: &[&str]) -> Arc<Identity> {
        Arc::new(Identity {
            subject: "alice".into(),
            issuer: Some("https://idp".into()),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            claims: json!({"sub": "alice", "tier": "gold", "score": 1.5, "nothing": null})
                .as_object()
                .cloned()
                .unwrap(),
        })
    }

    fn tool<'a>(name: &'a str, annotations: &'a ToolAnnotations) -> Target<'a> {
        Target::Tool {
            name,
            backend: Some("gh"),
            annotations,
        }
    }

    #[test]
    fn only_the_context_variable_counts_as_reading_context() {
        assert!(names_context("when { context.arguments has x }"));
        assert!(names_context("when {context has a}"));
        assert!(names_context(r#"resource.name == "context""#));
        assert!(!names_context("when { resource.contexts has x }"));
        assert!(!names_context("when { principal.claims.my_context == 1 }"));
        assert!(!names_context("permit(principal, action, resource);"));
    }

    #[test]
    fn without_context_policies_a_calls_arguments_do_not_change_its_decision() {
        let a = authorizer(&[
            r#"permit(principal in THVGroup::"eng", action == Action::"call_tool", resource);"#,
            r#"forbid(principal, action == Action::"call_tool", resource) when { resource has destructiveHint && resource.destructiveHint };"#,
        ]);
        assert!(!a.reads_context);
        let none = ToolAnnotations::default();
        let destructive = ToolAnnotations {
            destructive: Some(true),
            ..ToolAnnotations::default()
        };
        let args = json!({"repo": "secret/x", "deep": {"a": [1, 2]}})
            .as_object()
            .cloned()
            .unwrap();
        let eng = alice(&["eng"]);
        for _ in 0..2 {
            // The second round is answered from the identity's cache.
            assert!(a.decide(&eng, tool("gh_x", &none), Some(&args)).unwrap());
            assert!(a.decide(&eng, tool("gh_x", &none), None).unwrap());
            assert!(
                !a.decide(&eng, tool("gh_x", &destructive), Some(&args))
                    .unwrap()
            );
            assert!(
                !a.decide(&alice(&[]), tool("gh_x", &none), Some(&args))
                    .unwrap()
            );
        }
        let reads = authorizer(&[
            r#"permit(principal, action, resource) when { context.arguments has repo };"#,
        ]);
        assert!(reads.reads_context);
        assert!(
            reads
                .decide(&eng, tool("gh_x", &none), Some(&args))
                .unwrap()
        );
        assert!(
            !reads
                .decide(&eng, tool("gh_x", &none), Some(&Map::new()))
                .unwrap()
        );
    }

    #[test]
    fn groups_backends_annotations_and_arguments() {
        let a = authorizer(&[
            r#"permit(principal in THVGroup::"eng", action == Action::"call_tool", resource in Backend::"gh");"#,
            r#"permit(principal, action == Action::"call_tool", resource) when { context.annotations has readOnlyHint && context.annotations.readOnlyHint };"#,
            r#"forbid(principal, action == Action::"call_tool", resource) when { context.arguments has repo && context.arguments.repo like "secret/*" };"#,
            r#"permit(principal, action == Action::"get_prompt", resource in MCP::"eng") when { principal.claims.tier == "gold" };"#,
        ]);
        let none = ToolAnnotations::default();
        let ro = ToolAnnotations {
            read_only: Some(true),
            ..ToolAnnotations::default()
        };
        let args = json!({"repo": "acme/x", "ratio": 0.5, "gone": null})
            .as_object()
            .cloned()
            .unwrap();
        let secret = json!({"repo": "secret/x"}).as_object().cloned().unwrap();
        assert!(
            a.decide(&alice(&["eng"]), tool("gh_x", &none), Some(&args))
                .unwrap()
        );
        assert!(
            !a.decide(&alice(&[]), tool("gh_x", &none), Some(&args))
                .unwrap()
        );
        assert!(a.decide(&alice(&[]), tool("gh_x", &ro), None).unwrap());
        assert!(
            !a.decide(&alice(&["eng"]), tool("gh_x", &none), Some(&secret))
                .unwrap()
        );
        let prompt = Target::Prompt {
            name: "p",
            backend: Some("gh"),
        };
        assert!(a.decide(&alice(&[]), prompt, None).unwrap());
    }

    #[test]
    fn list_is_hidden_only_by_an_explicit_forbid() {
        let a = authorizer(&[r#"forbid(principal, action == Action::"list_prompts", resource);"#]);
        assert!(a.list_hidden(&alice(&[]), ListKind::Prompts).unwrap());
        assert!(!a.list_hidden(&alice(&[]), ListKind::Tools).unwrap());
    }
}
