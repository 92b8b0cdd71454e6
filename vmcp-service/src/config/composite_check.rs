//! Static checks of `compositeTools` (run by `vmcp validate` and at startup). Every
//! message names the composite and, where there is one, the step and field.
//!
//! What needs the backends' live tool lists (that an advertised name exists, the
//! full annotation floor, a collision with a backend tool) is checked again when
//! the catalog is built.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::VmcpConfig;
use super::composite::{
    CompositeToolConfig, MAX_FOREACH_ITERATIONS, MAX_FOREACH_PARALLEL, MAX_RETRIES, MAX_STEPS,
    OutputProperty, StepConfig, StepType, ToolRef,
};
use crate::names::is_valid_name;
use crate::templates::Template;

const HINTS: [&str; 4] = [
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// Check every composite; messages go to `errors`.
pub(super) fn check(config: &VmcpConfig, errors: &mut Vec<String>) {
    let mut names = BTreeSet::new();
    for (i, composite) in config.composite_tools.iter().enumerate() {
        let at = if composite.name.is_empty() {
            format!("compositeTools[{i}]")
        } else {
            format!("compositeTools[{i}] {:?}", composite.name)
        };
        if composite.name.is_empty() {
            errors.push(format!("{at}: name is required"));
        } else if !is_valid_name(&composite.name) {
            errors.push(format!(
                "{at}: name may contain only letters, digits, '_' and '-' (1 to 64 characters)"
            ));
        } else if !names.insert(composite.name.as_str()) {
            errors.push(format!("{at}: name is used by another composite tool"));
        } else if let Some(problem) = collides(config, &composite.name) {
            errors.push(format!("{at}: name {problem}"));
        } else if config.optimizer.is_some()
            && [super::FIND_TOOL, super::CALL_TOOL].contains(&composite.name.as_str())
        {
            // The optimizer answers these names itself: the composite could never
            // be called, and a call_tool naming it would be read as the optimizer's.
            errors.push(format!(
                "{at}: name is the optimizer's own tool (optimizer is on); rename the composite"
            ));
        }
        Composite {
            config,
            composite,
            at: &at,
            errors,
        }
        .check();
    }
}

struct Composite<'a> {
    config: &'a VmcpConfig,
    composite: &'a CompositeToolConfig,
    at: &'a str,
    errors: &'a mut Vec<String>,
}

impl Composite<'_> {
    fn check(&mut self) {
        let (composite, at) = (self.composite, self.at);
        if let Some(parameters) = &composite.parameters
            && parameters.get("type").is_some_and(|t| t != "object")
        {
            self.errors.push(format!(
                "{at}: parameters must be a JSON Schema of type object"
            ));
        }
        if composite.timeout.is_some_and(|t| t.is_zero()) {
            self.errors
                .push(format!("{at}: timeout must be greater than 0"));
        }
        if composite.steps.is_empty() {
            self.errors.push(format!("{at}: steps must not be empty"));
        }
        if composite.steps.len() > MAX_STEPS {
            self.errors.push(format!(
                "{at}: has {} steps; at most {MAX_STEPS} are allowed",
                composite.steps.len()
            ));
        }
        let mut ids = BTreeMap::new();
        for (j, step) in composite.steps.iter().enumerate() {
            if step.id.is_empty() {
                self.errors.push(format!("{at} steps[{j}]: id is required"));
            } else if !is_valid_name(&step.id) {
                self.errors.push(format!(
                    "{at} step {:?}: id may contain only letters, digits, '_' and '-'",
                    step.id
                ));
            } else if ids.insert(step.id.as_str(), step).is_some() {
                self.errors.push(format!(
                    "{at} step {:?}: id is used by another step",
                    step.id
                ));
            }
        }
        for step in &composite.steps {
            self.step(step, &ids);
        }
        if let Some(cycle) = find_cycle(&composite.steps) {
            self.errors.push(format!(
                "{at}: dependsOn has a cycle: {}",
                cycle.join(" -> ")
            ));
        }
        if let Some(output) = &composite.output {
            for name in &output.required {
                if !output.properties.contains_key(name) {
                    self.errors.push(format!(
                        "{at} output.required: {name:?} is not an output property"
                    ));
                }
            }
            for (name, property) in &output.properties {
                self.output(&format!("output.properties.{name}"), property, &ids);
            }
        }
        self.annotations();
    }

    fn step(&mut self, step: &StepConfig, ids: &BTreeMap<&str, &StepConfig>) {
        let at = format!("{} step {:?}", self.at, step.id);
        for dep in &step.depends_on {
            if dep == &step.id {
                self.errors
                    .push(format!("{at}: dependsOn names the step itself"));
            } else if !ids.contains_key(dep.as_str()) {
                self.errors
                    .push(format!("{at}: dependsOn names unknown step {dep:?}"));
            }
        }
        if step.timeout.is_some_and(|t| t.is_zero()) {
            self.errors
                .push(format!("{at}: timeout must be greater than 0"));
        }
        if let Some(on_error) = &step.on_error
            && on_error.retry_count.is_some_and(|n| n > MAX_RETRIES)
        {
            self.errors.push(format!(
                "{at}: onError.retryCount must be at most {MAX_RETRIES}"
            ));
        }
        let ancestors = ancestors(&step.id, ids);
        if let Some(condition) = &step.condition {
            self.template(&at, "condition", condition, ids, &ancestors);
        }
        match step.kind {
            StepType::Tool => self.tool_step(&at, step, ids, &ancestors),
            StepType::ForEach => {
                match &step.collection {
                    Some(c) => self.template(&at, "collection", c, ids, &ancestors),
                    None => self.errors.push(format!("{at}: forEach needs collection")),
                }
                if let Some(var) = &step.item_var
                    && !is_identifier(var)
                {
                    self.errors
                        .push(format!("{at}: itemVar {var:?} must be an identifier"));
                }
                if step
                    .max_parallel
                    .is_some_and(|n| n == 0 || n > MAX_FOREACH_PARALLEL)
                {
                    self.errors.push(format!(
                        "{at}: maxParallel must be between 1 and {MAX_FOREACH_PARALLEL}"
                    ));
                }
                if step
                    .max_iterations
                    .is_some_and(|n| n == 0 || n > MAX_FOREACH_ITERATIONS)
                {
                    self.errors.push(format!(
                        "{at}: maxIterations must be between 1 and {MAX_FOREACH_ITERATIONS}"
                    ));
                }
                match &step.step {
                    Some(inner) if inner.kind == StepType::Tool => {
                        self.tool_step(&format!("{at} (forEach step)"), inner, ids, &ancestors)
                    }
                    Some(_) => self
                        .errors
                        .push(format!("{at}: the forEach step must be of type tool")),
                    None => self.errors.push(format!("{at}: forEach needs step")),
                }
            }
            StepType::Elicitation => {
                match &step.message {
                    Some(m) => self.template(&at, "message", m, ids, &ancestors),
                    None => self.errors.push(format!("{at}: elicitation needs message")),
                }
                if step
                    .timeout
                    .is_some_and(|t| t > std::time::Duration::from_secs(600))
                {
                    self.errors
                        .push(format!("{at}: an elicitation timeout is at most 10m"));
                }
                // Asked as a form: an object of primitive properties, as MCP allows.
                if let Some(schema) = &step.schema
                    && let Err(e) = serde_json::from_value::<rmcp::model::ElicitationSchema>(
                        Value::Object(schema.clone()),
                    )
                {
                    self.errors
                        .push(format!("{at}: schema is not an elicitation schema: {e}"));
                }
            }
        }
    }

    fn tool_step(
        &mut self,
        at: &str,
        step: &StepConfig,
        ids: &BTreeMap<&str, &StepConfig>,
        ancestors: &BTreeSet<String>,
    ) {
        match &step.tool {
            None => self.errors.push(format!("{at}: tool is required")),
            Some(tool) => {
                if let Some(problem) = self.unresolvable(tool) {
                    self.errors.push(format!("{at}: tool {tool:?} {problem}"));
                }
            }
        }
        if let Some(arguments) = &step.arguments {
            for (key, value) in arguments {
                self.argument(at, &format!("arguments.{key}"), value, ids, ancestors);
            }
        }
    }

    fn argument(
        &mut self,
        at: &str,
        field: &str,
        value: &Value,
        ids: &BTreeMap<&str, &StepConfig>,
        ancestors: &BTreeSet<String>,
    ) {
        match value {
            Value::String(text) => self.template(at, field, text, ids, ancestors),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.argument(at, &format!("{field}[{i}]"), item, ids, ancestors);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    self.argument(at, &format!("{field}.{key}"), item, ids, ancestors);
                }
            }
            _ => {}
        }
    }

    /// Why `tool` cannot resolve, as far as the configuration tells.
    fn unresolvable(&self, tool: &str) -> Option<String> {
        let backends = self.config.backends.iter().map(|b| b.name.as_str());
        match ToolRef::parse(tool, backends) {
            ToolRef::Qualified { .. } => None,
            ToolRef::Advertised(name) if !is_valid_name(name) => Some(
                "is neither an advertised tool name nor <backend>.<tool> of a configured backend"
                    .into(),
            ),
            ToolRef::Advertised(name) => {
                if self.config.composite_tools.iter().any(|c| c.name == name) {
                    return Some("is a composite tool; steps call backend tools".into());
                }
                // Under prefix every advertised name starts with a backend's prefix.
                let prefixed = self.config.strategy() == super::Strategy::Prefix;
                let format = self.config.prefix_format();
                let owned = self
                    .config
                    .backends
                    .iter()
                    .any(|b| name.starts_with(&crate::names::prefix(format, &b.name)));
                (prefixed && !owned).then(|| {
                    "does not resolve: no configured backend's prefix matches it (use an advertised name or <backend>.<tool>)".into()
                })
            }
        }
    }

    fn template(
        &mut self,
        at: &str,
        field: &str,
        text: &str,
        ids: &BTreeMap<&str, &StepConfig>,
        ancestors: &BTreeSet<String>,
    ) {
        let template = match Template::parse(text) {
            Ok(t) => t,
            Err(e) => {
                self.errors.push(format!("{at} {field}: {e}"));
                return;
            }
        };
        for id in template.step_refs() {
            let Some(target) = ids.get(id.as_str()) else {
                self.errors
                    .push(format!("{at} {field}: reads unknown step {id:?}"));
                continue;
            };
            if !ancestors.contains(&id) {
                self.errors.push(format!(
                    "{at} {field}: reads step {id:?} but does not depend on it (add it to dependsOn)"
                ));
            } else if target.skippable() && target.default_results.is_none() {
                self.errors.push(format!(
                    "{at} {field}: reads step {id:?}, which may be skipped (condition or onError continue) and has no defaultResults"
                ));
            }
        }
    }

    fn output(
        &mut self,
        field: &str,
        property: &OutputProperty,
        ids: &BTreeMap<&str, &StepConfig>,
    ) {
        let at = self.at.to_owned();
        // Output is built after every step: any step may be read.
        let all: BTreeSet<String> = ids.keys().map(|k| (*k).to_owned()).collect();
        if let Some(value) = &property.value {
            self.template(&at, &format!("{field}.value"), value, ids, &all);
        }
        if !property.properties.is_empty() && property.kind != super::composite::OutputType::Object
        {
            self.errors.push(format!(
                "{at} {field}: properties are only allowed with type object"
            ));
        }
        for (name, inner) in &property.properties {
            self.output(&format!("{field}.properties.{name}"), inner, ids);
        }
    }

    /// Explicit hints may not claim to be safer than what the configuration knows of
    /// the steps' tools (their `overrides` annotations); the rest is enforced when
    /// the catalog is built.
    fn annotations(&mut self) {
        let Some(annotations) = &self.composite.annotations else {
            return;
        };
        for (key, value) in annotations {
            if key == "title" {
                if !value.is_string() {
                    self.errors
                        .push(format!("{} annotations.title must be a string", self.at));
                }
            } else if !HINTS.contains(&key.as_str()) {
                self.errors.push(format!(
                    "{} annotations.{key} is not an MCP tool annotation (title, {})",
                    self.at,
                    HINTS.join(", ")
                ));
            } else if !value.is_boolean() {
                self.errors.push(format!(
                    "{} annotations.{key} must be true or false",
                    self.at
                ));
            }
        }
        let claims_read_only = annotations.get("readOnlyHint") == Some(&Value::Bool(true));
        let claims_safe = annotations.get("destructiveHint") == Some(&Value::Bool(false));
        let claims_closed = annotations.get("openWorldHint") == Some(&Value::Bool(false));
        let mut found = Vec::new();
        for (id, tool) in step_tools(&self.composite.steps) {
            let Some(known) = self.override_annotations(tool) else {
                continue;
            };
            let hint = |k: &str| known.get(k).and_then(Value::as_bool);
            let mut contradiction = |claim: &str, fact: &str| {
                found.push(format!(
                    "{} step {id:?}: annotations.{claim} claims the composite is safer than its step tool {tool:?} ({fact})",
                    self.at
                ));
            };
            if claims_read_only
                && (hint("readOnlyHint") == Some(false) || hint("destructiveHint") == Some(true))
            {
                contradiction("readOnlyHint", "not read-only");
            }
            if claims_safe && hint("destructiveHint") == Some(true) {
                contradiction("destructiveHint", "destructive");
            }
            if claims_closed && hint("openWorldHint") == Some(true) {
                contradiction("openWorldHint", "open world");
            }
        }
        self.errors.extend(found);
    }

    /// The `overrides` annotations the configuration gives a step's tool.
    fn override_annotations(&self, tool: &str) -> Option<&serde_json::Map<String, Value>> {
        let backends = self.config.backends.iter().map(|b| b.name.as_str());
        let (backend, original) = match ToolRef::parse(tool, backends) {
            ToolRef::Qualified { backend, original } => (backend, original),
            ToolRef::Advertised(name) => {
                let format = self.config.prefix_format();
                self.config.backends.iter().find_map(|b| {
                    let rest = name.strip_prefix(&crate::names::prefix(format, &b.name))?;
                    Some((b.name.as_str(), rest))
                })?
            }
        };
        self.config
            .tools_for(backend)?
            .overrides
            .get(original)?
            .annotations
            .as_ref()
    }
}

/// (step id, tool) of every tool step, forEach inner steps included.
pub(crate) fn step_tools(steps: &[StepConfig]) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    for step in steps {
        let tool_step = match step.kind {
            StepType::Tool => Some(step),
            StepType::ForEach => step.step.as_deref(),
            StepType::Elicitation => None,
        };
        if let Some(tool) = tool_step.and_then(|s| s.tool.as_deref()) {
            out.push((step.id.as_str(), tool));
        }
    }
    out
}

/// Whether `name` is also a backend tool's advertised name, as far as the
/// configuration alone tells: the tools its `overrides` name, renamed and prefixed
/// as they will be. Under `priority` the name depends on live collisions, so only
/// the catalog build knows (as for tools the configuration does not name).
fn collides(config: &VmcpConfig, name: &str) -> Option<String> {
    let strategy = config.strategy();
    if strategy == super::Strategy::Priority || config.aggregation.exclude_all_tools {
        return None;
    }
    // (backend, original, where it is named)
    let mut named: Vec<(&str, &str, String)> = Vec::new();
    for entry in &config.aggregation.tools {
        for original in entry.overrides.keys() {
            named.push((&entry.workload, original, "overrides".into()));
        }
    }
    named.into_iter().find_map(|(backend, original, source)| {
        let entry = config.tools_for(backend);
        let hidden = match entry {
            None => config.default_deny(),
            Some(e) => e.exclude_all,
        };
        let renamed = entry
            .and_then(|e| e.overrides.get(original))
            .and_then(|o| o.name.as_deref())
            .unwrap_or(original);
        let filtered = entry
            .and_then(|e| e.filter.as_ref())
            .is_some_and(|f| !f.iter().any(|t| t == original || t == renamed));
        if hidden || filtered {
            return None;
        }
        let advertised = match strategy {
            super::Strategy::Prefix => {
                format!(
                    "{}{renamed}",
                    crate::names::prefix(config.prefix_format(), backend)
                )
            }
            _ => renamed.to_owned(),
        };
        (advertised == name).then(|| {
            format!(
                "collides with the backend tool {backend}.{original}, advertised as {advertised:?} (named by {source})"
            )
        })
    })
}

fn is_identifier(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every step `id` transitively depends on.
fn ancestors(id: &str, ids: &BTreeMap<&str, &StepConfig>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![id.to_owned()];
    while let Some(next) = stack.pop() {
        for dep in ids
            .get(next.as_str())
            .map(|s| &s.depends_on[..])
            .unwrap_or_default()
        {
            if seen.insert(dep.clone()) {
                stack.push(dep.clone());
            }
        }
    }
    seen
}

/// A `dependsOn` cycle as the ids along it (first repeated at the end), if any.
pub(crate) fn find_cycle(steps: &[StepConfig]) -> Option<Vec<String>> {
    let index: BTreeMap<&str, &StepConfig> = steps.iter().map(|s| (s.id.as_str(), s)).collect();
    // 0 unvisited, 1 on the path, 2 done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    for start in steps {
        if state.get(start.id.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&str, usize)> = vec![(start.id.as_str(), 0)];
        state.insert(start.id.as_str(), 1);
        while let Some((id, next)) = path.last().copied() {
            let deps = index.get(id).map(|s| &s.depends_on[..]).unwrap_or_default();
            if let Some(dep) = deps.get(next) {
                if let Some(top) = path.last_mut() {
                    top.1 += 1;
                }
                if !index.contains_key(dep.as_str()) {
                    continue;
                }
                match state.get(dep.as_str()).copied().unwrap_or(0) {
                    0 => {
                        state.insert(dep.as_str(), 1);
                        path.push((dep.as_str(), 0));
                    }
                    1 => {
                        let from = path.iter().position(|(p, _)| *p == dep).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            path[from..].iter().map(|(p, _)| (*p).to_owned()).collect();
                        cycle.push(dep.clone());
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                state.insert(id, 2);
                path.pop();
            }
        }
    }
    None
}
