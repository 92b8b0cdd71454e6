//! `rateLimiting`: token buckets per caller, per tool, per verb and per backend
//! (docs/rate-limiting.md). Enforced by `crate::rate_limit`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The most tokens one bucket may hold: a budget beyond this is no limit.
pub const MAX_TOKENS: u32 = 1_000_000;
/// The longest refill period (a day): longer ones keep buckets in memory for long.
pub const MAX_REFILL_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// `rateLimiting:` token buckets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitingConfig {
    /// One budget for every `tools/call` of all callers together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<BucketConfig>,
    /// A budget for each caller's `tools/call`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_user: Option<BucketConfig>,
    /// Budgets for one tool, by its advertised name (a composite's steps count by the
    /// tool each step calls).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolLimitConfig>,
    /// Budgets for the verbs other than `tools/call`.
    #[serde(default, skip_serializing_if = "VerbLimitsConfig::is_empty")]
    pub verbs: VerbLimitsConfig,
    /// Budgets protecting one backend from all callers together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendLimitConfig>,
    /// What a store error does: `open` admits the request (default), `closed`
    /// refuses it. The memory store cannot fail; this applies to a shared store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_mode: Option<FailMode>,
    /// How anonymous callers are keyed for `perUser` budgets: `address` (default,
    /// one budget per client address, an IPv6 /64) or `shared` (one for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<AnonymousKey>,
    /// Where the buckets live: `memory` (this process) or `redis` (shared by every
    /// replica, through `sessionStorage`). Default: `redis` when
    /// `sessionStorage.provider` is `redis`, else `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<BucketStoreKind>,
}

/// The largest `backends[].maxConcurrent` (a semaphore of that many permits).
pub const MAX_CONCURRENT: usize = 100_000;

/// `rateLimiting.store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BucketStoreKind {
    /// In this process: each replica has its own budget.
    Memory,
    /// In the `sessionStorage` Redis: one budget for all replicas.
    Redis,
}

/// One token bucket: `maxTokens` requests at once, refilled evenly over
/// `refillPeriod` (so `maxTokens / refillPeriod` per second on average).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketConfig {
    /// The bucket's size: the burst allowed after an idle `refillPeriod`.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// How long an empty bucket takes to fill (`1m`, `10s`).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub refill_period: Option<Duration>,
}

/// A shared and/or per-caller budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedAndPerUser {
    /// One budget for all callers together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<BucketConfig>,
    /// A budget for each caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_user: Option<BucketConfig>,
}

/// `rateLimiting.tools[]`: budgets for one tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolLimitConfig {
    /// The tool's advertised name (as clients call it).
    #[serde(default)]
    pub name: String,
    /// One budget for all callers of this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<BucketConfig>,
    /// A budget for each caller of this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_user: Option<BucketConfig>,
}

/// `rateLimiting.verbs`: budgets for the verbs other than `tools/call`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerbLimitsConfig {
    /// `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lists: Option<SharedAndPerUser>,
    /// `server/discover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discover: Option<SharedAndPerUser>,
    /// `resources/read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<SharedAndPerUser>,
    /// `prompts/get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<SharedAndPerUser>,
    /// `completion/complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<SharedAndPerUser>,
}

impl VerbLimitsConfig {
    fn is_empty(&self) -> bool {
        self.entries().iter().all(|(_, v)| v.is_none())
    }

    /// Each verb group with its key.
    pub fn entries(&self) -> [(&'static str, Option<&SharedAndPerUser>); 5] {
        [
            ("lists", self.lists.as_ref()),
            ("discover", self.discover.as_ref()),
            ("reads", self.reads.as_ref()),
            ("prompts", self.prompts.as_ref()),
            ("completion", self.completion.as_ref()),
        ]
    }
}

/// `rateLimiting.backends[]`: what one backend takes from all callers together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendLimitConfig {
    /// A configured backend's name.
    #[serde(default)]
    pub name: String,
    /// Requests forwarded to it (every verb, composite steps included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<BucketConfig>,
    /// Calls to it in flight at once; more wait (within the call timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<usize>,
}

/// `rateLimiting.failMode`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// A store error admits the request (logged once, counted).
    #[default]
    Open,
    /// A store error refuses the request.
    Closed,
}

/// `rateLimiting.anonymous`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AnonymousKey {
    /// One `perUser` budget per client address (an IPv6 /64).
    #[default]
    Address,
    /// One `perUser` budget shared by all anonymous callers.
    Shared,
}

impl BucketConfig {
    /// The limit, once validated.
    pub fn limit(&self) -> Option<(u32, Duration)> {
        Some((self.max_tokens?, self.refill_period?))
    }

    fn validate(&self, at: &str, errors: &mut Vec<String>) {
        match self.max_tokens {
            None => errors.push(format!("{at}.maxTokens is required")),
            Some(0) => errors.push(format!("{at}.maxTokens must be greater than 0")),
            Some(n) if n > MAX_TOKENS => {
                errors.push(format!("{at}.maxTokens must be at most {MAX_TOKENS}"));
            }
            Some(_) => {}
        }
        match self.refill_period {
            None => errors.push(format!("{at}.refillPeriod is required")),
            Some(d) if d.is_zero() => {
                errors.push(format!("{at}.refillPeriod must be greater than 0"));
            }
            Some(d) if d > MAX_REFILL_PERIOD => {
                errors.push(format!("{at}.refillPeriod must be at most 24h"));
            }
            Some(_) => {}
        }
    }
}

fn validate_pair(
    at: &str,
    shared: Option<&BucketConfig>,
    per_user: Option<&BucketConfig>,
    errors: &mut Vec<String>,
) {
    if shared.is_none() && per_user.is_none() {
        errors.push(format!("{at} needs shared or perUser"));
    }
    if let Some(b) = shared {
        b.validate(&format!("{at}.shared"), errors);
    }
    if let Some(b) = per_user {
        b.validate(&format!("{at}.perUser"), errors);
    }
}

impl RateLimitingConfig {
    /// Field-path errors; `backends` are the configured backends' names.
    pub(super) fn validate(&self, backends: &[&str], errors: &mut Vec<String>) {
        if self.shared.is_none()
            && self.per_user.is_none()
            && self.tools.is_empty()
            && self.verbs.is_empty()
            && self.backends.is_empty()
        {
            errors.push(
                "rateLimiting needs at least one limit (shared, perUser, tools, verbs or backends)"
                    .into(),
            );
            return;
        }
        if let Some(b) = &self.shared {
            b.validate("rateLimiting.shared", errors);
        }
        if let Some(b) = &self.per_user {
            b.validate("rateLimiting.perUser", errors);
        }
        for (i, tool) in self.tools.iter().enumerate() {
            let at = format!("rateLimiting.tools[{i}]");
            if tool.name.is_empty() {
                errors.push(format!("{at}.name is required"));
            } else if self.tools[..i].iter().any(|t| t.name == tool.name) {
                errors.push(format!("{at}.name {:?} is listed twice", tool.name));
            }
            validate_pair(&at, tool.shared.as_ref(), tool.per_user.as_ref(), errors);
        }
        for (verb, limits) in self.verbs.entries() {
            if let Some(limits) = limits {
                let at = format!("rateLimiting.verbs.{verb}");
                validate_pair(
                    &at,
                    limits.shared.as_ref(),
                    limits.per_user.as_ref(),
                    errors,
                );
            }
        }
        for (i, backend) in self.backends.iter().enumerate() {
            let at = format!("rateLimiting.backends[{i}]");
            if backend.name.is_empty() {
                errors.push(format!("{at}.name is required"));
            } else if !backends.contains(&backend.name.as_str()) {
                errors.push(format!(
                    "{at}.name {:?} is not a configured backend",
                    backend.name
                ));
            } else if self.backends[..i].iter().any(|b| b.name == backend.name) {
                errors.push(format!("{at}.name {:?} is listed twice", backend.name));
            }
            if backend.rate.is_none() && backend.max_concurrent.is_none() {
                errors.push(format!("{at} needs rate or maxConcurrent"));
            }
            if let Some(rate) = &backend.rate {
                rate.validate(&format!("{at}.rate"), errors);
            }
            super::require_positive(&at, &[("maxConcurrent", backend.max_concurrent)], errors);
            if backend.max_concurrent.is_some_and(|m| m > MAX_CONCURRENT) {
                errors.push(format!(
                    "{at}.maxConcurrent must be at most {MAX_CONCURRENT}"
                ));
            }
        }
    }

    /// Where the buckets live, given whether `sessionStorage` is Redis.
    pub fn store(&self, redis_storage: bool) -> BucketStoreKind {
        self.store.unwrap_or(if redis_storage {
            BucketStoreKind::Redis
        } else {
            BucketStoreKind::Memory
        })
    }

    /// The failure mode in force.
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode.unwrap_or_default()
    }

    /// How anonymous callers are keyed.
    pub fn anonymous(&self) -> AnonymousKey {
        self.anonymous.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str, backends: &[&str]) -> Vec<String> {
        let config: RateLimitingConfig = serde_yaml_ng::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        config.validate(backends, &mut errors);
        errors
    }

    #[test]
    fn empty_needs_a_limit() {
        assert_eq!(
            errors("{}", &[]),
            ["rateLimiting needs at least one limit (shared, perUser, tools, verbs or backends)"]
        );
    }

    #[test]
    fn field_paths() {
        let found = errors(
            "tools: [{name: t, perUser: {maxTokens: 0, refillPeriod: 1m}}, {name: t, shared: {refillPeriod: 0s}}, {name: u}]\n\
             verbs: {lists: {}, reads: {perUser: {maxTokens: 2000000, refillPeriod: 48h}}}\n\
             backends: [{name: nope, rate: {maxTokens: 1, refillPeriod: 1s}}, {name: a, maxConcurrent: 0}, {name: a}]",
            &["a"],
        );
        assert_eq!(
            found,
            [
                "rateLimiting.tools[0].perUser.maxTokens must be greater than 0",
                "rateLimiting.tools[1].name \"t\" is listed twice",
                "rateLimiting.tools[1].shared.maxTokens is required",
                "rateLimiting.tools[1].shared.refillPeriod must be greater than 0",
                "rateLimiting.tools[2] needs shared or perUser",
                "rateLimiting.verbs.lists needs shared or perUser",
                "rateLimiting.verbs.reads.perUser.maxTokens must be at most 1000000",
                "rateLimiting.verbs.reads.perUser.refillPeriod must be at most 24h",
                "rateLimiting.backends[0].name \"nope\" is not a configured backend",
                "rateLimiting.backends[1].maxConcurrent must be greater than 0",
                "rateLimiting.backends[2].name \"a\" is listed twice",
                "rateLimiting.backends[2] needs rate or maxConcurrent",
            ]
        );
    }

    #[test]
    fn a_valid_config() {
        let yaml = "shared: {maxTokens: 100, refillPeriod: 1m}\nperUser: {maxTokens: 10, refillPeriod: 1m}\nfailMode: closed\nanonymous: shared\nbackends: [{name: a, maxConcurrent: 4}]";
        assert!(errors(yaml, &["a"]).is_empty());
        let config: RateLimitingConfig = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(config.fail_mode(), FailMode::Closed);
        assert_eq!(config.anonymous(), AnonymousKey::Shared);
        assert_eq!(
            config.per_user.unwrap().limit(),
            Some((10, Duration::from_secs(60)))
        );
    }

    /// A count tokio's semaphore cannot hold would panic at start or reload.
    #[test]
    fn max_concurrent_is_bounded() {
        assert_eq!(
            errors(
                "backends: [{name: a, maxConcurrent: 10000000000000000000}]",
                &["a"]
            ),
            ["rateLimiting.backends[0].maxConcurrent must be at most 100000"]
        );
        assert!(errors("backends: [{name: a, maxConcurrent: 100000}]", &["a"]).is_empty());
    }
}
