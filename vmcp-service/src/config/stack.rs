//! The layer stack the `incomingAuth`, `audit` and `telemetry` sections ask for:
//! each section's typed settings handed to the layer constructors of `vmcp-layers`.

use std::sync::Arc;

use vmcp_layers::audit::AuditLayer;
use vmcp_layers::authz::cedar::PolicyErrors;
use vmcp_layers::stack::StackBuilder;
use vmcp_layers::telemetry::{Telemetry, TelemetryError};
use vmcp_layers::tls::TlsError;

use super::authz::{Authz, located};
use super::incoming::IncomingAuth;
use super::{AuditConfig, IncomingAuthConfig, TelemetryConfig};

/// One reason a configured layer could not be built. The text names the field.
#[derive(Debug, thiserror::Error)]
pub enum StackProblem {
    /// `incomingAuth` was not validated and is not consistent (a missing or unknown
    /// `type`, or `oidc` without its section); refused rather than left open.
    #[error("{0} is not valid (validate the configuration first)")]
    Unvalidated(&'static str),
    /// The OIDC CA bundle could not be read, or the HTTPS client built.
    #[error("incomingAuth.oidc.caBundlePath: {0}")]
    OidcClient(#[source] TlsError),
    /// The Cedar policies did not load; each problem names its policy.
    #[error("{}", .0.iter().map(|e| located("incomingAuth.authz", e)).collect::<Vec<_>>().join("; "))]
    Policies(#[source] PolicyErrors),
    /// The audit log file could not be opened.
    #[error("audit.logFile: {0}")]
    AuditLog(#[source] std::io::Error),
    /// The telemetry CA bundle could not be read.
    #[error("telemetry.caCertPath: {0}")]
    TelemetryCa(#[source] TlsError),
    /// The telemetry pipeline could not be built.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
}

/// Why the stack could not be built from the configuration: every problem found.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct StackError(pub Vec<StackProblem>);

/// The layers the configuration sections ask for. `server_name` is the Cedar
/// `MCP::"<name>"` parent. Sections should have been validated; one that is not
/// consistent is refused ([`StackProblem::Unvalidated`]).
pub fn stack_builder(
    incoming_auth: Option<&IncomingAuthConfig>,
    audit: Option<&AuditConfig>,
    telemetry: Option<&TelemetryConfig>,
    server_name: Option<&str>,
) -> Result<StackBuilder, StackError> {
    let mut builder = StackBuilder::new();
    let mut problems = Vec::new();
    if let Some(auth) = incoming_auth {
        match &auth.auth {
            IncomingAuth::Anonymous => {}
            IncomingAuth::Oidc(oidc) => match oidc.auth_layer(auth.group_claim()) {
                Ok(layer) => {
                    builder = builder
                        .auth(layer)
                        .resource_metadata(oidc.resource_metadata());
                }
                Err(e) => problems.push(StackProblem::OidcClient(e)),
            },
        }
        match auth.authz.as_ref().map(|a| a.authorization()) {
            None | Some(Some(Authz::None)) => {}
            Some(None) => problems.push(StackProblem::Unvalidated("incomingAuth.authz.type")),
            Some(Some(Authz::Cedar(authz))) => {
                match authz.authorizer("incomingAuth.authz", server_name) {
                    Ok(a) => builder = builder.authorizer(Arc::new(a)),
                    Err(e) => problems.push(StackProblem::Policies(e)),
                }
            }
        }
    }
    if let Some(audit) = audit.filter(|a| a.enabled) {
        match AuditLayer::open(audit.settings(), audit.log_file.as_deref()) {
            Ok(layer) => builder = builder.audit(layer),
            Err(e) => problems.push(StackProblem::AuditLog(e)),
        }
    }
    if let Some(telemetry) = telemetry {
        match telemetry.settings() {
            Err(e) => problems.push(StackProblem::TelemetryCa(e)),
            Ok(settings) => match Telemetry::new(&settings) {
                Ok(t) => builder = builder.telemetry(Arc::new(t)),
                Err(e) => problems.push(e.into()),
            },
        }
    }
    if problems.is_empty() {
        Ok(builder)
    } else {
        Err(StackError(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_their_field() {
        let auth: IncomingAuthConfig = serde_json::from_value(serde_json::json!({
            "type": "anonymous",
            "authz": {"type": "cedar", "policies": ["permit(principal,"]}
        }))
        .unwrap();
        let audit = AuditConfig {
            log_file: Some("/nonexistent/dir/audit.log".into()),
            ..AuditConfig::default()
        };
        let error = stack_builder(Some(&auth), Some(&audit), None, None).unwrap_err();
        assert_eq!(error.0.len(), 2, "{error}");
        let text = error.to_string();
        assert!(
            text.starts_with("incomingAuth.authz.policies[0]: invalid Cedar policy"),
            "{text}"
        );
        assert!(text.contains("; audit.logFile: "), "{text}");

        let unchecked: IncomingAuthConfig = serde_json::from_value(serde_json::json!({
            "type": "anonymous", "authz": {"type": "cedr"}
        }))
        .unwrap();
        let error = stack_builder(Some(&unchecked), None, None, None).unwrap_err();
        assert!(matches!(
            error.0[..],
            [StackProblem::Unvalidated("incomingAuth.authz.type")]
        ));
    }
}
