//! A composite's annotations: a floor derived from its steps' tools, with the
//! explicit annotations merged over it. An explicit hint never makes the composite
//! look safer than the floor.
//!
//! `readOnlyHint` is the AND over the steps, `destructiveHint` and `openWorldHint`
//! the OR; an unset hint counts as the MCP default (not read-only, destructive, open
//! world), and a step whose tool is unknown counts as the worst case.
//! `idempotentHint` is never derived.

use rmcp::model::ToolAnnotations;
use serde_json::{Map, Value};

/// The floor over the steps' annotations (`None`: the tool is unknown).
pub(crate) fn floor<'a>(
    steps: impl IntoIterator<Item = Option<&'a ToolAnnotations>>,
) -> ToolAnnotations {
    let (mut read_only, mut destructive, mut open_world) = (true, false, false);
    for step in steps {
        let step_read_only = step.and_then(|a| a.read_only_hint).unwrap_or(false);
        read_only &= step_read_only;
        destructive |= !step_read_only && step.and_then(|a| a.destructive_hint).unwrap_or(true);
        open_world |= step.and_then(|a| a.open_world_hint).unwrap_or(true);
    }
    let mut out = ToolAnnotations::default();
    out.read_only_hint = Some(read_only);
    out.destructive_hint = Some(destructive);
    out.open_world_hint = Some(open_world);
    out
}

/// Merge `explicit` over `floor`; a hint claiming to be safer than the floor is
/// replaced by the floor's and reported.
pub(crate) fn merge(
    mut floor: ToolAnnotations,
    explicit: Option<&Map<String, Value>>,
) -> (ToolAnnotations, Vec<&'static str>) {
    let mut refused = Vec::new();
    let Some(explicit) = explicit else {
        return (floor, refused);
    };
    let hint = |k: &str| explicit.get(k).and_then(Value::as_bool);
    if let Some(title) = explicit.get("title").and_then(Value::as_str) {
        floor.title = Some(title.to_owned());
    }
    if let Some(v) = hint("idempotentHint") {
        floor.idempotent_hint = Some(v);
    }
    match hint("readOnlyHint") {
        Some(true) if floor.read_only_hint != Some(true) => refused.push("readOnlyHint"),
        Some(v) => floor.read_only_hint = Some(v),
        None => {}
    }
    match hint("destructiveHint") {
        Some(false) if floor.destructive_hint == Some(true) => refused.push("destructiveHint"),
        Some(v) => floor.destructive_hint = Some(v),
        None => {}
    }
    match hint("openWorldHint") {
        Some(false) if floor.open_world_hint == Some(true) => refused.push("openWorldHint"),
        Some(v) => floor.open_world_hint = Some(v),
        None => {}
    }
    (floor, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hints(
        read_only: Option<bool>,
        destructive: Option<bool>,
        open: Option<bool>,
    ) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        a.open_world_hint = open;
        a
    }

    #[test]
    fn floor_is_and_for_read_only_and_or_for_the_rest() {
        let ro = hints(Some(true), None, Some(false));
        let f = floor([Some(&ro), Some(&ro)]);
        assert_eq!(
            (f.read_only_hint, f.destructive_hint, f.open_world_hint),
            (Some(true), Some(false), Some(false))
        );
        let writer = hints(Some(false), Some(false), Some(false));
        let f = floor([Some(&ro), Some(&writer)]);
        assert_eq!(
            (f.read_only_hint, f.destructive_hint),
            (Some(false), Some(false))
        );
        // Unknown taints everything.
        let f = floor([Some(&ro), None]);
        assert_eq!(
            (f.read_only_hint, f.destructive_hint, f.open_world_hint),
            (Some(false), Some(true), Some(true))
        );
    }

    #[test]
    fn explicit_hints_merge_but_never_claim_more_safety() {
        let f = floor([None]);
        let explicit = json!({"title": "T", "readOnlyHint": true, "idempotentHint": true, "openWorldHint": true});
        let (merged, refused) = merge(f, explicit.as_object());
        assert_eq!(refused, ["readOnlyHint"]);
        assert_eq!(merged.read_only_hint, Some(false));
        assert_eq!(merged.idempotent_hint, Some(true));
        assert_eq!(merged.title.as_deref(), Some("T"));
    }
}
