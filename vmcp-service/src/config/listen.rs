//! `operational.listenStreams`: caps on open Modern (2026-07-28)
//! `subscriptions/listen` streams, each of which holds a listener and its stream
//! for as long as its client keeps it open.

use serde::{Deserialize, Serialize};

/// Default cap on open listen streams per gateway process.
pub const DEFAULT_MAX_LISTEN_STREAMS: usize = 1000;
/// Default cap on open listen streams of one authenticated caller.
pub const DEFAULT_MAX_LISTEN_STREAMS_PER_IDENTITY: usize = 20;
/// Default cap on open listen streams of anonymous callers from one address.
pub const DEFAULT_MAX_LISTEN_STREAMS_PER_ADDRESS: usize = 20;

/// `operational.listenStreams`: how many `subscriptions/listen` streams may be open
/// at once. A listen over a cap is answered HTTP 429 with a JSON-RPC error
/// (`-32000`, "too many subscriptions/listen streams"); no open stream is closed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenStreamsConfig {
    /// Cap on open listen streams of all callers together. Default 1000.
    #[serde(default)]
    pub max: Option<usize>,
    /// Cap on open listen streams of one authenticated caller (issuer and
    /// subject). Default 20.
    #[serde(default)]
    pub max_per_identity: Option<usize>,
    /// Cap on open listen streams of anonymous callers from one address (an IPv6
    /// /64). Default 20.
    #[serde(default)]
    pub max_per_address: Option<usize>,
}

/// The listen-stream limits in force, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenLimits {
    /// Cap on open streams.
    pub max: usize,
    /// Cap on open streams of one authenticated caller.
    pub max_per_identity: usize,
    /// Cap on open streams of anonymous callers from one address.
    pub max_per_address: usize,
}

impl ListenStreamsConfig {
    /// The limits with defaults applied.
    pub fn limits(&self) -> ListenLimits {
        ListenLimits {
            max: self.max.unwrap_or(DEFAULT_MAX_LISTEN_STREAMS),
            max_per_identity: self
                .max_per_identity
                .unwrap_or(DEFAULT_MAX_LISTEN_STREAMS_PER_IDENTITY),
            max_per_address: self
                .max_per_address
                .unwrap_or(DEFAULT_MAX_LISTEN_STREAMS_PER_ADDRESS),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        super::require_positive(
            "operational.listenStreams",
            &[
                ("max", self.max),
                ("maxPerIdentity", self.max_per_identity),
                ("maxPerAddress", self.max_per_address),
            ],
            errors,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_zeroes() {
        let limits = ListenStreamsConfig::default().limits();
        assert_eq!(limits.max, DEFAULT_MAX_LISTEN_STREAMS);
        assert_eq!(
            limits.max_per_identity,
            DEFAULT_MAX_LISTEN_STREAMS_PER_IDENTITY
        );
        let zero = ListenStreamsConfig {
            max: Some(0),
            max_per_identity: Some(0),
            max_per_address: Some(0),
        };
        let mut errors = Vec::new();
        zero.validate(&mut errors);
        assert_eq!(
            errors,
            [
                "operational.listenStreams.max must be greater than 0",
                "operational.listenStreams.maxPerIdentity must be greater than 0",
                "operational.listenStreams.maxPerAddress must be greater than 0",
            ]
        );
    }
}
