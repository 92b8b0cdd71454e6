//! Conflict resolution: the advertised name of every tool and prompt.
//!
//! Pure functions of the configuration and the claims, evaluated in sorted
//! (backend, name) order, so the same config and backends give the same names on
//! every run. Each claim is one backend offering one capability under a base name
//! (the backend's own name, or its override).

use std::collections::{BTreeMap, HashMap};

use crate::config::Strategy;
use crate::names::{prefix, sanitize};

/// One backend offering one capability under `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The backend.
    pub backend: &'a str,
    /// The name it is offered under (after overrides).
    pub base: &'a str,
}

/// The outcome for a list of claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The advertised name per claim, in claim order; `None` when dropped.
    pub names: Vec<Option<String>>,
    /// Collisions no strategy resolved (only `manual` produces these), one message each.
    pub unresolved: Vec<String>,
}

/// Settings that shape names.
#[derive(Debug, Clone, Copy)]
pub struct Naming<'a> {
    /// The strategy.
    pub strategy: Strategy,
    /// The prefix format (`{workload}_`).
    pub prefix_format: &'a str,
    /// Backends in descending priority.
    pub priority_order: &'a [String],
}

impl Naming<'_> {
    fn prefixed(&self, claim: &Claim<'_>) -> String {
        format!(
            "{}{}",
            prefix(self.prefix_format, claim.backend),
            claim.base
        )
    }

    fn rank(&self, backend: &str) -> Option<usize> {
        self.priority_order.iter().position(|b| b == backend)
    }
}

/// Resolve tool names.
///
/// - `prefix`: every tool becomes `{prefix}{base}`.
/// - `priority`: a base offered once keeps its name; on a collision the
///   highest-ranked listed backend keeps it, other listed claimants are dropped, and
///   unlisted claimants fall back to the prefix.
/// - `manual`: names are kept; a collision is unresolved (every claimant dropped and
///   reported), since overrides were supposed to resolve it.
pub fn resolve_tools(naming: Naming<'_>, claims: &[Claim<'_>]) -> Resolution {
    let mut unresolved = Vec::new();
    let wanted: Vec<Option<String>> = match naming.strategy {
        Strategy::Prefix => claims.iter().map(|c| Some(naming.prefixed(c))).collect(),
        Strategy::Priority => {
            let groups = group_by_base(claims);
            claims
                .iter()
                .enumerate()
                .map(|(i, claim)| {
                    let group = &groups[claim.base];
                    if group.len() == 1 {
                        return Some(claim.base.to_owned());
                    }
                    let winner = group
                        .iter()
                        .filter_map(|&j| naming.rank(claims[j].backend).map(|r| (r, j)))
                        .min();
                    match (winner, naming.rank(claim.backend)) {
                        (Some((_, w)), _) if w == i => Some(claim.base.to_owned()),
                        (Some(_), Some(_)) => {
                            tracing::warn!(
                                backend = claim.backend,
                                tool = claim.base,
                                "tool dropped: a higher-priority backend owns this name"
                            );
                            None
                        }
                        _ => Some(naming.prefixed(claim)),
                    }
                })
                .collect()
        }
        Strategy::Manual => {
            let groups = group_by_base(claims);
            for (base, group) in &groups {
                if group.len() > 1 {
                    let owners: Vec<&str> = group.iter().map(|&j| claims[j].backend).collect();
                    unresolved.push(format!(
                        "tool {base:?} is offered by {} and no override renames it",
                        owners.join(", ")
                    ));
                }
            }
            claims
                .iter()
                .map(|c| (groups[c.base].len() == 1).then(|| c.base.to_owned()))
                .collect()
        }
    };
    Resolution {
        names: finish("tool", claims, wanted),
        unresolved,
    }
}

/// Resolve prompt names: always prefixed, except that under `priority` listed
/// backends keep bare names (the highest-ranked wins a bare collision and the loser is
/// dropped, never re-prefixed) while unlisted backends stay prefixed.
pub fn resolve_prompts(naming: Naming<'_>, claims: &[Claim<'_>]) -> Resolution {
    let wanted: Vec<Option<String>> = match naming.strategy {
        Strategy::Priority => {
            let mut best: HashMap<&str, usize> = HashMap::new();
            for claim in claims {
                if let Some(rank) = naming.rank(claim.backend) {
                    let entry = best.entry(claim.base).or_insert(rank);
                    *entry = (*entry).min(rank);
                }
            }
            claims
                .iter()
                .map(|claim| match naming.rank(claim.backend) {
                    Some(rank) if best[claim.base] == rank => Some(claim.base.to_owned()),
                    Some(_) => {
                        tracing::warn!(
                            backend = claim.backend,
                            prompt = claim.base,
                            "prompt dropped: a higher-priority backend owns this name"
                        );
                        None
                    }
                    None => Some(naming.prefixed(claim)),
                })
                .collect()
        }
        _ => claims.iter().map(|c| Some(naming.prefixed(c))).collect(),
    };
    Resolution {
        names: finish("prompt", claims, wanted),
        unresolved: Vec::new(),
    }
}

fn group_by_base<'c>(claims: &'c [Claim<'_>]) -> BTreeMap<&'c str, Vec<usize>> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, claim) in claims.iter().enumerate() {
        groups.entry(claim.base).or_default().push(i);
    }
    groups
}

/// Make names valid, then drop every claimant of a name that two claims compose to
/// (`b1` + `x_y` vs `b1_x` + `y`): keeping one would let it inherit policies written
/// for the other.
fn finish(kind: &str, claims: &[Claim<'_>], wanted: Vec<Option<String>>) -> Vec<Option<String>> {
    let mut names: Vec<Option<String>> = wanted
        .into_iter()
        .zip(claims)
        .map(|(name, claim)| {
            let name = name?;
            let valid = sanitize(&name);
            if valid.is_none() {
                tracing::warn!(
                    backend = claim.backend,
                    name = %name,
                    "{kind} dropped: its name cannot be made to match ^[a-zA-Z0-9_-]{{1,64}}$"
                );
            }
            valid
        })
        .collect();
    let mut owners: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, name) in names.iter().enumerate() {
        if let Some(name) = name {
            owners.entry(name.as_str()).or_default().push(i);
        }
    }
    let mut ambiguous: Vec<usize> = Vec::new();
    for (name, group) in &owners {
        if group.len() > 1 {
            let who: Vec<String> = group
                .iter()
                .map(|&i| format!("{}:{}", claims[i].backend, claims[i].base))
                .collect();
            tracing::error!(
                name = %name,
                claimants = %who.join(", "),
                "ambiguous {kind} name dropped: several backend capabilities compose to it"
            );
            ambiguous.extend(group);
        }
    }
    for i in ambiguous {
        names[i] = None;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims<'a>(pairs: &'a [(&'a str, &'a str)]) -> Vec<Claim<'a>> {
        pairs
            .iter()
            .map(|&(backend, base)| Claim { backend, base })
            .collect()
    }

    fn naming<'a>(strategy: Strategy, order: &'a [String]) -> Naming<'a> {
        Naming {
            strategy,
            prefix_format: "{workload}_",
            priority_order: order,
        }
    }

    fn names(r: &Resolution) -> Vec<Option<&str>> {
        r.names.iter().map(|n| n.as_deref()).collect()
    }

    #[test]
    fn prefix_applies_to_every_tool() {
        let c = claims(&[("a", "echo"), ("a", "add"), ("b", "echo")]);
        let r = resolve_tools(naming(Strategy::Prefix, &[]), &c);
        assert_eq!(
            names(&r),
            vec![Some("a_echo"), Some("a_add"), Some("b_echo")]
        );
    }

    #[test]
    fn prefix_ambiguity_drops_every_claimant() {
        let c = claims(&[("b1", "x_y"), ("b1_x", "y"), ("b1", "z")]);
        let r = resolve_tools(naming(Strategy::Prefix, &[]), &c);
        assert_eq!(names(&r), vec![None, None, Some("b1_z")]);
    }

    #[test]
    fn priority_listed_wins_and_unlisted_fall_back_to_prefix() {
        let order = vec!["b".to_owned(), "a".to_owned()];
        let c = claims(&[
            ("a", "echo"),
            ("b", "echo"),
            ("c", "echo"),
            ("a", "only_a"),
            ("c", "dup"),
            ("d", "dup"),
        ]);
        let r = resolve_tools(naming(Strategy::Priority, &order), &c);
        assert_eq!(
            names(&r),
            vec![
                None,
                Some("echo"),
                Some("c_echo"),
                Some("only_a"),
                Some("c_dup"),
                Some("d_dup")
            ]
        );
    }

    #[test]
    fn manual_reports_every_unresolved_collision() {
        let c = claims(&[
            ("a", "echo"),
            ("b", "echo"),
            ("a", "x"),
            ("c", "x"),
            ("c", "ok"),
        ]);
        let r = resolve_tools(naming(Strategy::Manual, &[]), &c);
        assert_eq!(names(&r), vec![None, None, None, None, Some("ok")]);
        assert_eq!(
            r.unresolved,
            vec![
                "tool \"echo\" is offered by a, b and no override renames it".to_owned(),
                "tool \"x\" is offered by a, c and no override renames it".to_owned()
            ]
        );
    }

    #[test]
    fn invalid_names_are_sanitized_or_dropped() {
        let long = "t".repeat(70);
        let pairs = [("a", "has space"), ("a", long.as_str())];
        let c = claims(&pairs);
        let r = resolve_tools(naming(Strategy::Prefix, &[]), &c);
        assert_eq!(names(&r), vec![Some("a_has_space"), None]);
    }

    #[test]
    fn prompts_always_prefixed_except_listed_under_priority() {
        let c = claims(&[("a", "greet"), ("b", "greet"), ("c", "greet")]);
        let r = resolve_prompts(naming(Strategy::Prefix, &[]), &c);
        assert_eq!(
            names(&r),
            vec![Some("a_greet"), Some("b_greet"), Some("c_greet")]
        );
        let r = resolve_prompts(naming(Strategy::Manual, &[]), &c);
        assert_eq!(
            names(&r),
            vec![Some("a_greet"), Some("b_greet"), Some("c_greet")]
        );
        let order = vec!["b".to_owned(), "a".to_owned()];
        let r = resolve_prompts(naming(Strategy::Priority, &order), &c);
        assert_eq!(names(&r), vec![None, Some("greet"), Some("c_greet")]);
    }

    #[test]
    fn resolution_is_independent_of_unrelated_backends() {
        let c1 = claims(&[("a", "echo"), ("b", "echo")]);
        let c2 = claims(&[("a", "echo"), ("b", "echo"), ("z", "other")]);
        let r1 = resolve_tools(naming(Strategy::Prefix, &[]), &c1);
        let r2 = resolve_tools(naming(Strategy::Prefix, &[]), &c2);
        assert_eq!(r1.names[..], r2.names[..2]);
    }
}
