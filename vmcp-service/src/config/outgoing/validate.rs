//! Checks of the `outgoingAuth` section and `passthroughHeaders`: every message
//! names its field and never contains a header value or secret. The shapes they
//! check are in the parent module.

use http::HeaderName;

use super::{BackendAuthConfig, OutgoingAuthConfig, OutgoingSource, TokenExchangeConfig};

/// Headers a strategy may not set: the transport owns them, or they are per hop.
pub(super) const RESERVED_HEADERS: [&str; 15] = [
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

/// Headers `passthroughHeaders` may never name: per hop, owned by the transport, or
/// describing a proxy hop (`X-Forwarded-*`, `Forwarded`).
const NOT_PASSED_THROUGH: [&str; 5] = ["forwarded", "x-real-ip", "cookie", "set-cookie", "origin"];

/// Check the top-level `passthroughHeaders` list: valid names, none of the refused
/// ones, `Authorization` only with `passthroughAuthorization: true`.
pub fn validate_passthrough(names: &[String], authorization: bool, errors: &mut Vec<String>) {
    for (i, name) in names.iter().enumerate() {
        let field = format!("passthroughHeaders[{i}]");
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            errors.push(format!("{field}: {name:?} is not a valid HTTP header name"));
            continue;
        };
        let lower = header.as_str();
        if RESERVED_HEADERS.contains(&lower)
            || NOT_PASSED_THROUGH.contains(&lower)
            || lower.starts_with("x-forwarded-")
        {
            errors.push(format!(
                "{field}: {name:?} may not be passed through to backends"
            ));
        } else if lower == "authorization" && !authorization {
            errors.push(format!(
                "{field}: \"Authorization\" is passed through only with passthroughAuthorization: true (backends should get their own credentials: see outgoingAuth)"
            ));
        }
    }
}

impl OutgoingAuthConfig {
    /// Check the section; `backends` are the configured backend names. Messages
    /// name their field and never contain a header value.
    pub fn validate(&self, backends: &[&str], errors: &mut Vec<String>) {
        // Discovered backends are named by the cluster, not this file.
        let discovered = self.source == Some(OutgoingSource::Discovered);
        if let Some(default) = &self.default {
            default.validate("outgoingAuth.default", errors);
        }
        if self.caller_connections.max_per_backend == 0 {
            errors.push("outgoingAuth.callerConnections.maxPerBackend must be at least 1".into());
        }
        if self.caller_connections.idle_timeout.is_zero() {
            errors.push("outgoingAuth.callerConnections.idleTimeout must be greater than 0".into());
        }
        for (name, strategy) in &self.backends {
            let field = format!("outgoingAuth.backends.{name}");
            if !discovered && !backends.contains(&name.as_str()) {
                errors.push(format!("{field}: {name:?} is not a configured backend"));
            }
            strategy.validate(&field, errors);
        }
    }
}

impl OutgoingAuthConfig {
    /// Refuse a `passthroughHeaders` entry that a strategy (`default` or a backend's)
    /// sets: a backend's credentials come from its strategy, never from the caller.
    pub fn validate_passthrough(&self, names: &[String], errors: &mut Vec<String>) {
        let strategies = self
            .default
            .iter()
            .map(|s| ("outgoingAuth.default".to_owned(), s))
            .chain(
                self.backends
                    .iter()
                    .map(|(name, s)| (format!("outgoingAuth.backends.{name}"), s)),
            );
        for (field, strategy) in strategies {
            for (i, name) in names.iter().enumerate() {
                if let Ok(header) = HeaderName::from_bytes(name.as_bytes())
                    && strategy.sets_header(&header)
                {
                    errors.push(format!(
                        "passthroughHeaders[{i}]: {name:?} is set by {field} ({}); a caller's value may not replace it",
                        strategy.kind()
                    ));
                }
            }
        }
    }
}

impl BackendAuthConfig {
    fn validate(&self, field: &str, errors: &mut Vec<String>) {
        match self {
            Self::Unauthenticated => {}
            Self::HeaderInjection(h) => {
                if let Err(e) = h.headers(&format!("{field}.headerInjection")) {
                    errors.push(e);
                }
            }
            Self::TokenExchange(t) => t.validate(&format!("{field}.tokenExchange"), errors),
        }
    }
}

impl TokenExchangeConfig {
    fn validate(&self, field: &str, errors: &mut Vec<String>) {
        match reqwest::Url::parse(&self.token_url) {
            Ok(url) if url.scheme() == "https" => {}
            Ok(url) if url.scheme() == "http" && is_loopback(&url) => {}
            Ok(_) => errors.push(format!(
                "{field}.tokenUrl must be https:// (http:// only on loopback)"
            )),
            Err(_) if self.token_url.is_empty() => {
                errors.push(format!("{field}.tokenUrl is required"))
            }
            Err(_) => errors.push(format!("{field}.tokenUrl is not a valid URL")),
        }
        if let Err(e) = self.client_secret(field) {
            errors.push(e);
        }
        if let Some(path) = &self.ca_bundle_path
            && let Err(e) = vmcp_layers::tls::CaBundle::load(path)
        {
            errors.push(format!("{field}.caBundlePath: {e}"));
        }
        if self.audience.as_deref().is_some_and(str::is_empty) {
            errors.push(format!("{field}.audience must not be empty"));
        }
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::outgoing::{HeaderInjectionConfig, Secret};

    #[test]
    fn passthrough_refuses_hop_headers_and_authorization_unless_allowed() {
        let names: Vec<String> = [
            "X-Request-Id",
            "Host",
            "X-Forwarded-For",
            "Authorization",
            "bad name",
        ]
        .map(String::from)
        .into();
        let mut errors = Vec::new();
        validate_passthrough(&names, false, &mut errors);
        let text = errors.join("\n");
        assert_eq!(errors.len(), 4, "{text}");
        assert!(
            text.contains("passthroughHeaders[1]: \"Host\" may not"),
            "{text}"
        );
        assert!(
            text.contains("passthroughHeaders[2]: \"X-Forwarded-For\" may not"),
            "{text}"
        );
        assert!(
            text.contains("passthroughHeaders[3]: \"Authorization\" is passed through only"),
            "{text}"
        );
        let mut errors = Vec::new();
        validate_passthrough(&names[..1], false, &mut errors);
        validate_passthrough(&names[3..4], true, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn a_passthrough_header_a_strategy_sets_is_refused() {
        let mut config = OutgoingAuthConfig {
            default: Some(BackendAuthConfig::TokenExchange(Default::default())),
            ..Default::default()
        };
        config.backends.insert(
            "a".into(),
            BackendAuthConfig::HeaderInjection(HeaderInjectionConfig {
                header_name: "X-Api-Key".into(),
                header_value: Some(Secret("s3cr3t".into())),
                header_value_env: None,
            }),
        );
        let names: Vec<String> = ["X-Tenant", "AUTHORIZATION", "x-api-key"]
            .map(String::from)
            .into();
        let mut errors = Vec::new();
        config.validate_passthrough(&names, &mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("passthroughHeaders[1]: \"AUTHORIZATION\" is set by outgoingAuth.default (token_exchange)"), "{errors:?}");
        assert!(errors[1].starts_with("passthroughHeaders[2]: \"x-api-key\" is set by outgoingAuth.backends.a (header_injection)"), "{errors:?}");
        assert!(!errors.join("\n").contains("s3cr3t"));
        let mut errors = Vec::new();
        config.validate_passthrough(&names[..1], &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }
}
