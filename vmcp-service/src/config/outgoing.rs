//! `outgoingAuth:` — how the gateway authenticates to each backend.
//!
//! The reference's shape: `{source: inline, default: <strategy>, backends: {<name>:
//! <strategy>}}`. A backend's own entry wins, else `default`, else none. Strategies:
//! `unauthenticated`, `header_injection` and `token_exchange` (RFC 8693, see
//! `backend::exchange`); with `source: discovered` the backends and their
//! strategies also come from a cluster (`crate::discovery`). The checks of the section and of the top-level
//! `passthroughHeaders` list are in `validate`.
//!
//! A strategy is typed when parsed ([`BackendAuthConfig`]): its `type` with exactly
//! the section that type uses, so a `header_injection` without `headerInjection`, or
//! with a `tokenExchange`, does not parse ([`StrategyShape`]).

use std::collections::BTreeMap;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::type_key::TypeKey;

mod validate;

use validate::RESERVED_HEADERS;
pub use validate::validate_passthrough;

/// `outgoingAuth:`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutgoingAuthConfig {
    /// `inline` (default): strategies come from this section. `discovered`: also
    /// backends and strategies from the cluster's `groupRef` (docs/kubernetes.md).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub source: Option<OutgoingSource>,
    /// The strategy of backends without their own entry.
    #[serde(default)]
    #[schemars(with = "Option<RawStrategy>")]
    pub default: Option<BackendAuthConfig>,
    /// Per-backend strategies, by backend name.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawStrategy>")]
    pub backends: BTreeMap<String, BackendAuthConfig>,
    /// The per-caller connections of backends whose credentials depend on the
    /// caller (`token_exchange`, `passthroughHeaders`).
    #[serde(default)]
    pub caller_connections: CallerConnectionsConfig,
}

/// `outgoingAuth.callerConnections:` — the pool of per-caller backend connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallerConnectionsConfig {
    /// A caller's connection unused this long is closed (default 5m).
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub idle_timeout: Duration,
    /// At most this many per-caller connections per backend (default 256); the
    /// least recently used one is closed to make room.
    #[serde(default = "default_max_per_backend")]
    pub max_per_backend: usize,
}

fn default_idle_timeout() -> Duration {
    Duration::from_secs(300)
}

fn default_max_per_backend() -> usize {
    256
}

impl Default for CallerConnectionsConfig {
    fn default() -> Self {
        Self {
            idle_timeout: default_idle_timeout(),
            max_per_backend: default_max_per_backend(),
        }
    }
}

/// `outgoingAuth.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutgoingSource {
    /// Strategies come from this section.
    Inline,
    /// Backends and their strategies discovered from a cluster (`groupRef`).
    Discovered,
}

/// One backend's strategy: its `type` and the settings that type uses (and only
/// those; see [`StrategyShape`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawStrategy", into = "RawStrategy")]
pub enum BackendAuthConfig {
    /// No credentials.
    Unauthenticated,
    /// `header_injection`: one static header.
    HeaderInjection(HeaderInjectionConfig),
    /// `token_exchange`: RFC 8693.
    TokenExchange(TokenExchangeConfig),
}

/// The spellings of a strategy's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyType {
    /// No credentials.
    Unauthenticated,
    /// One static header.
    HeaderInjection,
    /// RFC 8693 token exchange.
    TokenExchange,
}

// A strategy as written (the file's shape and the schema's), before its `type`
// and sections are checked against each other.
/// One backend's strategy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "BackendAuthConfig")]
pub(crate) struct RawStrategy {
    /// `unauthenticated`, `header_injection` or `token_exchange`.
    #[serde(rename = "type", default)]
    #[schemars(with = "String")]
    pub(crate) kind: TypeKey<StrategyType>,
    /// Settings of `header_injection`.
    #[serde(default)]
    pub(crate) header_injection: Option<HeaderInjectionConfig>,
    /// Settings of `token_exchange`.
    #[serde(default)]
    pub(crate) token_exchange: Option<TokenExchangeConfig>,
}

/// Why a strategy's `type` and sections do not fit together. Displayed relative to
/// the strategy (`.headerInjection is required …`), so the loader can put the
/// strategy's own path in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyShape {
    /// No `type`.
    #[error(".type is required (\"unauthenticated\", \"header_injection\" or \"token_exchange\")")]
    MissingType,
    /// A `type` that is none of the strategies.
    #[error(
        ".type must be \"unauthenticated\", \"header_injection\" or \"token_exchange\" (got {0:?})"
    )]
    UnknownType(String),
    /// The section the type needs is absent.
    #[error(".{section} is required when type is \"{kind}\"")]
    Missing {
        /// The section (`headerInjection`).
        section: &'static str,
        /// The type (`header_injection`).
        kind: &'static str,
    },
    /// A section of another type.
    #[error(".{section} is only used with type \"{kind}\"")]
    Unused {
        /// The section (`tokenExchange`).
        section: &'static str,
        /// The type it belongs to (`token_exchange`).
        kind: &'static str,
    },
}

impl TryFrom<RawStrategy> for BackendAuthConfig {
    type Error = StrategyShape;

    fn try_from(raw: RawStrategy) -> Result<Self, StrategyShape> {
        const HEADER: (&str, &str) = ("headerInjection", "header_injection");
        const EXCHANGE: (&str, &str) = ("tokenExchange", "token_exchange");
        let unused =
            |(section, kind): (&'static str, &'static str)| StrategyShape::Unused { section, kind };
        let missing = |(section, kind): (&'static str, &'static str)| StrategyShape::Missing {
            section,
            kind,
        };
        let kind = match raw.kind {
            TypeKey::Missing => return Err(StrategyShape::MissingType),
            TypeKey::Unknown(other) => return Err(StrategyShape::UnknownType(other)),
            TypeKey::Known(kind) => kind,
        };
        // The type's own section missing is named first, then another type's.
        match (kind, raw.header_injection, raw.token_exchange) {
            (StrategyType::Unauthenticated, None, None) => Ok(Self::Unauthenticated),
            (StrategyType::Unauthenticated, Some(_), _) => Err(unused(HEADER)),
            (StrategyType::Unauthenticated, None, Some(_)) => Err(unused(EXCHANGE)),
            (StrategyType::HeaderInjection, None, _) => Err(missing(HEADER)),
            (StrategyType::HeaderInjection, Some(_), Some(_)) => Err(unused(EXCHANGE)),
            (StrategyType::HeaderInjection, Some(h), None) => Ok(Self::HeaderInjection(h)),
            (StrategyType::TokenExchange, _, None) => Err(missing(EXCHANGE)),
            (StrategyType::TokenExchange, Some(_), Some(_)) => Err(unused(HEADER)),
            (StrategyType::TokenExchange, None, Some(t)) => Ok(Self::TokenExchange(t)),
        }
    }
}

impl From<BackendAuthConfig> for RawStrategy {
    fn from(strategy: BackendAuthConfig) -> Self {
        match strategy {
            BackendAuthConfig::Unauthenticated => Self {
                kind: StrategyType::Unauthenticated.into(),
                ..Self::default()
            },
            BackendAuthConfig::HeaderInjection(h) => Self {
                kind: StrategyType::HeaderInjection.into(),
                header_injection: Some(h),
                token_exchange: None,
            },
            BackendAuthConfig::TokenExchange(t) => Self {
                kind: StrategyType::TokenExchange.into(),
                header_injection: None,
                token_exchange: Some(t),
            },
        }
    }
}

/// What a caller's token is (`tokenExchange.subjectTokenType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectTokenType {
    /// An OAuth access token (the default).
    AccessToken,
    /// An OpenID Connect ID token.
    IdToken,
    /// Any JWT.
    Jwt,
}

impl SubjectTokenType {
    /// The RFC 8693 token-type URI.
    pub fn uri(self) -> &'static str {
        match self {
            Self::AccessToken => "urn:ietf:params:oauth:token-type:access_token",
            Self::IdToken => "urn:ietf:params:oauth:token-type:id_token",
            Self::Jwt => "urn:ietf:params:oauth:token-type:jwt",
        }
    }
}

/// `tokenExchange:` — RFC 8693: the caller's validated token is exchanged at
/// `tokenUrl` for one meant for this backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenExchangeConfig {
    /// The authorization server's token endpoint (`https://`, or `http://` on loopback).
    #[serde(default)]
    pub token_url: String,
    /// The gateway's client id at the authorization server (HTTP Basic auth).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Its secret, inline (prefer `clientSecretEnv`).
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// The environment variable holding the secret (read at load; must be non-empty).
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The `audience` to ask for (the backend's identifier at the server).
    #[serde(default)]
    pub audience: Option<String>,
    /// The scopes to ask for.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// What the caller's token is: `access_token` (default), `id_token` or `jwt`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub subject_token_type: Option<SubjectTokenType>,
    /// Extra trust anchors (PEM) for the token endpoint's certificate.
    #[serde(default)]
    pub ca_bundle_path: Option<String>,
}

impl TokenExchangeConfig {
    /// The RFC 8693 token-type URI of `subjectTokenType`.
    pub fn subject_token_type_uri(&self) -> &'static str {
        self.subject_token_type
            .unwrap_or(SubjectTokenType::AccessToken)
            .uri()
    }

    /// The client secret, resolved (from the environment if so configured); `None`
    /// without a client id. The error names the field, never the value.
    pub fn client_secret(&self, field: &str) -> Result<Option<Secret>, String> {
        match (
            &self.client_id,
            &self.client_secret,
            &self.client_secret_env,
        ) {
            (None, None, None) => Ok(None),
            (None, _, _) => Err(format!("{field}.clientId is required with a client secret")),
            (Some(_), Some(secret), None) => Ok(Some(secret.clone())),
            (Some(_), None, Some(var)) => match std::env::var(var) {
                Ok(value) if !value.is_empty() => Ok(Some(Secret(value))),
                _ => Err(format!(
                    "{field}.clientSecretEnv: environment variable {var:?} is not set or is empty"
                )),
            },
            (Some(_), _, _) => Err(format!(
                "{field}: exactly one of clientSecret and clientSecretEnv is required with clientId"
            )),
        }
    }
}

/// `headerInjection:` — one static header on every request to the backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderInjectionConfig {
    /// The header, e.g. `Authorization` or `X-Api-Key`.
    #[serde(default)]
    pub header_name: String,
    /// The value, inline (prefer `headerValueEnv`).
    #[serde(default)]
    pub header_value: Option<Secret>,
    /// The environment variable holding the value (read at load; must be non-empty).
    #[serde(default)]
    pub header_value_env: Option<String>,
}

/// A configured secret: never shown by `Debug` or written back by `Serialize`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret read from somewhere else than this file (a cluster's Secret).
    pub(crate) fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself; only for putting it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

impl OutgoingAuthConfig {
    /// The strategy for backend `name`: its own entry, else `default`, else none.
    pub fn resolve(&self, name: &str) -> Option<&BackendAuthConfig> {
        self.backends.get(name).or(self.default.as_ref())
    }
}

impl BackendAuthConfig {
    /// Whether this strategy sets header `name` on the backend's requests.
    pub fn sets_header(&self, name: &HeaderName) -> bool {
        match self {
            Self::TokenExchange(_) => name == http::header::AUTHORIZATION,
            Self::HeaderInjection(h) => h.header_name.eq_ignore_ascii_case(name.as_str()),
            Self::Unauthenticated => false,
        }
    }

    /// The `type` as the file spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::HeaderInjection(_) => "header_injection",
            Self::TokenExchange(_) => "token_exchange",
        }
    }

    /// The token-exchange settings when this strategy is `token_exchange`.
    pub fn exchange(&self) -> Option<&TokenExchangeConfig> {
        match self {
            Self::TokenExchange(t) => Some(t),
            _ => None,
        }
    }

    /// The static headers this strategy puts on every request (empty for
    /// `unauthenticated` and `token_exchange`). Values are marked sensitive, so `Debug` output of a request
    /// hides them.
    pub fn headers(&self, field: &str) -> Result<HeaderMap, String> {
        match self {
            Self::HeaderInjection(h) => h.headers(&format!("{field}.headerInjection")),
            _ => Ok(HeaderMap::new()),
        }
    }
}

impl HeaderInjectionConfig {
    /// The one header, with the value resolved (from the environment if so
    /// configured). The error names the field, never the value.
    pub fn headers(&self, field: &str) -> Result<HeaderMap, String> {
        let name = HeaderName::from_bytes(self.header_name.as_bytes()).map_err(|_| {
            format!(
                "{field}.headerName {:?} is not a valid HTTP header name",
                self.header_name
            )
        })?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(format!(
                "{field}.headerName {:?} is set by the transport and may not be injected",
                self.header_name
            ));
        }
        let value = match (&self.header_value, &self.header_value_env) {
            (Some(value), None) => value.expose().to_owned(),
            (None, Some(var)) => match std::env::var(var) {
                Ok(value) if !value.is_empty() => value,
                _ => {
                    return Err(format!(
                        "{field}.headerValueEnv: environment variable {var:?} is not set or is empty"
                    ));
                }
            },
            _ => {
                return Err(format!(
                    "{field}: exactly one of headerValue and headerValueEnv is required"
                ));
            }
        };
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| format!("{field}: the header value is not a valid HTTP header value"))?;
        value.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(name, value);
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injection(name: &str, value: Option<&str>, env: Option<&str>) -> BackendAuthConfig {
        BackendAuthConfig::HeaderInjection(HeaderInjectionConfig {
            header_name: name.into(),
            header_value: value.map(|v| Secret(v.into())),
            header_value_env: env.map(Into::into),
        })
    }

    #[test]
    fn the_backend_entry_wins_then_the_default_then_none() {
        let mut config = OutgoingAuthConfig::default();
        assert!(config.resolve("a").is_none());
        config.default = Some(BackendAuthConfig::Unauthenticated);
        config
            .backends
            .insert("a".into(), injection("X-Key", Some("s3cr3t"), None));
        assert_eq!(config.resolve("a").unwrap().kind(), "header_injection");
        assert_eq!(config.resolve("b").unwrap().kind(), "unauthenticated");
    }

    #[test]
    fn errors_name_the_field_and_never_the_value() {
        let mut config = OutgoingAuthConfig {
            source: Some(OutgoingSource::Inline),
            ..Default::default()
        };
        config
            .backends
            .insert("a".into(), injection("X-Key", Some("s3cr3t"), Some("ALSO")));
        config
            .backends
            .insert("b".into(), injection("Host", Some("s3cr3t"), None));
        config.backends.insert(
            "c".into(),
            injection("X-Key", None, Some("VMCP_TEST_SURELY_UNSET_VARIABLE")),
        );
        config.backends.insert(
            "d".into(),
            injection("X-Key", Some("bad\nvalue s3cr3t"), None),
        );
        config.backends.insert(
            "ghost".into(),
            BackendAuthConfig::TokenExchange(TokenExchangeConfig {
                token_url: "http://idp.example/token".into(),
                client_id: Some("gw".into()),
                client_secret: Some(Secret("s3cr3t".into())),
                ..Default::default()
            }),
        );
        let mut errors = Vec::new();
        config.validate(&["a", "b", "c", "d"], &mut errors);
        let text = errors.join("\n");
        for expected in [
            "outgoingAuth.backends.a.headerInjection: exactly one of headerValue and headerValueEnv",
            "outgoingAuth.backends.b.headerInjection.headerName \"Host\"",
            "outgoingAuth.backends.c.headerInjection.headerValueEnv: environment variable \"VMCP_TEST_SURELY_UNSET_VARIABLE\" is not set",
            "outgoingAuth.backends.d.headerInjection: the header value is not a valid",
            "outgoingAuth.backends.ghost: \"ghost\" is not a configured backend",
            "outgoingAuth.backends.ghost.tokenExchange.tokenUrl must be https:// (http:// only on loopback)",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!format!("{config:?}").contains("s3cr3t"));
        assert!(!serde_json::to_string(&config).unwrap().contains("s3cr3t"));
    }

    #[test]
    fn a_strategy_parses_only_with_the_section_its_type_uses() {
        let parse = |yaml: &str| {
            serde_yaml_ng::from_str::<BackendAuthConfig>(yaml).map_err(|e| e.to_string())
        };
        assert_eq!(
            parse("{type: unauthenticated}"),
            Ok(BackendAuthConfig::Unauthenticated)
        );
        for (yaml, expected) in [
            ("{}", ".type is required"),
            (
                "{type: header_injecton}",
                ".type must be \"unauthenticated\", \"header_injection\" or \"token_exchange\" (got \"header_injecton\")",
            ),
            (
                "{type: header_injection}",
                ".headerInjection is required when type is \"header_injection\"",
            ),
            (
                "{type: token_exchange, headerInjection: {headerName: X}}",
                ".tokenExchange is required when type is \"token_exchange\"",
            ),
            (
                "{type: header_injection, headerInjection: {headerName: X}, tokenExchange: {tokenUrl: 'https://t'}}",
                ".tokenExchange is only used with type \"token_exchange\"",
            ),
            (
                "{type: unauthenticated, headerInjection: {headerName: X}}",
                ".headerInjection is only used with type \"header_injection\"",
            ),
        ] {
            let error = parse(yaml).expect_err(yaml);
            assert!(error.starts_with(expected), "{yaml}: {error}");
        }
        // Written back in the file's shape.
        let written =
            serde_json::to_value(BackendAuthConfig::HeaderInjection(HeaderInjectionConfig {
                header_name: "X-Key".into(),
                header_value: None,
                header_value_env: Some("KEY".into()),
            }))
            .unwrap();
        assert_eq!(written["type"], "header_injection");
        assert_eq!(written["headerInjection"]["headerName"], "X-Key");
        assert!(written["tokenExchange"].is_null(), "{written}");
    }

    #[test]
    fn the_injected_value_is_sensitive() {
        let headers = injection("X-Key", Some("s3cr3t"), None)
            .headers("f")
            .unwrap();
        let value = headers.get("x-key").unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value, "s3cr3t");
        assert!(!format!("{headers:?}").contains("s3cr3t"));
    }
}
