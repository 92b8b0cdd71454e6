//! `outgoingAuth:` — how the gateway authenticates to each backend.
//!
//! The reference's shape: `{source: inline, default: <strategy>, backends: {<name>:
//! <strategy>}}`. A backend's own entry wins, else `default`, else none. Built so far:
//! `unauthenticated` and `header_injection`; `token_exchange` and `source: discovered`
//! are refused by validation as not supported yet.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

/// `outgoingAuth:`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutgoingAuthConfig {
    /// `inline` (default): strategies come from this section. `discovered` (from a
    /// cluster) is not supported yet.
    #[serde(default)]
    pub source: Option<String>,
    /// The strategy of backends without their own entry.
    #[serde(default)]
    pub default: Option<BackendAuthConfig>,
    /// Per-backend strategies, by backend name.
    #[serde(default)]
    pub backends: BTreeMap<String, BackendAuthConfig>,
}

/// One backend's strategy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendAuthConfig {
    /// `unauthenticated` or `header_injection`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Settings of `header_injection`.
    #[serde(default)]
    pub header_injection: Option<HeaderInjectionConfig>,
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

/// Headers a strategy may not set: the transport owns them, or they are per hop.
const RESERVED_HEADERS: [&str; 15] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
];

impl OutgoingAuthConfig {
    /// The strategy for backend `name`: its own entry, else `default`, else none.
    pub fn resolve(&self, name: &str) -> Option<&BackendAuthConfig> {
        self.backends.get(name).or(self.default.as_ref())
    }

    /// Check the section; `backends` are the configured backend names. Messages
    /// name their field and never contain a header value.
    pub fn validate(&self, backends: &[&str], errors: &mut Vec<String>) {
        match self.source.as_deref() {
            None | Some("inline") => {}
            Some("discovered") => errors.push(
                "outgoingAuth.source \"discovered\" is not supported yet (it needs backend discovery from a cluster); use \"inline\"".into(),
            ),
            Some(other) => errors.push(format!(
                "outgoingAuth.source must be \"inline\" (got {other:?})"
            )),
        }
        if let Some(default) = &self.default {
            default.validate("outgoingAuth.default", errors);
        }
        for (name, strategy) in &self.backends {
            let field = format!("outgoingAuth.backends.{name}");
            if !backends.contains(&name.as_str()) {
                errors.push(format!("{field}: {name:?} is not a configured backend"));
            }
            strategy.validate(&field, errors);
        }
    }
}

impl BackendAuthConfig {
    fn validate(&self, field: &str, errors: &mut Vec<String>) {
        match self.kind.as_str() {
            "unauthenticated" => {}
            "header_injection" => match &self.header_injection {
                None => errors.push(format!(
                    "{field}.headerInjection is required when type is \"header_injection\""
                )),
                Some(h) => {
                    if let Err(e) = h.headers(&format!("{field}.headerInjection")) {
                        errors.push(e);
                    }
                }
            },
            "token_exchange" => errors.push(format!(
                "{field}.type \"token_exchange\" is not supported yet"
            )),
            "" => errors.push(format!(
                "{field}.type is required (\"unauthenticated\" or \"header_injection\")"
            )),
            other => errors.push(format!(
                "{field}.type must be \"unauthenticated\" or \"header_injection\" (got {other:?})"
            )),
        }
    }

    /// The headers this strategy puts on every request (empty for
    /// `unauthenticated`). Values are marked sensitive, so `Debug` output of a request
    /// hides them.
    pub fn headers(&self, field: &str) -> Result<HeaderMap, String> {
        match (&self.kind[..], &self.header_injection) {
            ("header_injection", Some(h)) => h.headers(&format!("{field}.headerInjection")),
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
        BackendAuthConfig {
            kind: "header_injection".into(),
            header_injection: Some(HeaderInjectionConfig {
                header_name: name.into(),
                header_value: value.map(|v| Secret(v.into())),
                header_value_env: env.map(Into::into),
            }),
        }
    }

    #[test]
    fn the_backend_entry_wins_then_the_default_then_none() {
        let mut config = OutgoingAuthConfig::default();
        assert!(config.resolve("a").is_none());
        config.default = Some(BackendAuthConfig {
            kind: "unauthenticated".into(),
            header_injection: None,
        });
        config
            .backends
            .insert("a".into(), injection("X-Key", Some("s3cr3t"), None));
        assert_eq!(config.resolve("a").unwrap().kind, "header_injection");
        assert_eq!(config.resolve("b").unwrap().kind, "unauthenticated");
    }

    #[test]
    fn errors_name_the_field_and_never_the_value() {
        let mut config = OutgoingAuthConfig {
            source: Some("discovered".into()),
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
            BackendAuthConfig {
                kind: "token_exchange".into(),
                header_injection: None,
            },
        );
        let mut errors = Vec::new();
        config.validate(&["a", "b", "c", "d"], &mut errors);
        let text = errors.join("\n");
        for expected in [
            "outgoingAuth.source \"discovered\" is not supported yet",
            "outgoingAuth.backends.a.headerInjection: exactly one of headerValue and headerValueEnv",
            "outgoingAuth.backends.b.headerInjection.headerName \"Host\"",
            "outgoingAuth.backends.c.headerInjection.headerValueEnv: environment variable \"VMCP_TEST_SURELY_UNSET_VARIABLE\" is not set",
            "outgoingAuth.backends.d.headerInjection: the header value is not a valid",
            "outgoingAuth.backends.ghost: \"ghost\" is not a configured backend",
            "outgoingAuth.backends.ghost.type \"token_exchange\" is not supported yet",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!format!("{config:?}").contains("s3cr3t"));
        assert!(!serde_json::to_string(&config).unwrap().contains("s3cr3t"));
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
