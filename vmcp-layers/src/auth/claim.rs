//! A claim an identity must carry, for routes meant for operators only.

use serde_json::Value;

use crate::context::Identity;

/// The identity's `claim` must hold one of `values`: equal to it (a string claim,
/// or one word of a space-separated one such as `scope`), or contain it (an array
/// claim such as `groups` or `roles`). `groups` also matches the identity's groups
/// (read from the configured group claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredClaim {
    /// The claim's name in the validated token.
    pub claim: String,
    /// The accepted values; any one suffices.
    pub values: Vec<String>,
}

impl RequiredClaim {
    /// Whether `identity` carries the claim.
    pub fn admits(&self, identity: &Identity) -> bool {
        let wanted = |v: &str| self.values.iter().any(|w| w == v);
        if self.claim == "groups" && identity.groups.iter().any(|g| wanted(g)) {
            return true;
        }
        match identity.claims.get(&self.claim) {
            Some(Value::String(s)) => wanted(s) || s.split(' ').any(wanted),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).any(wanted),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity(claims: Value) -> Identity {
        Identity {
            subject: "s".into(),
            issuer: Some("i".into()),
            groups: vec!["g1".into()],
            claims: claims.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn strings_words_arrays_and_groups() {
        let role = RequiredClaim {
            claim: "roles".into(),
            values: vec!["ops".into(), "admin".into()],
        };
        assert!(role.admits(&identity(json!({"roles": ["x", "ops"]}))));
        assert!(role.admits(&identity(json!({"roles": "admin"}))));
        assert!(!role.admits(&identity(json!({"roles": ["opsx"]}))));
        assert!(!role.admits(&identity(json!({"roles": 1}))));
        assert!(!role.admits(&identity(json!({}))));
        let scope = RequiredClaim {
            claim: "scope".into(),
            values: vec!["vmcp:operate".into()],
        };
        assert!(scope.admits(&identity(json!({"scope": "openid vmcp:operate"}))));
        let groups = RequiredClaim {
            claim: "groups".into(),
            values: vec!["g1".into()],
        };
        assert!(groups.admits(&identity(json!({}))));
    }
}
