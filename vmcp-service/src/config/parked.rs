//! `operational.parkedCalls`: Legacy backend calls waiting for a 2026-07-28 caller's
//! `input_required` answer (docs/forwarding.md).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default time a parked call waits for the caller's retry.
pub const DEFAULT_PARKED_TTL: Duration = Duration::from_secs(120);
/// Default cap on parked calls per gateway process.
pub const DEFAULT_MAX_PARKED: usize = 1000;
/// Default cap on parked calls of one authenticated caller.
pub const DEFAULT_MAX_PARKED_PER_IDENTITY: usize = 100;
/// Default cap on parked calls of anonymous callers from one address.
pub const DEFAULT_MAX_PARKED_PER_ADDRESS: usize = 100;

/// `operational.parkedCalls`: how long a Legacy backend's call whose request went to
/// a 2026-07-28 caller as `input_required` waits for the caller's retry, and how
/// many may wait at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParkedCallsConfig {
    /// A parked call whose caller has not retried within this is cancelled on the
    /// backend; it is also the lifetime of the sealed `requestState`, and a call that
    /// may ask its caller gets it on top of its call timeout. Default 2m.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub ttl: Option<Duration>,
    /// Cap on parked calls: a call that would park beyond it is cancelled and its
    /// caller gets an error. Default 1000.
    #[serde(default)]
    pub max: Option<usize>,
    /// Cap on parked calls of one authenticated caller (issuer and subject): a call
    /// that would park beyond it is cancelled and its caller gets an error; no
    /// other caller's call is touched. Default 100.
    #[serde(default)]
    pub max_per_identity: Option<usize>,
    /// The same cap for anonymous callers from one address (an IPv6 /64).
    /// Default 100.
    #[serde(default)]
    pub max_per_address: Option<usize>,
}

/// The parked-call limits in force, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedLimits {
    /// How long a parked call waits.
    pub ttl: Duration,
    /// How many may wait at once.
    pub max: usize,
    /// How many of one authenticated caller may wait at once.
    pub max_per_identity: usize,
    /// How many of anonymous callers from one address may wait at once.
    pub max_per_address: usize,
}

impl ParkedCallsConfig {
    /// The limits with defaults applied.
    pub fn limits(&self) -> ParkedLimits {
        ParkedLimits {
            ttl: self.ttl.unwrap_or(DEFAULT_PARKED_TTL),
            max: self.max.unwrap_or(DEFAULT_MAX_PARKED),
            max_per_identity: self
                .max_per_identity
                .unwrap_or(DEFAULT_MAX_PARKED_PER_IDENTITY),
            max_per_address: self
                .max_per_address
                .unwrap_or(DEFAULT_MAX_PARKED_PER_ADDRESS),
        }
    }
}

impl ParkedCallsConfig {
    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        if self.ttl.is_some_and(|d| d.is_zero()) {
            errors.push("operational.parkedCalls.ttl must be greater than 0".into());
        }
        super::require_positive(
            "operational.parkedCalls",
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
        let limits = ParkedCallsConfig::default().limits();
        assert_eq!(limits.ttl, DEFAULT_PARKED_TTL);
        assert_eq!(limits.max, DEFAULT_MAX_PARKED);
        let zero = ParkedCallsConfig {
            ttl: Some(Duration::ZERO),
            max: Some(0),
            max_per_identity: Some(0),
            max_per_address: Some(0),
        };
        let mut errors = Vec::new();
        zero.validate(&mut errors);
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors.contains(
                &"operational.parkedCalls.maxPerIdentity must be greater than 0".to_owned()
            )
        );
    }
}
