//! Loading Cedar policies from the configuration: inline texts and `.cedar` files,
//! each policy named by where it came from, so startup errors point at the field.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use cedar_policy::{Policy, PolicyId, PolicySet};

use super::error::{PolicyError, PolicyErrors};

/// Where a policy came from, for startup errors.
#[derive(Debug, Clone)]
pub enum PolicySource {
    /// `policies[i]` of the configuration (`field` is the full path).
    Inline {
        /// The configuration path, e.g. `incomingAuth.authz.policies[2]`.
        field: String,
        /// The policy text.
        text: String,
    },
    /// A `.cedar` file.
    File {
        /// The configuration path, e.g. `incomingAuth.authz.policyFiles[0]`.
        field: String,
        /// The file.
        path: PathBuf,
    },
}

/// Parse policies, naming each by its location (or its `@id` annotation).
/// Errors name the location: `incomingAuth.authz.policies[1]: …`.
pub fn load_policies(sources: &[PolicySource]) -> Result<PolicySet, PolicyErrors> {
    let mut set = PolicySet::new();
    let mut errors = Vec::new();
    for source in sources {
        let (field, text) = match source {
            PolicySource::Inline { field, text } => (field.clone(), text.clone()),
            PolicySource::File { field, path } => match std::fs::read_to_string(path) {
                Ok(text) => (format!("{field} ({})", path.display()), text),
                Err(source) => {
                    errors.push(PolicyError::Read {
                        field: field.clone(),
                        path: path.clone(),
                        source,
                    });
                    continue;
                }
            },
        };
        let parsed = match PolicySet::from_str(&text) {
            Ok(parsed) => parsed,
            Err(e) => {
                let detail: Vec<String> = e.iter().map(|e| e.to_string()).collect();
                errors.push(PolicyError::Invalid {
                    field,
                    detail: detail.join("; "),
                });
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            errors.push(PolicyError::Template { field });
            continue;
        }
        let policies: Vec<&Policy> = parsed.policies().collect();
        if policies.is_empty() {
            errors.push(PolicyError::Empty {
                field: field.clone(),
            });
        }
        let many = policies.len() > 1;
        for (k, policy) in policies.into_iter().enumerate() {
            let id = match policy.annotation("id") {
                Some(id) => id.to_owned(),
                None if many => format!("{field}#{k}"),
                None => field.clone(),
            };
            if let Err(source) = set.add(policy.new_id(PolicyId::new(&id))) {
                errors.push(PolicyError::Conflict {
                    field: field.clone(),
                    source: Box::new(source),
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(PolicyErrors(errors))
    }
}

/// Sources for a config's inline policies and policy files.
pub fn sources(prefix: &str, inline: &[String], files: &[PathBuf]) -> Vec<PolicySource> {
    inline
        .iter()
        .enumerate()
        .map(|(i, text)| PolicySource::Inline {
            field: format!("{prefix}.policies[{i}]"),
            text: text.clone(),
        })
        .chain(
            files
                .iter()
                .enumerate()
                .map(|(i, path)| PolicySource::File {
                    field: format!("{prefix}.policyFiles[{i}]"),
                    path: Path::new(path).to_path_buf(),
                }),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_policies_name_their_location() {
        let sources = sources(
            "incomingAuth.authz",
            &[
                "permit(principal, action, resource);".into(),
                "permit(principal,".into(),
            ],
            &[PathBuf::from("/nonexistent/x.cedar")],
        );
        let errors: Vec<String> = load_policies(&sources)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("incomingAuth.authz.policies[1]: invalid Cedar policy"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1]
                .starts_with("incomingAuth.authz.policyFiles[0]: cannot read /nonexistent/x.cedar"),
            "{}",
            errors[1]
        );
    }
}
