//! `sessionStorage`: where state shared between replicas lives (docs/scaling.md).
//!
//! The keys are the reference vMCP's (`provider`, `address`, `db`, `keyPrefix`); the
//! password never sits in the file: it is read from `VMCP_SESSION_REDIS_PASSWORD`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment variable holding the Redis password (or ACL `user:password`).
pub const REDIS_PASSWORD_ENV: &str = "VMCP_SESSION_REDIS_PASSWORD";
/// The default prefix of every key vmcp writes.
pub const DEFAULT_KEY_PREFIX: &str = "vmcp:";

/// Where the shared state is kept.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StorageProvider {
    /// In this process only (the default): nothing is shared between replicas.
    #[default]
    Memory,
    /// A Redis server every replica reaches.
    Redis,
}

/// `sessionStorage:` — the shared store of replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionStorageConfig {
    /// `memory` (default) or `redis`.
    #[serde(default)]
    pub provider: StorageProvider,
    /// The Redis server: `host:port`, `redis://host:port` or `rediss://host:port`
    /// (TLS). Required for `redis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The Redis database number. Default 0.
    #[serde(default)]
    pub db: u32,
    /// Prefix of every key vmcp writes (so several gateways can share one Redis).
    /// Default `vmcp:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// `rediss://` only: the CA certificates (PEM, absolute path) the server's
    /// certificate must chain to, instead of the platform's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_path: Option<PathBuf>,
}

/// A Redis address, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisAddress {
    /// `redis://host:port/db` or `rediss://host:port/db`, without credentials.
    pub url: String,
    /// Whether the connection uses TLS.
    pub tls: bool,
}

impl SessionStorageConfig {
    /// The prefix in force.
    pub fn key_prefix(&self) -> &str {
        self.key_prefix.as_deref().unwrap_or(DEFAULT_KEY_PREFIX)
    }

    /// The Redis address as a URL (for `redis` only), or why it is not one.
    pub fn redis_address(&self) -> Result<RedisAddress, String> {
        let Some(address) = self.address.as_deref().filter(|a| !a.trim().is_empty()) else {
            return Err("sessionStorage.address is required when provider is \"redis\"".into());
        };
        let (tls, rest) = if let Some(rest) = address.strip_prefix("rediss://") {
            (true, rest)
        } else if let Some(rest) = address.strip_prefix("redis://") {
            (false, rest)
        } else if address.contains("://") {
            return Err(format!(
                "sessionStorage.address {:?} must be host:port, redis:// or rediss://",
                cut(address)
            ));
        } else {
            (false, address)
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('@') {
            return Err(format!(
                "sessionStorage.address must not carry credentials (set {REDIS_PASSWORD_ENV})"
            ));
        }
        if rest.contains('/') || rest.contains('?') {
            return Err(format!(
                "sessionStorage.address {:?} must be only host and port (the database is sessionStorage.db)",
                cut(address)
            ));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        let url = format!("{scheme}://{rest}/{}", self.db);
        match reqwest::Url::parse(&url) {
            Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
                Ok(RedisAddress { url, tls })
            }
            _ => Err(format!(
                "sessionStorage.address {:?} is not a valid host:port",
                cut(address)
            )),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        if let Some(prefix) = &self.key_prefix
            && (prefix.is_empty() || prefix.len() > 128 || prefix.chars().any(char::is_whitespace))
        {
            errors.push(
                "sessionStorage.keyPrefix must be 1 to 128 characters without whitespace".into(),
            );
        }
        match self.provider {
            StorageProvider::Memory => {
                if self.address.is_some() {
                    errors.push(
                        "sessionStorage.address is set but provider is \"memory\" (set provider: redis)"
                            .into(),
                    );
                }
            }
            StorageProvider::Redis => {
                match self.redis_address() {
                    Ok(address) => {
                        if self.ca_bundle_path.is_some() && !address.tls {
                            errors.push(
                                "sessionStorage.caBundlePath needs a rediss:// address".into(),
                            );
                        }
                    }
                    Err(e) => errors.push(e),
                }
                super::validate::validate_ca_path(
                    "sessionStorage.caBundlePath",
                    self.ca_bundle_path.as_deref(),
                    errors,
                );
            }
        }
    }
}

fn cut(s: &str) -> String {
    s.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(address: &str) -> SessionStorageConfig {
        SessionStorageConfig {
            provider: StorageProvider::Redis,
            address: Some(address.into()),
            ..Default::default()
        }
    }

    #[test]
    fn addresses_become_urls_with_the_database() {
        let mut c = redis("127.0.0.1:6379");
        c.db = 3;
        assert_eq!(c.redis_address().unwrap().url, "redis://127.0.0.1:6379/3");
        let t = redis("rediss://cache.internal:6380/")
            .redis_address()
            .unwrap();
        assert_eq!(
            (t.url.as_str(), t.tls),
            ("rediss://cache.internal:6380/0", true)
        );
    }

    #[test]
    fn bad_addresses_name_the_field() {
        for (address, words) in [
            ("", "is required"),
            ("http://h:1", "must be host:port"),
            ("redis://user:pw@h:1", "must not carry credentials"),
            ("redis://h:1/2", "must be only host and port"),
            ("h:notaport", "not a valid host:port"),
        ] {
            let mut errors = Vec::new();
            redis(address).validate(&mut errors);
            assert_eq!(errors.len(), 1, "{address}: {errors:?}");
            assert!(
                errors[0].starts_with("sessionStorage.address"),
                "{errors:?}"
            );
            assert!(errors[0].contains(words), "{address}: {errors:?}");
        }
    }

    #[test]
    fn memory_refuses_an_address_and_prefixes_are_checked() {
        let mut errors = Vec::new();
        SessionStorageConfig {
            address: Some("h:1".into()),
            key_prefix: Some("a b".into()),
            ..Default::default()
        }
        .validate(&mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("sessionStorage.keyPrefix"));
        assert!(errors[1].contains("provider is \"memory\""));
    }
}
