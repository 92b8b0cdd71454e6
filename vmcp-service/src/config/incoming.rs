//! `incomingAuth:` — how callers authenticate: the YAML model, typed when parsed
//! ([`IncomingAuth`]: an OIDC section exists exactly when `type` is `oidc`, see
//! [`IncomingShape`]), and its validation with field paths.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use vmcp_layers::auth::{JwksSource, JwtSettings, ResourceMetadata};
use vmcp_layers::tls::{CaBundle, TlsError};

use super::authz::AuthzConfig;
use super::type_key::TypeKey;

/// `incomingAuth:` — how callers authenticate, and (`authz`) what they may do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "RawIncomingAuth", into = "RawIncomingAuth")]
pub struct IncomingAuthConfig {
    /// How callers authenticate (`type`, with `oidc` when it is `oidc`).
    pub auth: IncomingAuth,
    /// Authorization policies.
    pub authz: Option<AuthzConfig>,
}

// The section as written (the file's shape and the schema's), before `type` and
// `oidc` are checked against each other.
/// `incomingAuth:` — how callers authenticate, and (`authz`) what they may do.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "IncomingAuthConfig")]
pub(crate) struct RawIncomingAuth {
    /// `anonymous` or `oidc`.
    #[serde(rename = "type", default)]
    #[schemars(with = "String")]
    pub(crate) kind: TypeKey<AuthType>,
    /// OIDC/JWT settings, required when `type` is `oidc`.
    #[serde(default)]
    pub(crate) oidc: Option<OidcConfig>,
    /// Authorization policies.
    #[serde(default)]
    pub(crate) authz: Option<AuthzConfig>,
}

/// Why `incomingAuth.type` and its `oidc` section do not fit together. Displayed
/// relative to the section (`.oidc is required …`), so the loader can put its path
/// in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncomingShape {
    /// No `type`.
    #[error(".type is required (\"anonymous\" or \"oidc\")")]
    MissingType,
    /// A `type` that is neither.
    #[error(".type must be \"anonymous\" or \"oidc\" (got {0:?})")]
    UnknownType(String),
    /// `type: oidc` without its section.
    #[error(".oidc is required when type is \"oidc\"")]
    MissingOidc,
    /// An `oidc` section under `type: anonymous`.
    #[error(".oidc is only used with type \"oidc\"")]
    UnusedOidc,
}

impl TryFrom<RawIncomingAuth> for IncomingAuthConfig {
    type Error = IncomingShape;

    fn try_from(raw: RawIncomingAuth) -> Result<Self, IncomingShape> {
        let auth = match (raw.kind, raw.oidc) {
            (TypeKey::Missing, _) => return Err(IncomingShape::MissingType),
            (TypeKey::Unknown(other), _) => return Err(IncomingShape::UnknownType(other)),
            (TypeKey::Known(AuthType::Anonymous), None) => IncomingAuth::Anonymous,
            (TypeKey::Known(AuthType::Anonymous), Some(_)) => {
                return Err(IncomingShape::UnusedOidc);
            }
            (TypeKey::Known(AuthType::Oidc), None) => return Err(IncomingShape::MissingOidc),
            (TypeKey::Known(AuthType::Oidc), Some(oidc)) => IncomingAuth::Oidc(oidc),
        };
        Ok(Self {
            auth,
            authz: raw.authz,
        })
    }
}

impl From<IncomingAuthConfig> for RawIncomingAuth {
    fn from(config: IncomingAuthConfig) -> Self {
        let (kind, oidc) = match config.auth {
            IncomingAuth::Anonymous => (AuthType::Anonymous, None),
            IncomingAuth::Oidc(oidc) => (AuthType::Oidc, Some(oidc)),
        };
        Self {
            kind: kind.into(),
            oidc,
            authz: config.authz,
        }
    }
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

/// How callers authenticate: an OIDC section exists exactly when it is used.
#[derive(Debug, Clone, Default)]
pub enum IncomingAuth {
    /// Every caller is anonymous.
    #[default]
    Anonymous,
    /// Bearer JWTs from this issuer.
    Oidc(OidcConfig),
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
    /// Check the section's settings; each message names its field
    /// (`incomingAuth.oidc.issuer …`). Its shape was checked when it was parsed.
    pub fn validate(&self, errors: &mut Vec<String>) {
        if let IncomingAuth::Oidc(oidc) = &self.auth {
            oidc.validate(errors);
        }
        if let Some(authz) = &self.authz {
            authz.validate("incomingAuth.authz", errors);
        }
    }

    /// The OIDC settings, when callers present bearer tokens.
    pub fn oidc(&self) -> Option<&OidcConfig> {
        match &self.auth {
            IncomingAuth::Oidc(oidc) => Some(oidc),
            IncomingAuth::Anonymous => None,
        }
    }

    /// Whether callers present OIDC bearer tokens.
    pub fn is_oidc(&self) -> bool {
        self.oidc().is_some()
    }

    /// The claim naming the caller's groups, from the authz section.
    pub(crate) fn group_claim(&self) -> Option<&str> {
        self.authz.as_ref()?.group_claim_name.as_deref()
    }

    /// The authentication this section configures, as a layer of its own (for
    /// routes outside the MCP pipeline, such as `/status`): bearer JWTs when `oidc`,
    /// anonymous otherwise. Fails only when the OIDC CA bundle cannot be read.
    pub fn auth_layer(&self) -> Result<vmcp_layers::auth::AuthLayer, TlsError> {
        match &self.auth {
            IncomingAuth::Oidc(oidc) => oidc.auth_layer(self.group_claim()),
            IncomingAuth::Anonymous => Ok(vmcp_layers::auth::AuthLayer::anonymous()),
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
            auth: IncomingAuth::Oidc(OidcConfig {
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
    fn the_type_and_the_oidc_section_fit_when_parsed() {
        let parse = |yaml: &str| {
            serde_yaml_ng::from_str::<IncomingAuthConfig>(yaml).map_err(|e| e.to_string())
        };
        for (yaml, expected) in [
            ("type: ''", ".type is required (\"anonymous\" or \"oidc\")"),
            (
                "type: odic",
                ".type must be \"anonymous\" or \"oidc\" (got \"odic\")",
            ),
            ("type: oidc", ".oidc is required when type is \"oidc\""),
            (
                "{type: anonymous, oidc: {issuer: 'https://i'}}",
                ".oidc is only used with type \"oidc\"",
            ),
        ] {
            let error = parse(yaml).expect_err(yaml);
            assert!(error.starts_with(expected), "{yaml}: {error}");
        }
        assert!(matches!(
            parse("{type: anonymous, oidc: null}").map(|c| c.auth),
            Ok(IncomingAuth::Anonymous)
        ));
        let oidc = parse("{type: oidc, oidc: {issuer: 'https://i', audience: a}}").unwrap();
        assert_eq!(oidc.oidc().map(|o| o.audience.as_str()), Some("a"));
        // Written back in the file's shape.
        let written = serde_json::to_value(&oidc).unwrap();
        assert_eq!(written["type"], "oidc");
        assert_eq!(written["oidc"]["issuer"], "https://i");
    }
}
