//! `incomingAuth:` — how callers authenticate: the YAML model, its validation with
//! field paths, and the typed view ([`IncomingAuth`]) the stack is built from.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use vmcp_layers::auth::{JwksSource, JwtSettings, ResourceMetadata};
use vmcp_layers::tls::{CaBundle, TlsError};

use super::authz::AuthzConfig;
use super::type_key::TypeKey;

/// `incomingAuth:` — how callers authenticate, and (`authz`) what they may do.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncomingAuthConfig {
    /// `anonymous` or `oidc`.
    #[serde(rename = "type", default)]
    #[schemars(with = "String")]
    pub kind: TypeKey<AuthType>,
    /// OIDC/JWT settings, required when `type` is `oidc`.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
    /// Authorization policies.
    #[serde(default)]
    pub authz: Option<AuthzConfig>,
}

/// The spellings of `incomingAuth.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthType {
    /// Every caller is anonymous.
    Anonymous,
    /// Bearer JWTs from an OIDC issuer.
    Oidc,
}

/// How callers authenticate, once the section is consistent: an OIDC section
/// exists exactly when it is used.
#[derive(Debug, Clone, Copy)]
pub enum IncomingAuth<'a> {
    /// Every caller is anonymous.
    Anonymous,
    /// Bearer JWTs from this issuer.
    Oidc(&'a OidcConfig),
}

/// `incomingAuth.oidc:` — the token issuer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcConfig {
    /// The issuer (`iss`); keys are discovered from its
    /// `/.well-known/openid-configuration` unless `jwksUrl` is set.
    #[serde(default)]
    pub issuer: String,
    /// The audience tokens must carry (`aud`).
    #[serde(default)]
    pub audience: String,
    /// The JWKS URL, skipping discovery.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// This server's resource identifier (its public MCP URL), announced in the
    /// protected-resource metadata. Default: derived from the request's `Host`.
    #[serde(default)]
    pub resource: Option<String>,
    /// Scopes announced in the protected-resource metadata.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Clock skew tolerated on `exp`/`nbf` (default 30s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub leeway: Option<Duration>,
    /// The least time between two JWKS fetches triggered by unknown key ids
    /// (default 10s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub jwks_refresh_min_interval: Option<Duration>,
    /// Allow `http://` issuer and JWKS URLs that are not loopback.
    #[serde(default)]
    pub insecure_allow_http: bool,
    /// Extra CA certificates (PEM, absolute path) trusted for discovery and JWKS,
    /// besides the platform and webpki roots.
    #[serde(default)]
    pub ca_bundle_path: Option<std::path::PathBuf>,
}

fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
        .is_some_and(|h| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        })
}

impl IncomingAuthConfig {
    /// Check the section; each message names its field (`incomingAuth.oidc.issuer …`).
    pub fn validate(&self, errors: &mut Vec<String>) {
        match (&self.kind, &self.oidc) {
            (TypeKey::Known(AuthType::Anonymous), _) => {}
            (TypeKey::Known(AuthType::Oidc), None) => {
                errors.push("incomingAuth.oidc is required when type is \"oidc\"".into())
            }
            (TypeKey::Known(AuthType::Oidc), Some(oidc)) => oidc.validate(errors),
            (TypeKey::Missing, _) => {
                errors.push("incomingAuth.type is required (\"anonymous\" or \"oidc\")".into())
            }
            (TypeKey::Unknown(other), _) => errors.push(format!(
                "incomingAuth.type must be \"anonymous\" or \"oidc\" (got {other:?})"
            )),
        }
        if let Some(authz) = &self.authz {
            authz.validate("incomingAuth.authz", errors);
        }
    }

    /// How callers authenticate; `None` when the section is not consistent (see
    /// [`IncomingAuthConfig::validate`]).
    pub fn authentication(&self) -> Option<IncomingAuth<'_>> {
        match (self.kind.known()?, &self.oidc) {
            (AuthType::Anonymous, _) => Some(IncomingAuth::Anonymous),
            (AuthType::Oidc, Some(oidc)) => Some(IncomingAuth::Oidc(oidc)),
            (AuthType::Oidc, None) => None,
        }
    }

    /// Whether callers present OIDC bearer tokens.
    pub fn is_oidc(&self) -> bool {
        self.kind == TypeKey::Known(AuthType::Oidc)
    }

    /// The claim naming the caller's groups, from the authz section.
    pub(crate) fn group_claim(&self) -> Option<&str> {
        self.authz.as_ref()?.group_claim_name.as_deref()
    }

    /// The authentication this section configures, as a layer of its own (for
    /// routes outside the MCP pipeline, such as `/status`): bearer JWTs when `oidc`,
    /// anonymous otherwise. Fails only when the OIDC CA bundle cannot be read.
    pub fn auth_layer(&self) -> Result<vmcp_layers::auth::AuthLayer, TlsError> {
        match self.authentication() {
            Some(IncomingAuth::Oidc(oidc)) => oidc.auth_layer(self.group_claim()),
            _ => Ok(vmcp_layers::auth::AuthLayer::anonymous()),
        }
    }
}

impl OidcConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        let mut url = |field: &str, value: &str| {
            if value.is_empty() {
                errors.push(format!("incomingAuth.oidc.{field} is required"));
            } else if reqwest::Url::parse(value).is_err() {
                errors.push(format!("incomingAuth.oidc.{field} {value:?} is not a URL"));
            } else if !(value.starts_with("https://")
                || (value.starts_with("http://")
                    && (self.insecure_allow_http || is_loopback_url(value))))
            {
                errors.push(format!(
                    "incomingAuth.oidc.{field} must use https:// (or set insecureAllowHttp)"
                ));
            }
        };
        url("issuer", &self.issuer);
        if let Some(jwks) = &self.jwks_url {
            url("jwksUrl", jwks);
        }
        if self.audience.is_empty() {
            errors.push("incomingAuth.oidc.audience is required".into());
        }
        super::validate::validate_ca_path(
            "incomingAuth.oidc.caBundlePath",
            self.ca_bundle_path.as_deref(),
            errors,
        );
    }

    /// The HTTPS client for discovery and JWKS: default roots plus `caBundlePath`.
    pub fn http_client(&self) -> Result<reqwest::Client, TlsError> {
        let bundle = self
            .ca_bundle_path
            .as_deref()
            .map(CaBundle::load)
            .transpose()?;
        vmcp_layers::tls::http_client(reqwest::Client::builder(), bundle.as_ref())
    }

    /// Validator settings from this section (`group_claim` from the authz section).
    pub fn settings(&self, group_claim: Option<&str>) -> JwtSettings {
        let mut settings = JwtSettings::new(&self.issuer, &self.audience);
        if let Some(url) = &self.jwks_url {
            settings.jwks = JwksSource::Url(url.clone());
        }
        if let Some(leeway) = self.leeway {
            settings.leeway = leeway;
        }
        if let Some(interval) = self.jwks_refresh_min_interval {
            settings.refresh_min_interval = interval;
        }
        if let Some(claim) = group_claim {
            settings.group_claim = claim.to_owned();
        }
        settings
    }

    /// What the protected-resource metadata announces.
    pub fn resource_metadata(&self) -> ResourceMetadata {
        ResourceMetadata {
            issuer: self.issuer.clone(),
            resource: self.resource.clone(),
            scopes: self.scopes.clone(),
        }
    }

    /// The bearer-JWT layer for this issuer.
    pub(crate) fn auth_layer(
        &self,
        group_claim: Option<&str>,
    ) -> Result<vmcp_layers::auth::AuthLayer, TlsError> {
        let validator =
            vmcp_layers::auth::JwtValidator::new(self.settings(group_claim), self.http_client()?);
        Ok(vmcp_layers::auth::AuthLayer::jwt(
            std::sync::Arc::new(validator),
            self.resource.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_fields() {
        let mut errors = Vec::new();
        IncomingAuthConfig {
            kind: AuthType::Oidc.into(),
            oidc: Some(OidcConfig {
                issuer: "http://idp.example.com".into(),
                ..OidcConfig::default()
            }),
            authz: None,
        }
        .validate(&mut errors);
        assert_eq!(
            errors,
            vec![
                "incomingAuth.oidc.issuer must use https:// (or set insecureAllowHttp)",
                "incomingAuth.oidc.audience is required"
            ]
        );
    }

    #[test]
    fn type_keys_keep_what_was_written() {
        let parse = |yaml: &str| serde_yaml_ng::from_str::<IncomingAuthConfig>(yaml).unwrap();
        let mut errors = Vec::new();
        parse("type: ''").validate(&mut errors);
        parse("type: odic").validate(&mut errors);
        parse("type: oidc").validate(&mut errors);
        assert_eq!(
            errors,
            vec![
                "incomingAuth.type is required (\"anonymous\" or \"oidc\")",
                "incomingAuth.type must be \"anonymous\" or \"oidc\" (got \"odic\")",
                "incomingAuth.oidc is required when type is \"oidc\"",
            ]
        );
        assert!(parse("type: oidc").authentication().is_none());
        assert!(matches!(
            parse("type: anonymous").authentication(),
            Some(IncomingAuth::Anonymous)
        ));
    }
}
