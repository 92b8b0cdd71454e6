//! `operational.sessions` (Legacy session lifetime and cap) and `status`
//! (authentication of the status routes).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default sliding idle TTL of a Legacy session (the reference's `--session-ttl`).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(30 * 60);
/// Default cap on live Legacy sessions (the reference's per-pod LRU size).
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// Default cap on live Legacy sessions of one authenticated caller.
pub const DEFAULT_MAX_SESSIONS_PER_IDENTITY: usize = 100;
/// Default cap on live Legacy sessions of anonymous callers from one address.
pub const DEFAULT_MAX_SESSIONS_PER_ADDRESS: usize = 100;

/// `operational.sessions`: how long Legacy (2025-11-25) sessions live and how many
/// may live at once. Modern (2026-07-28) requests are stateless and not counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsConfig {
    /// Sliding idle TTL: a session with no request (and no call in flight) for this
    /// long is closed. Default 30m.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub ttl: Option<Duration>,
    /// Absolute lifetime: a session older than this takes no new requests and is
    /// closed once its calls in flight end. Default: none.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub max_lifetime: Option<Duration>,
    /// Cap on live sessions. At it, an `initialize` closes the least recently used
    /// idle session of the caller holding the most sessions (the caller's own if
    /// no one holds more); with none idle it is answered HTTP 503 with
    /// `Retry-After`. Default 1000.
    #[serde(default)]
    pub max_sessions: Option<usize>,
    /// Cap on live sessions of one authenticated caller (issuer and subject). Over
    /// it, the caller's least recently used idle session is closed; with none idle,
    /// 503. Default 100.
    #[serde(default)]
    pub max_per_identity: Option<usize>,
    /// Cap on live sessions of anonymous callers from one address (an IPv6 /64).
    /// Same rule as `maxPerIdentity`. Default 100.
    #[serde(default)]
    pub max_per_address: Option<usize>,
}

/// The session limits in force, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sliding idle TTL.
    pub ttl: Duration,
    /// Absolute lifetime, if any.
    pub max_lifetime: Option<Duration>,
    /// Cap on live sessions.
    pub max_sessions: usize,
    /// Cap on live sessions of one authenticated caller.
    pub max_per_identity: usize,
    /// Cap on live sessions of anonymous callers from one address.
    pub max_per_address: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionsConfig::default().limits()
    }
}

impl SessionsConfig {
    /// The limits with defaults applied.
    pub fn limits(&self) -> SessionLimits {
        SessionLimits {
            ttl: self.ttl.unwrap_or(DEFAULT_SESSION_TTL),
            max_lifetime: self.max_lifetime,
            max_sessions: self.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS),
            max_per_identity: self
                .max_per_identity
                .unwrap_or(DEFAULT_MAX_SESSIONS_PER_IDENTITY),
            max_per_address: self
                .max_per_address
                .unwrap_or(DEFAULT_MAX_SESSIONS_PER_ADDRESS),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        for (field, value) in [("ttl", self.ttl), ("maxLifetime", self.max_lifetime)] {
            if value.is_some_and(|d| d.is_zero()) {
                errors.push(format!(
                    "operational.sessions.{field} must be greater than 0"
                ));
            }
        }
        super::require_positive(
            "operational.sessions",
            &[
                ("maxSessions", self.max_sessions),
                ("maxPerIdentity", self.max_per_identity),
                ("maxPerAddress", self.max_per_address),
            ],
            errors,
        );
    }
}

/// `status:` — the status routes (`/status`, `/ui`, `/ui/events`) and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusConfig {
    /// Require the same bearer token as `/mcp` on `/status`, `/ui`, `/ui/events`
    /// and `/metrics` (401 without). Default: on when `incomingAuth.type` is `oidc`.
    /// `/health`, `/ping` and `/readyz` stay open.
    #[serde(default)]
    pub require_auth: Option<bool>,
    /// Who sees the whole gateway (needs `requireAuth`): callers whose token
    /// carries this claim get the full `/status` and `/ui` and may read
    /// `/metrics` (403 for the others). Every other caller sees on `/status` and
    /// `/ui` only what its own `tools/list` (and the other lists) would show, and
    /// the backends serving it. Unset: no caller is an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators: Option<OperatorClaim>,
}

/// `status.operators` — the claim that makes a caller an operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatorClaim {
    /// The claim's name, e.g. `roles`, `groups` or `scope`. A string claim must
    /// equal one of `values` (or, space-separated like `scope`, hold one as a word);
    /// an array claim must contain one.
    #[serde(default)]
    pub claim: String,
    /// The accepted values; any one suffices.
    #[serde(default)]
    pub values: Vec<String>,
}

impl OperatorClaim {
    /// The claim check of the layers.
    pub fn required(&self) -> vmcp_layers::auth::RequiredClaim {
        vmcp_layers::auth::RequiredClaim {
            claim: self.claim.clone(),
            values: self.values.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_zeroes() {
        let limits = SessionsConfig::default().limits();
        assert_eq!(limits.ttl, DEFAULT_SESSION_TTL);
        assert_eq!(limits.max_lifetime, None);
        assert_eq!(limits.max_sessions, DEFAULT_MAX_SESSIONS);
        let zero = SessionsConfig {
            ttl: Some(Duration::ZERO),
            max_lifetime: Some(Duration::ZERO),
            max_sessions: Some(0),
            max_per_identity: Some(0),
            max_per_address: Some(0),
        };
        let mut errors = Vec::new();
        zero.validate(&mut errors);
        assert_eq!(errors.len(), 5, "{errors:?}");
    }
}
