//! Why an authorizer could not be built or a decision made, and why policies did
//! not load.

use std::path::PathBuf;

/// The error Cedar gave, kept as the source.
type CedarSource = Box<dyn std::error::Error + Send + Sync>;

/// Why an authorizer could not be built, or a decision could not be made (a
/// decision that fails is a denial).
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// `CedarSettings::group_entity_type` is not a Cedar type name.
    #[error("groupEntityType {name:?} is not a Cedar type name: {source}")]
    GroupEntityType {
        /// The configured name.
        name: String,
        /// What Cedar said.
        source: CedarSource,
    },
    /// The caller's entity could not be built from its identity.
    #[error("authorization error: principal entity: {0}")]
    Principal(#[source] CedarSource),
    /// The target's entity could not be built.
    #[error("authorization error: resource entity: {0}")]
    Resource(#[source] CedarSource),
    /// The entity set of a decision was inconsistent.
    #[error("authorization error: entities: {0}")]
    Entities(#[source] CedarSource),
    /// The Cedar request was refused.
    #[error("authorization error: request: {0}")]
    Request(#[source] CedarSource),
    /// The arguments could not become a Cedar record (too deep, or not representable).
    #[error("authorization error: arguments could not be converted")]
    Arguments,
    /// The decision context could not be built.
    #[error("authorization error: context: {0}")]
    Context(#[source] CedarSource),
}

/// Why a policy (or the authorizer over the policies) could not be loaded. Each
/// names the source's location: `incomingAuth.authz.policies[1]: …`.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A policy file could not be read.
    #[error("{field}: cannot read {}: {source}", path.display())]
    Read {
        /// The source's location.
        field: String,
        /// The file.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
    /// The text is not Cedar.
    #[error("{field}: invalid Cedar policy: {detail}")]
    Invalid {
        /// The source's location (with the file's path for a file).
        field: String,
        /// What the Cedar parser said, one message per problem.
        detail: String,
    },
    /// The text holds a policy template.
    #[error("{field}: policy templates are not supported")]
    Template {
        /// The source's location.
        field: String,
    },
    /// The text holds no policy.
    #[error("{field}: contains no policy")]
    Empty {
        /// The source's location.
        field: String,
    },
    /// A policy could not join the set (a duplicate id).
    #[error("{field}: {source}")]
    Conflict {
        /// The source's location.
        field: String,
        /// What Cedar said.
        source: Box<cedar_policy::PolicySetError>,
    },
    /// The authorizer's settings are not usable (a group entity type that is not a
    /// Cedar type name); not tied to one source.
    #[error(transparent)]
    Settings(AuthzError),
}

/// Every problem found in a set of policies, in source order.
#[derive(Debug, thiserror::Error)]
#[error("{}", join(.0))]
pub struct PolicyErrors(pub Vec<PolicyError>);

fn join(errors: &[PolicyError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PolicyErrors {
    /// The problems, in source order.
    pub fn iter(&self) -> std::slice::Iter<'_, PolicyError> {
        self.0.iter()
    }
}

impl IntoIterator for PolicyErrors {
    type Item = PolicyError;
    type IntoIter = std::vec::IntoIter<PolicyError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
