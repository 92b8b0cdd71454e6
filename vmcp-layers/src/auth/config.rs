//! `incomingAuth:` — the YAML model of authentication and authorization, its
//! validation, and the protected-resource metadata routes it describes.

use std::time::Duration;

use http::{HeaderMap, header};
use serde::{Deserialize, Serialize};

use super::jwt::JwtSettings;
use crate::authz::AuthzConfig;

/// `incomingAuth:` — how callers authenticate, and (`authz`) what they may do.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncomingAuthConfig {
    /// `anonymous` or `oidc`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// OIDC/JWT settings, required when `type` is `oidc`.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
    /// Authorization policies.
    #[serde(default)]
    pub authz: Option<AuthzConfig>,
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
        match self.kind.as_str() {
            "anonymous" => {}
            "oidc" => match &self.oidc {
                None => errors.push("incomingAuth.oidc is required when type is \"oidc\"".into()),
                Some(oidc) => oidc.validate(errors),
            },
            "" => errors.push("incomingAuth.type is required (\"anonymous\" or \"oidc\")".into()),
            other => errors.push(format!(
                "incomingAuth.type must be \"anonymous\" or \"oidc\" (got {other:?})"
            )),
        }
        if let Some(authz) = &self.authz {
            authz.validate("incomingAuth.authz", errors);
        }
    }

    /// The authentication this section configures, as a layer of its own (for
    /// routes outside the MCP pipeline, such as `/status`): bearer JWTs when `oidc`,
    /// anonymous otherwise. Fails only when the OIDC CA bundle cannot be read.
    pub fn auth_layer(&self) -> Result<super::AuthLayer, crate::tls::TlsError> {
        match (self.kind.as_str(), &self.oidc) {
            ("oidc", Some(oidc)) => {
                let group_claim = self
                    .authz
                    .as_ref()
                    .and_then(|a| a.group_claim_name.as_deref());
                let validator =
                    super::JwtValidator::new(oidc.settings(group_claim), oidc.http_client()?);
                Ok(super::AuthLayer::jwt(
                    std::sync::Arc::new(validator),
                    oidc.resource.clone(),
                ))
            }
            _ => Ok(super::AuthLayer::anonymous()),
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
        crate::tls::validate_ca_path(
            "incomingAuth.oidc.caBundlePath",
            self.ca_bundle_path.as_deref(),
            errors,
        );
    }

    /// The HTTPS client for discovery and JWKS: default roots plus `caBundlePath`.
    pub fn http_client(&self) -> Result<reqwest::Client, crate::tls::TlsError> {
        let bundle = self
            .ca_bundle_path
            .as_deref()
            .map(crate::tls::CaBundle::load)
            .transpose()?;
        crate::tls::http_client(reqwest::Client::builder(), bundle.as_ref())
    }

    /// Validator settings from this section (`group_claim` from the authz section).
    pub fn settings(&self, group_claim: Option<&str>) -> JwtSettings {
        let mut settings = JwtSettings::new(&self.issuer, &self.audience);
        settings.jwks_url = self.jwks_url.clone();
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
}

/// The RFC 9728 protected-resource metadata routes for `mcp_path` (e.g. `/mcp`):
/// `/.well-known/oauth-protected-resource` and
/// `/.well-known/oauth-protected-resource<mcp_path>`.
pub fn metadata_router(oidc: &OidcConfig, mcp_path: &str) -> axum::Router {
    let issuer = oidc.issuer.clone();
    let scopes = oidc.scopes.clone();
    let resource = oidc.resource.clone();
    let path = mcp_path.to_owned();
    let handler = move |headers: HeaderMap| {
        let resource = resource.clone().unwrap_or_else(|| {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}{path}")
        });
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": [issuer.clone()],
            "bearer_methods_supported": ["header"],
        });
        if !scopes.is_empty() {
            document["scopes_supported"] = serde_json::json!(scopes.clone());
        }
        async move { axum::Json(document) }
    };
    let suffixed = format!("/.well-known/oauth-protected-resource{mcp_path}");
    axum::Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(handler.clone()),
        )
        .route(&suffixed, axum::routing::get(handler))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_fields() {
        let mut errors = Vec::new();
        IncomingAuthConfig {
            kind: "oidc".into(),
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
}
