//! Advertised-name rules shared by tools and prompts.
//!
//! Strict clients accept only `^[a-zA-Z0-9_-]{1,64}$`, so every advertised tool and
//! prompt name is brought into that shape or dropped.

/// True when `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Make `name` valid by replacing each disallowed character with `_`.
///
/// Returns `None` when no valid name can be made without losing information
/// (empty, or longer than 64 characters): truncating would silently merge names.
pub fn sanitize(name: &str) -> Option<String> {
    if is_valid_name(name) {
        return Some(name.to_owned());
    }
    let fixed: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    is_valid_name(&fixed).then_some(fixed)
}

/// Apply a prefix format (`{workload}_` by default) to a backend name.
///
/// `{workload}` is replaced by the backend name; a format without the placeholder is a
/// static prefix.
pub(crate) fn prefix(format: &str, backend: &str) -> String {
    format.replace("{workload}", backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_follows_the_strict_pattern() {
        assert!(is_valid_name("get-sum"));
        assert!(is_valid_name("a_b-C9"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a.b"));
        assert!(!is_valid_name(&"x".repeat(65)));
        assert!(is_valid_name(&"x".repeat(64)));
    }

    #[test]
    fn sanitizing_replaces_or_gives_up() {
        assert_eq!(
            sanitize("github.create issue").as_deref(),
            Some("github_create_issue")
        );
        assert_eq!(sanitize("ok").as_deref(), Some("ok"));
        assert_eq!(sanitize(""), None);
        assert_eq!(sanitize(&"y".repeat(70)), None);
    }

    #[test]
    fn prefix_formats() {
        assert_eq!(prefix("{workload}_", "gh"), "gh_");
        assert_eq!(prefix("{workload}.", "gh"), "gh.");
        assert_eq!(prefix("corp-", "gh"), "corp-");
    }
}
