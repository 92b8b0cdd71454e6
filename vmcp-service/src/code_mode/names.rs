//! Tool names as Starlark identifiers (docs/code-mode.md#tool-names).
//!
//! A tool name may hold characters an identifier cannot (`github.create-issue`), or
//! be a Starlark keyword or one of the script's own globals. The rules, applied to
//! the tools sorted by name so the result does not depend on listing order:
//!
//! 1. every character other than an ASCII letter, digit or `_` becomes `_`;
//! 2. a name starting with a digit (or empty) gets a leading `_`;
//! 3. a keyword, a builtin or a name the script environment defines gets a
//!    trailing `_` (`print` → `print_`);
//! 4. a tool whose name is already an identifier keeps it; the others, in name
//!    order, get `_2`, `_3`, … (the first free) when their identifier is taken.

use std::collections::BTreeSet;

/// Names a script cannot rebind: Starlark keywords, reserved words and builtins,
/// and the script environment's own globals.
const RESERVED: &[&str] = &[
    // Keywords and reserved words.
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "load",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "True",
    "False",
    "None",
    // Builtins.
    "abs",
    "any",
    "all",
    "bool",
    "call_stack",
    "chr",
    "dict",
    "dir",
    "enumerate",
    "fail",
    "filter",
    "float",
    "getattr",
    "hasattr",
    "hash",
    "int",
    "isinstance",
    "json",
    "len",
    "list",
    "map",
    "max",
    "min",
    "ord",
    "partial",
    "print",
    "range",
    "repr",
    "reversed",
    "sorted",
    "str",
    "struct",
    "tuple",
    "type",
    "zip",
    "debug",
    // The script environment.
    "data",
    "parallel",
];

/// The identifier of each tool in `names` (same order), by the module's rules.
pub(crate) fn identifiers(names: &[&str]) -> Vec<String> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    // Names that need no change first, so a tool called `a_b` is never renamed
    // because another one is called `a.b`.
    order.sort_by_key(|&i| (sanitize(names[i]) != names[i], names[i]));
    let mut taken = BTreeSet::new();
    let mut out = vec![String::new(); names.len()];
    for i in order {
        let base = sanitize(names[i]);
        let mut candidate = base.clone();
        let mut n = 2;
        while taken.contains(&candidate) {
            candidate = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(candidate.clone());
        out[i] = candidate;
    }
    out
}

/// One name by rules 1–3.
fn sanitize(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    // The script's own helpers start with `__`: a tool never shadows them.
    if RESERVED.contains(&id.as_str()) || id.starts_with("__") {
        id.push('_');
        if id.starts_with("__") {
            id.insert(0, 't');
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_identifiers() {
        assert_eq!(
            identifiers(&["github.create-issue", "3d", "print", "", "ok_name", "__x"]),
            [
                "github_create_issue",
                "_3d",
                "print_",
                "_",
                "ok_name",
                "t__x_"
            ]
        );
    }

    #[test]
    fn collisions_are_numbered_in_name_order() {
        // `a_b` keeps its name; "a-b" sorts before "a.b".
        assert_eq!(
            identifiers(&["a_b", "a.b", "a-b"]),
            ["a_b", "a_b_3", "a_b_2"]
        );
        // A numbered name already taken moves on to the next number.
        assert_eq!(
            identifiers(&["x.y", "x_y_2", "x-y"]),
            ["x_y_3", "x_y_2", "x_y"]
        );
    }
}
