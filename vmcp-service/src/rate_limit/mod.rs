//! Rate limiting (`rateLimiting`, docs/rate-limiting.md): token buckets per caller,
//! per tool, per verb and per backend, and a concurrency cap per backend.
//!
//! One admission seam, [`RateLimiter::admit`], meters a request by what it reaches:
//! the service calls it for every client request (both the fast edge and rmcp
//! serve after it), and composite steps call [`RateLimiter::admit_step`] with the
//! tool each step runs: a composite call takes the global (`shared`, `perUser`)
//! tokens once, and each inner call is metered by its real tool name (its
//! `tools[]` budgets) and its backend. The backend concurrency cap
//! ([`RateLimiter::slot`]) is held around each backend call, by the handler and the
//! edge alike.

mod bucket;
mod redis_buckets;
mod refusal;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use vmcp_layers::Identity;
use vmcp_layers::context::{BackendCalls, ParsedMcpRequest};

pub(crate) use bucket::{BucketKind, BucketStore, Charge, Decision, Limit, MemoryStore};
pub(crate) use refusal::{Refusal, response};

use crate::catalog::Catalog;
use crate::config::{AnonymousKey, BucketConfig, FailMode, RateLimitingConfig, VmcpConfig};
use crate::session_binding::Caller;
use bucket::BucketKey;

/// The charges of one request, on the stack: at most five (`shared`, `perUser`,
/// the tool's two, its backend's), so metering a call allocates nothing for them.
type Charges = smallvec::SmallVec<[Charge; 5]>;

/// A shared and a per-caller budget, either optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pair {
    shared: Option<Limit>,
    per_user: Option<Limit>,
}

fn limit(bucket: Option<&BucketConfig>) -> Option<Limit> {
    bucket
        .and_then(BucketConfig::limit)
        .map(|(max_tokens, refill)| Limit { max_tokens, refill })
}

/// The verb groups metered besides `tools/call`, in `rateLimiting.verbs` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerbGroup {
    Lists = 0,
    Discover = 1,
    Reads = 2,
    Prompts = 3,
    Completion = 4,
}

impl VerbGroup {
    const KEYS: [&'static str; 5] = ["lists", "discover", "reads", "prompts", "completion"];

    fn of(method: &str) -> Option<Self> {
        Some(match method {
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
                Self::Lists
            }
            "server/discover" => Self::Discover,
            "resources/read" => Self::Reads,
            "prompts/get" => Self::Prompts,
            "completion/complete" => Self::Completion,
            _ => return None,
        })
    }
}

/// A backend's cap on calls in flight.
#[derive(Debug)]
struct Gate {
    max: usize,
    slots: Arc<Semaphore>,
}

#[derive(Debug, Default)]
struct BackendRule {
    rate: Option<Limit>,
    gate: Option<Gate>,
}

/// `rateLimiting`, compiled.
#[derive(Debug)]
pub(crate) struct Rules {
    config: RateLimitingConfig,
    tools: Pair,
    per_tool: HashMap<Arc<str>, Pair>,
    verbs: [Pair; 5],
    verb_scopes: [Arc<str>; 5],
    backends: HashMap<Arc<str>, BackendRule>,
    /// Whether any backend has a `rate` (else no request needs the catalog).
    backend_rates: bool,
    global_scope: Arc<str>,
}

impl Rules {
    /// `config`'s rules; backend gates whose size is unchanged are taken from `old`,
    /// so calls in flight across a reload still count.
    fn new(config: &RateLimitingConfig, old: Option<&Rules>) -> Self {
        let pair = |shared, per_user| Pair {
            shared: limit(shared),
            per_user: limit(per_user),
        };
        let verbs = config.verbs.entries().map(|(_, v)| {
            v.map_or_else(Pair::default, |v| {
                pair(v.shared.as_ref(), v.per_user.as_ref())
            })
        });
        let backends = config
            .backends
            .iter()
            .map(|b| {
                let gate = b.max_concurrent.map(|max| {
                    let kept = old
                        .and_then(|o| o.backends.get(b.name.as_str()))
                        .and_then(|r| r.gate.as_ref())
                        .filter(|g| g.max == max);
                    Gate {
                        max,
                        slots: kept
                            .map_or_else(|| Arc::new(Semaphore::new(max)), |g| g.slots.clone()),
                    }
                });
                (
                    Arc::from(b.name.as_str()),
                    BackendRule {
                        rate: limit(b.rate.as_ref()),
                        gate,
                    },
                )
            })
            .collect();
        Self {
            config: config.clone(),
            tools: pair(config.shared.as_ref(), config.per_user.as_ref()),
            per_tool: config
                .tools
                .iter()
                .map(|t| {
                    (
                        Arc::from(t.name.as_str()),
                        pair(t.shared.as_ref(), t.per_user.as_ref()),
                    )
                })
                .collect(),
            verbs,
            verb_scopes: VerbGroup::KEYS.map(Arc::from),
            backend_rates: config.backends.iter().any(|b| b.rate.is_some()),
            backends,
            global_scope: Arc::from(""),
        }
    }

    /// Whom per-user buckets key `caller` as.
    fn subject(&self, caller: Caller) -> Caller {
        match (caller, self.config.anonymous()) {
            (Caller::Address(_), AnonymousKey::Shared) => Caller::Anonymous,
            (caller, _) => caller,
        }
    }

    fn push(
        charges: &mut Charges,
        pair: &Pair,
        kinds: (BucketKind, BucketKind),
        scope: &Arc<str>,
        subject: &Caller,
    ) {
        if let Some(limit) = pair.shared {
            charges.push(Charge {
                key: BucketKey {
                    kind: kinds.0,
                    scope: scope.clone(),
                    subject: None,
                },
                limit,
            });
        }
        if let Some(limit) = pair.per_user {
            charges.push(Charge {
                key: BucketKey {
                    kind: kinds.1,
                    scope: scope.clone(),
                    subject: Some(subject.clone()),
                },
                limit,
            });
        }
    }

    /// The charges of a client's call of tool `tool` (advertised name) on `backend`:
    /// the global budgets, then the tool's and the backend's.
    /// With them, the `tool` metric label ([`Self::own_charges`]).
    fn tool_charges(&self, tool: &str, backend: Option<&str>, subject: &Caller) -> (Charges, &str) {
        let mut charges = Charges::new();
        Self::push(
            &mut charges,
            &self.tools,
            (BucketKind::Shared, BucketKind::PerUser),
            &self.global_scope,
            subject,
        );
        let label = self.own_charges(&mut charges, tool, backend, subject);
        (charges, label)
    }

    /// The charges of a composite step calling `tool` on `backend`: the tool's and
    /// the backend's budgets only.
    fn step_charges(&self, tool: &str, backend: Option<&str>, subject: &Caller) -> (Charges, &str) {
        let mut charges = Charges::new();
        let label = self.own_charges(&mut charges, tool, backend, subject);
        (charges, label)
    }

    /// The tool's and the backend's charges; returns the `tool` metric label: the
    /// configured name, `*` for a tool without a `tools[]` entry (bounded: names
    /// come from the configuration). One lookup of the tool serves both.
    fn own_charges(
        &self,
        charges: &mut Charges,
        tool: &str,
        backend: Option<&str>,
        subject: &Caller,
    ) -> &str {
        let mut label = "*";
        if !self.per_tool.is_empty()
            && let Some((scope, pair)) = self.per_tool.get_key_value(tool)
        {
            Self::push(
                charges,
                pair,
                (BucketKind::ToolShared, BucketKind::ToolPerUser),
                scope,
                subject,
            );
            label = scope;
        }
        self.backend_charge(charges, backend);
        label
    }

    fn backend_charge(&self, charges: &mut Charges, backend: Option<&str>) {
        if let Some((scope, rule)) = backend.and_then(|b| self.backends.get_key_value(b))
            && let Some(limit) = rule.rate
        {
            charges.push(Charge {
                key: BucketKey {
                    kind: BucketKind::Backend,
                    scope: scope.clone(),
                    subject: None,
                },
                limit,
            });
        }
    }

    /// The `tool` metric label of a verb other than `tools/call`: its method
    /// (bounded: one of the client methods).
    fn verb_label(method: &str) -> &'static str {
        vmcp_layers::jsonrpc::CLIENT_METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other")
    }
}

/// The gateway's rate limiter: the buckets (kept across reloads) and the rules of
/// the current configuration (`None` without `rateLimiting`).
pub(crate) struct RateLimiter {
    store: MemoryStore,
    /// A shared store (Redis) replaces the memory one when configured (set at
    /// start: `rateLimiting.store` is read once).
    shared_store: std::sync::OnceLock<Arc<dyn BucketStore>>,
    rules: RwLock<Option<Arc<Rules>>>,
    /// Whether a store error was logged (one WARN, then the metric only).
    warned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter").finish_non_exhaustive()
    }
}

/// Who a request is metered as: its caller, keyed as the session caps key callers
/// (an identity by issuer and subject, anonymous callers by address).
pub(crate) fn caller(identity: Option<&Identity>, address: Option<IpAddr>) -> Caller {
    Caller::of(identity, || crate::seal::caller_of(identity), address)
}

impl RateLimiter {
    pub(crate) fn new(config: &VmcpConfig) -> Self {
        Self {
            store: MemoryStore::default(),
            shared_store: std::sync::OnceLock::new(),
            rules: RwLock::new(
                config
                    .rate_limiting
                    .as_ref()
                    .map(|c| Arc::new(Rules::new(c, None))),
            ),
            warned: Default::default(),
        }
    }

    /// Keep the buckets in the `sessionStorage` Redis from now on (at start).
    pub(crate) fn use_redis(&self, store: Arc<crate::redis_store::RedisStore>) {
        let _ = self
            .shared_store
            .set(Arc::new(redis_buckets::RedisBuckets::new(store)));
    }

    /// Whether requests cannot be served without the shared store: buckets in
    /// Redis with `failMode: closed` (for `/readyz`).
    pub(crate) fn needs_store(&self) -> bool {
        self.shared()
            && self
                .rules()
                .is_some_and(|r| r.config.fail_mode() == FailMode::Closed)
    }

    /// Whether the buckets are in Redis (for `/status`).
    pub(crate) fn shared(&self) -> bool {
        self.shared_store.get().is_some()
    }

    /// Follow a reloaded configuration (buckets are kept).
    pub(crate) fn reconfigure(&self, config: &VmcpConfig) {
        let mut rules = self.rules.write().unwrap_or_else(|e| e.into_inner());
        let next = config
            .rate_limiting
            .as_ref()
            .map(|c| Arc::new(Rules::new(c, rules.as_deref())));
        *rules = next;
    }

    /// The rules in force.
    pub(crate) fn rules(&self) -> Option<Arc<Rules>> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The configuration in force (for `/status`).
    pub(crate) fn config(&self) -> Option<RateLimitingConfig> {
        self.rules().map(|r| r.config.clone())
    }

    /// Meter one client request; `Some` refuses it. A `tools/call` of a composite
    /// takes the global budgets here, once; its steps are metered by their tools
    /// ([`Self::admit_step`]).
    pub(crate) async fn admit(
        &self,
        parsed: &ParsedMcpRequest,
        catalog: impl FnOnce() -> Arc<Catalog>,
        caller: impl FnOnce() -> Caller,
        calls: Option<&BackendCalls>,
    ) -> Option<Refusal> {
        let rules = self.rules()?;
        // Notifications and responses are not requests.
        parsed.id.as_ref()?;
        // The catalog is read only to find a backend whose `rate` applies.
        let catalog = rules.backend_rates.then(catalog);
        let catalog = catalog.as_deref();
        let method = parsed.method.as_str();
        let name = parsed.name.as_deref();
        let (charges, label) = if method == "tools/call" {
            let name = name.unwrap_or_default();
            // A composite has no backend: its call takes the global tokens (once,
            // however many steps it runs) and its own `tools[]` entry if any; its
            // steps take their tools' and backends' ([`Self::admit_step`]).
            let backend = catalog
                .and_then(|c| c.tool(name))
                .map(|e| &*e.route.backend);
            let subject = rules.subject(caller());
            rules.tool_charges(name, backend, &subject)
        } else {
            let group = VerbGroup::of(method)?;
            let backend = catalog.and_then(|catalog| match group {
                VerbGroup::Reads => parsed
                    .uri
                    .as_deref()
                    .and_then(|uri| catalog.resource_owner(uri))
                    .map(|b| &**b),
                VerbGroup::Prompts => name
                    .and_then(|n| catalog.prompt(n))
                    .map(|e| &*e.route.backend),
                VerbGroup::Completion => match (name, parsed.uri.as_deref()) {
                    (Some(name), _) => catalog.prompt(name).map(|e| &*e.route.backend),
                    (None, Some(uri)) => catalog.completion_owner_for_resource(uri).map(|b| &**b),
                    _ => None,
                },
                VerbGroup::Lists | VerbGroup::Discover => None,
            });
            let pair = &rules.verbs[group as usize];
            let mut charges = Charges::new();
            // The caller is keyed only when a per-user bucket needs it.
            let subject = if pair.per_user.is_some() {
                rules.subject(caller())
            } else {
                Caller::Anonymous
            };
            Rules::push(
                &mut charges,
                pair,
                (BucketKind::VerbShared, BucketKind::VerbPerUser),
                &rules.verb_scopes[group as usize],
                &subject,
            );
            rules.backend_charge(&mut charges, backend);
            (charges, Rules::verb_label(method))
        };
        if charges.is_empty() {
            return None;
        }
        self.decide(&rules, &charges, label, calls).await
    }

    /// Meter one composite step calling `tool` (advertised name) on `backend`: by
    /// the tool's own budgets and the backend's, not the global ones (the
    /// composite's call took those once).
    pub(crate) async fn admit_step(
        &self,
        tool: &str,
        backend: &str,
        caller: &Caller,
        calls: Option<&BackendCalls>,
    ) -> Option<Refusal> {
        let rules = self.rules()?;
        let subject = rules.subject(caller.clone());
        let (charges, label) = rules.step_charges(tool, Some(backend), &subject);
        if charges.is_empty() {
            return None;
        }
        self.decide(&rules, &charges, label, calls).await
    }

    async fn decide(
        &self,
        rules: &Rules,
        charges: &[Charge],
        label: &str,
        calls: Option<&BackendCalls>,
    ) -> Option<Refusal> {
        let decision = match self.shared_store.get() {
            None => Ok(self.store.take_now(charges)),
            Some(store) => store.take(charges).await,
        };
        let record = |bucket: &str, decision: &str| {
            if let Some(calls) = calls {
                calls.0.rate_limit(label, bucket, decision);
            }
        };
        match decision {
            Ok(Decision::Allowed) => {
                // The store answers again: the next outage gets its own WARN.
                self.warned
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                for charge in charges {
                    record(charge.key.kind.label(), "allowed");
                }
                None
            }
            Ok(Decision::Limited {
                retry_after,
                bucket,
            }) => {
                self.warned
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                let kind = charges
                    .get(bucket)
                    .map_or(BucketKind::Shared, |c| c.key.kind);
                record(kind.label(), "limited");
                Some(Refusal::new(retry_after, kind))
            }
            Err(error) => {
                if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        "rate limiting: {error}; failing {:?}",
                        rules.config.fail_mode()
                    );
                }
                record("store", "error");
                match rules.config.fail_mode() {
                    FailMode::Open => None,
                    FailMode::Closed => {
                        Some(Refusal::new(Duration::from_secs(1), BucketKind::Shared))
                    }
                }
            }
        }
    }

    /// A slot for one call to `backend` under its `maxConcurrent` cap, waited for at
    /// most `wait()` (read only for a capped backend); `Ok(None)` when uncapped,
    /// `Err` (the wait) when none freed up in time.
    pub(crate) async fn slot(
        &self,
        backend: &str,
        wait: impl FnOnce() -> Duration,
    ) -> Result<Option<OwnedSemaphorePermit>, Duration> {
        let Some(rules) = self.rules() else {
            return Ok(None);
        };
        let Some(gate) = rules.backends.get(backend).and_then(|r| r.gate.as_ref()) else {
            return Ok(None);
        };
        let slots = gate.slots.clone();
        drop(rules);
        let wait = wait();
        match tokio::time::timeout(wait, slots.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            // Never closed; a closed one would cap nothing.
            Ok(Err(_)) => Ok(None),
            Err(_) => Err(wait),
        }
    }

    /// Calls in flight per capped backend (for `/status`): `(name, in flight, max)`.
    pub(crate) fn in_flight(&self) -> Vec<(String, usize, usize)> {
        let Some(rules) = self.rules() else {
            return Vec::new();
        };
        let mut rows: Vec<_> = rules
            .backends
            .iter()
            .filter_map(|(name, rule)| {
                rule.gate.as_ref().map(|g| {
                    (
                        name.to_string(),
                        g.max.saturating_sub(g.slots.available_permits()),
                        g.max,
                    )
                })
            })
            .collect();
        rows.sort();
        rows
    }
}

#[cfg(test)]
mod tests;
