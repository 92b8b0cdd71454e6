//! `incomingAuth.authz:` — authorization policies: the YAML model, its validation
//! (policies are parsed, errors name the policy's location) and the Cedar
//! authorizer it describes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use vmcp_layers::authz::cedar::{self, CedarAuthorizer, CedarSettings, PolicyError, PolicyErrors};

use super::type_key::TypeKey;

/// `incomingAuth.authz:` — authorization policies.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthzConfig {
    /// `cedar` or `none`.
    #[serde(rename = "type", default)]
    #[schemars(with = "String")]
    pub kind: TypeKey<AuthzType>,
    /// Inline Cedar policies, one or more per string.
    #[serde(default)]
    pub policies: Vec<String>,
    /// `.cedar` files of policies.
    #[serde(default)]
    pub policy_files: Vec<PathBuf>,
    /// The claim listing the caller's groups (default `groups`).
    #[serde(default)]
    pub group_claim_name: Option<String>,
    /// A claim listing the caller's roles, also used as parents.
    #[serde(default)]
    pub role_claim_name: Option<String>,
    /// The Cedar entity type of groups and roles (default `THVGroup`).
    #[serde(default)]
    pub group_entity_type: Option<String>,
}

/// The spellings of `incomingAuth.authz.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthzType {
    /// Cedar policies decide.
    Cedar,
    /// Everything is allowed.
    None,
}

/// What decides, once the section is consistent.
#[derive(Debug, Clone, Copy)]
pub enum Authz<'a> {
    /// Nothing: every call is allowed.
    None,
    /// Cedar policies from this section.
    Cedar(&'a AuthzConfig),
}

impl AuthzConfig {
    /// What decides; `None` when `type` is missing or unknown (see
    /// [`AuthzConfig::validate`]).
    pub fn authorization(&self) -> Option<Authz<'_>> {
        match self.kind.known()? {
            AuthzType::Cedar => Some(Authz::Cedar(self)),
            AuthzType::None => Some(Authz::None),
        }
    }

    /// Check the section; policies are parsed, and errors name the policy's location.
    pub fn validate(&self, prefix: &str, errors: &mut Vec<String>) {
        match &self.kind {
            TypeKey::Known(AuthzType::None) => {}
            TypeKey::Known(AuthzType::Cedar) => {
                if self.policies.is_empty() && self.policy_files.is_empty() {
                    errors.push(format!(
                        "{prefix}.policies (or policyFiles) is required when type is \"cedar\""
                    ));
                } else if let Err(problems) = self.authorizer(prefix, None) {
                    errors.extend(problems.iter().map(|p| located(prefix, p)));
                }
            }
            TypeKey::Missing => {
                errors.push(format!("{prefix}.type is required (\"cedar\" or \"none\")"))
            }
            TypeKey::Unknown(other) => errors.push(format!(
                "{prefix}.type must be \"cedar\" or \"none\" (got {other:?})"
            )),
        }
    }

    /// Build the Cedar authorizer (`server_name` becomes `MCP::"<name>"`); each
    /// problem names its location under `prefix`.
    pub fn authorizer(
        &self,
        prefix: &str,
        server_name: Option<&str>,
    ) -> Result<CedarAuthorizer, PolicyErrors> {
        let settings = CedarSettings {
            group_entity_type: self
                .group_entity_type
                .clone()
                .unwrap_or_else(|| "THVGroup".to_owned()),
            role_claim: self.role_claim_name.clone(),
            server_name: server_name.map(str::to_owned),
        };
        CedarAuthorizer::from_sources(
            &cedar::sources(prefix, &self.policies, &self.policy_files),
            settings,
        )
    }
}

/// `error` as `vmcp validate` says it: a settings problem is not tied to one policy,
/// so it is named by the section (`incomingAuth.authz: groupEntityType …`).
pub(crate) fn located(prefix: &str, error: &PolicyError) -> String {
    match error {
        PolicyError::Settings(_) => format!("{prefix}: {error}"),
        _ => error.to_string(),
    }
}
