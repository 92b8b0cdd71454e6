//! `operational.connections`: how many client connections [`serve`](crate::serve)
//! keeps open, and how long one may take to send a request head or stay idle.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default bound on receiving a request head (from accept, or from its first byte
/// on a kept-alive connection).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a kept-alive connection may wait, idle, for its next request.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of the default connection cap (see [`default_max_connections`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// `operational.connections`: the client connections of the bundled server (and of
/// any embedder's [`serve`](crate::serve) given these limits). Read at start: a
/// reload does not change them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionsConfig {
    /// Cap on open client connections. At the cap a new connection closes the
    /// connection waiting longest for a request head, else the one idle longest,
    /// else (every connection has a request in flight) it is answered 503 and
    /// closed. Default: half the process's open-file limit, at most 10000.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// A connection that has not sent a whole request head within this (counted
    /// from accept, or from the first byte of the head on a kept-alive connection)
    /// is closed. Default 10s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub header_read_timeout: Option<Duration>,
    /// A kept-alive connection with no request for this long is closed. Default 60s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub idle_timeout: Option<Duration>,
}

/// The connection limits [`serve`](crate::serve) enforces, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Cap on open connections.
    pub max_connections: usize,
    /// Bound on receiving a request head.
    pub header_read_timeout: Duration,
    /// Bound on waiting, idle, for the next request.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionsConfig::default().limits()
    }
}

impl ConnectionsConfig {
    /// The limits with defaults applied.
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections.unwrap_or_else(default_max_connections),
            header_read_timeout: self
                .header_read_timeout
                .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT),
            idle_timeout: self.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        for (field, value) in [
            ("headerReadTimeout", self.header_read_timeout),
            ("idleTimeout", self.idle_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                errors.push(format!(
                    "operational.connections.{field} must be greater than 0"
                ));
            }
        }
        if self.max_connections == Some(0) {
            errors.push("operational.connections.maxConnections must be greater than 0".into());
        }
    }
}

/// Half the process's soft open-file limit (the other half is left to backend
/// connections, stdio pipes and files), between 16 and [`DEFAULT_MAX_CONNECTIONS`]:
/// a cap at or above the limit would let idle connections exhaust the descriptors
/// that accepting the next one, or connecting to a backend, needs.
pub fn default_max_connections() -> usize {
    #[cfg(unix)]
    {
        use nix::sys::resource::{Resource, getrlimit};
        if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) {
            let half = usize::try_from(soft / 2).unwrap_or(usize::MAX);
            return half.clamp(16, DEFAULT_MAX_CONNECTIONS);
        }
    }
    DEFAULT_MAX_CONNECTIONS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_zeroes() {
        let limits = ConnectionsConfig::default().limits();
        assert_eq!(limits.header_read_timeout, DEFAULT_HEADER_READ_TIMEOUT);
        assert_eq!(limits.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert!((16..=DEFAULT_MAX_CONNECTIONS).contains(&limits.max_connections));
        let zero = ConnectionsConfig {
            max_connections: Some(0),
            header_read_timeout: Some(Duration::ZERO),
            idle_timeout: Some(Duration::ZERO),
        };
        let mut errors = Vec::new();
        zero.validate(&mut errors);
        assert_eq!(errors.len(), 3, "{errors:?}");
    }
}
