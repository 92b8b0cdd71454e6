//! Backend health: the status model and the circuit breaker.
//!
//! Every backend carries a [`BackendHealth`]. It says whether the *backend* works:
//! periodic checks, vmcp's own requests (listings) and the transport failures of real
//! calls feed it. What one caller brings on itself does not: a caller's request that
//! runs out of its time (a slow tool, a huge read; whether the backend is stuck is
//! what the bounded checks answer), and a caller whose credentials cannot be had or
//! are refused. A successful check clears the call failures (once an open circuit's
//! period has passed), so a backend taken out by failed calls, and no longer called
//! because it is not advertised, comes back at its next good check.
//! Only `healthy` and `degraded` backends are advertised; a flip of that is
//! announced as a [`BackendEventKind::HealthChanged`] event, which the aggregator
//! turns into a catalog rebuild (debounced there, never on this path). The periodic
//! checks are run by the aggregator's monitor.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::{BackendEvent, BackendEventKind};
use crate::config::FailureHandlingConfig;

/// The health of one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Answering in time.
    Healthy,
    /// Answering, but slower than `degradedThreshold`.
    Degraded,
    /// `unhealthyThreshold` consecutive failures (or its circuit is open).
    Unhealthy,
    /// The backend refused our credentials (HTTP 401/403).
    Unauthenticated,
    /// Not checked yet.
    Unknown,
}

impl HealthStatus {
    /// Whether a backend in this status is advertised to clients.
    pub fn advertisable(self) -> bool {
        matches!(self, HealthStatus::Healthy | HealthStatus::Degraded)
    }
}

/// The state of a backend's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CircuitState {
    /// Calls flow.
    Closed,
    /// Calls fail fast until the open period ends.
    Open,
    /// One probe is allowed through; its outcome closes or re-opens the circuit.
    HalfOpen,
}

/// Health settings, validated and defaulted.
#[derive(Debug, Clone)]
pub struct HealthSettings {
    /// Time between checks.
    pub interval: Duration,
    /// Consecutive failures that make a backend unhealthy.
    pub unhealthy_threshold: u32,
    /// Bound on one check.
    pub timeout: Duration,
    /// Latency above which a successful answer counts as degraded.
    pub degraded_threshold: Duration,
    /// Circuit breaker: consecutive failures that open it, and how long it stays open.
    pub circuit: Option<(u32, Duration)>,
}

impl From<&FailureHandlingConfig> for HealthSettings {
    fn from(c: &FailureHandlingConfig) -> Self {
        let circuit = c
            .circuit_breaker
            .as_ref()
            .filter(|cb| cb.enabled)
            .map(|cb| {
                (
                    cb.failure_threshold.unwrap_or(5),
                    cb.timeout.unwrap_or(Duration::from_secs(60)),
                )
            });
        Self {
            interval: c.health_check_interval.unwrap_or(Duration::from_secs(30)),
            unhealthy_threshold: c.unhealthy_threshold.unwrap_or(3),
            timeout: c.health_check_timeout.unwrap_or(Duration::from_secs(10)),
            degraded_threshold: c.degraded_threshold.unwrap_or(Duration::from_secs(5)),
            circuit,
        }
    }
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self::from(&FailureHandlingConfig::default())
    }
}

/// A point-in-time copy of a backend's health, for status reporting.
#[derive(Debug, Clone, Serialize)]
pub struct HealthSnapshot {
    /// Current status.
    pub status: HealthStatus,
    /// Consecutive failures so far.
    pub consecutive_failures: u32,
    /// When the backend was last checked or called.
    pub last_check: Option<SystemTime>,
    /// The last failure, without secrets (no URLs, no tokens).
    pub last_error: Option<String>,
    /// Circuit breaker state.
    pub circuit: CircuitState,
}

/// What an outcome came from: checks and real calls are counted separately, so a
/// backend whose calls keep failing is unhealthy even while its pings succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A periodic health check.
    Check,
    /// A real operation (call, read, listing).
    Call,
}

#[derive(Debug)]
struct State {
    status: HealthStatus,
    check_failures: u32,
    call_failures: u32,
    unauthenticated: bool,
    /// Latency of the last success; `None` until the backend first answered.
    last_latency: Option<Duration>,
    last_check: Option<SystemTime>,
    last_error: Option<String>,
    circuit: CircuitState,
    opened_at: Option<Instant>,
}

/// Who made a call, for telling a caller's request from one of vmcp's own (a keyed
/// digest of the caller's identity or session; never the identity itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallerKey(pub u64);

impl CallerKey {
    /// A per-process keyed digest of the caller: its issuer and subject, or for an
    /// anonymous caller its Legacy `session` (anonymous stateless callers are one
    /// caller). Keyed so the digest says nothing about the identity.
    pub fn of(identity: Option<&vmcp_layers::Identity>, session: Option<&str>) -> Self {
        use std::hash::{BuildHasher, Hash, Hasher};
        static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        let mut hasher = KEY.get_or_init(Default::default).build_hasher();
        match identity.filter(|i| !i.is_anonymous()) {
            Some(identity) => {
                0u8.hash(&mut hasher);
                identity.issuer.hash(&mut hasher);
                identity.subject.hash(&mut hasher);
            }
            None => {
                1u8.hash(&mut hasher);
                session.hash(&mut hasher);
            }
        }
        Self(hasher.finish())
    }
}

impl State {
    fn recompute(&mut self, settings: &HealthSettings) {
        let threshold = settings.unhealthy_threshold;
        self.status = if self.unauthenticated {
            HealthStatus::Unauthenticated
        } else if self.circuit != CircuitState::Closed
            || self.check_failures >= threshold
            || self.call_failures >= threshold
        {
            HealthStatus::Unhealthy
        } else {
            match self.last_latency {
                None => HealthStatus::Unknown,
                Some(latency) if latency > settings.degraded_threshold => HealthStatus::Degraded,
                Some(_) => HealthStatus::Healthy,
            }
        };
    }
}

/// Why a call was not attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitOpen;

/// The health record of one backend, fed by checks and calls.
#[derive(Debug)]
pub struct BackendHealth {
    backend: Arc<str>,
    settings: Mutex<HealthSettings>,
    state: Mutex<State>,
    events: tokio::sync::broadcast::Sender<BackendEvent>,
}

impl BackendHealth {
    /// A record in status `unknown`.
    pub fn new(
        backend: Arc<str>,
        settings: HealthSettings,
        events: tokio::sync::broadcast::Sender<BackendEvent>,
    ) -> Self {
        Self {
            backend,
            settings: Mutex::new(settings),
            state: Mutex::new(State {
                status: HealthStatus::Unknown,
                check_failures: 0,
                call_failures: 0,
                unauthenticated: false,
                last_latency: None,
                last_check: None,
                last_error: None,
                circuit: CircuitState::Closed,
                opened_at: None,
            }),
            events,
        }
    }

    fn settings(&self) -> HealthSettings {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the settings (configuration reload).
    pub fn set_settings(&self, settings: HealthSettings) {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner()) = settings;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current status.
    pub fn status(&self) -> HealthStatus {
        self.state().status
    }

    /// A copy for reporting.
    pub fn snapshot(&self) -> HealthSnapshot {
        let s = self.state();
        HealthSnapshot {
            status: s.status,
            consecutive_failures: s.check_failures.max(s.call_failures),
            last_check: s.last_check,
            last_error: s.last_error.clone(),
            circuit: s.circuit,
        }
    }

    /// Whether a call may go out now. An open circuit whose period has passed turns
    /// half-open and lets this one call through as the probe.
    pub fn admit(&self) -> Result<(), CircuitOpen> {
        let Some((_, open_for)) = self.settings().circuit else {
            return Ok(());
        };
        let mut s = self.state();
        match s.circuit {
            CircuitState::Closed => Ok(()),
            CircuitState::HalfOpen => Err(CircuitOpen),
            CircuitState::Open => {
                if s.opened_at.is_some_and(|at| at.elapsed() >= open_for) {
                    s.circuit = CircuitState::HalfOpen;
                    Ok(())
                } else {
                    Err(CircuitOpen)
                }
            }
        }
    }

    /// Record a success from `source` that took `latency`.
    ///
    /// A successful call closes the circuit (it was the probe, or it was closed). A
    /// successful check clears the call failures too, but closes an open circuit
    /// only once its period has passed: a backend made unhealthy by failed calls is
    /// not advertised, so never called, so only a check can bring it back.
    pub fn record_success(&self, source: Source, latency: Duration) {
        let settings = self.settings();
        let mut s = self.state();
        let before = s.status;
        s.unauthenticated = false;
        s.last_latency = Some(latency);
        s.last_check = Some(SystemTime::now());
        if s.last_error.take().is_some() {
            tracing::info!(backend = %self.backend, "backend {:?} answers again", &*self.backend);
        }
        match source {
            Source::Call => {
                s.call_failures = 0;
                s.circuit = CircuitState::Closed;
            }
            Source::Check => {
                s.check_failures = 0;
                let period_over = match (settings.circuit, s.opened_at) {
                    (Some((_, open_for)), Some(at)) => at.elapsed() >= open_for,
                    _ => true,
                };
                if s.circuit == CircuitState::Closed || period_over {
                    s.circuit = CircuitState::Closed;
                    s.call_failures = 0;
                }
            }
        }
        if s.circuit == CircuitState::Closed {
            s.opened_at = None;
        }
        s.recompute(&settings);
        let after = s.status;
        drop(s);
        self.announce(before, after);
    }

    /// Record a failure from `source`. `unauthenticated` marks a 401/403 refusal.
    pub fn record_failure(&self, source: Source, error: &str, unauthenticated: bool) {
        self.failure(source, error, unauthenticated, true);
    }

    /// Record a failure whose cause was already logged (a stdio backend's process
    /// exit, which its supervisor reports): counted and shown, not warned again.
    pub fn record_reported_failure(&self, source: Source, error: &str) {
        self.failure(source, error, false, false);
    }

    fn failure(&self, source: Source, error: &str, unauthenticated: bool, warn: bool) {
        let settings = self.settings();
        let mut s = self.state();
        let before = s.status;
        s.last_check = Some(SystemTime::now());
        // One warning when a backend starts failing or fails differently; retries
        // with the same reason stay quiet.
        if warn && s.last_error.as_deref() != Some(error) {
            tracing::warn!(backend = %self.backend, "backend {:?} failing: {error}", &*self.backend);
        }
        s.last_error = Some(error.to_owned());
        s.unauthenticated = unauthenticated;
        match source {
            Source::Check => s.check_failures = s.check_failures.saturating_add(1),
            Source::Call => {
                s.call_failures = s.call_failures.saturating_add(1);
                if let Some((threshold, _)) = settings.circuit {
                    let trips = match s.circuit {
                        CircuitState::HalfOpen => true,
                        CircuitState::Closed => s.call_failures >= threshold,
                        CircuitState::Open => false,
                    };
                    if trips {
                        tracing::warn!(backend = %self.backend, "circuit opened after {} failed calls", s.call_failures);
                        s.circuit = CircuitState::Open;
                        s.opened_at = Some(Instant::now());
                    }
                }
            }
        }
        s.recompute(&settings);
        let after = s.status;
        drop(s);
        self.announce(before, after);
    }

    /// Record a request that ran out of time. A caller's request (`caller` set)
    /// is not counted: its deadline is the caller's, and a request that runs long (a
    /// slow tool, a huge read) looks exactly like one the backend never answers, so
    /// counting it would let any few callers take the backend down for everyone.
    /// Whether the backend is stuck is what the checks (bounded by
    /// `healthCheckTimeout`) answer. vmcp's own requests (`caller` `None`: listings)
    /// count.
    pub fn record_timeout(&self, caller: Option<CallerKey>, error: &str) {
        if caller.is_some() {
            tracing::debug!(backend = %self.backend, "a caller's request timed out ({error}); not counted against the backend");
            return;
        }
        self.record_failure(Source::Call, error, false);
    }

    fn announce(&self, before: HealthStatus, after: HealthStatus) {
        if before != after {
            tracing::info!(backend = %self.backend, from = ?before, to = ?after, "backend health changed");
            // Status reporters care about every change; the catalog only about
            // advertisability, which the aggregator derives itself.
            let _ = self.events.send(BackendEvent {
                backend: self.backend.clone(),
                kind: BackendEventKind::HealthChanged,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(
        circuit: Option<(u32, Duration)>,
    ) -> (
        BackendHealth,
        tokio::sync::broadcast::Receiver<BackendEvent>,
    ) {
        let (tx, rx) = tokio::sync::broadcast::channel(16);
        let settings = HealthSettings {
            interval: Duration::from_secs(1),
            unhealthy_threshold: 3,
            timeout: Duration::from_secs(1),
            degraded_threshold: Duration::from_millis(100),
            circuit,
        };
        (BackendHealth::new("b".into(), settings, tx), rx)
    }

    const FAST: Duration = Duration::from_millis(1);

    #[test]
    fn statuses_follow_thresholds_and_announce_flips_only() {
        let (h, mut rx) = health(None);
        assert_eq!(h.status(), HealthStatus::Unknown);
        h.record_failure(Source::Check, "x", false);
        assert_eq!(
            h.status(),
            HealthStatus::Unknown,
            "below the threshold, never seen up"
        );
        h.record_success(Source::Check, FAST);
        assert_eq!(h.status(), HealthStatus::Healthy);
        assert!(rx.try_recv().is_ok());
        h.record_success(Source::Check, FAST);
        assert!(rx.try_recv().is_err(), "no event without a change");
        h.record_success(Source::Check, Duration::from_millis(500));
        assert_eq!(h.status(), HealthStatus::Degraded);
        for _ in 0..2 {
            h.record_failure(Source::Check, "x", false);
        }
        assert_eq!(h.status(), HealthStatus::Degraded, "below the threshold");
        h.record_failure(Source::Check, "boom", false);
        assert_eq!(h.status(), HealthStatus::Unhealthy);
        assert_eq!(h.snapshot().last_error.as_deref(), Some("boom"));
        h.record_failure(Source::Check, "denied", true);
        assert_eq!(h.status(), HealthStatus::Unauthenticated);
        assert!(!h.status().advertisable());
    }

    #[test]
    fn failed_calls_make_a_backend_unhealthy_until_its_next_good_check() {
        let (h, _rx) = health(None);
        h.record_success(Source::Check, FAST);
        for _ in 0..3 {
            h.record_failure(Source::Call, "connection reset", false);
        }
        assert_eq!(h.status(), HealthStatus::Unhealthy);
        // Not advertised, so never called: only a check can bring it back.
        h.record_success(Source::Check, FAST);
        assert_eq!(h.status(), HealthStatus::Healthy);
        assert_eq!(h.snapshot().consecutive_failures, 0);
        assert_eq!(h.snapshot().last_error, None);
        for _ in 0..3 {
            h.record_failure(Source::Call, "connection reset", false);
        }
        h.record_success(Source::Call, FAST);
        assert_eq!(h.status(), HealthStatus::Healthy, "a good call does too");
    }

    #[test]
    fn callers_timeouts_do_not_count_vmcps_own_do() {
        let (h, _rx) = health(Some((3, Duration::from_secs(3600))));
        h.record_success(Source::Check, FAST);
        for caller in 0..100 {
            h.record_timeout(Some(CallerKey(caller)), "timeout");
        }
        assert_eq!(h.status(), HealthStatus::Healthy, "slow calls of callers");
        assert_eq!(h.snapshot().circuit, CircuitState::Closed);
        assert_eq!(h.snapshot().consecutive_failures, 0);
        // vmcp's own requests (listings) are no caller's.
        for _ in 0..3 {
            h.record_timeout(None, "timeout");
        }
        assert_eq!(h.status(), HealthStatus::Unhealthy);
    }

    #[test]
    fn caller_keys_tell_identities_and_sessions_apart_without_revealing_them() {
        let who = |sub: &str| vmcp_layers::Identity {
            subject: sub.into(),
            issuer: Some("https://idp".into()),
            ..Default::default()
        };
        let (alice, bob) = (who("alice"), who("bob"));
        let key = CallerKey::of(Some(&alice), Some("s1"));
        assert_eq!(key, CallerKey::of(Some(&alice), Some("s2")), "the identity");
        assert_ne!(key, CallerKey::of(Some(&bob), None));
        assert_ne!(
            CallerKey::of(None, Some("s1")),
            CallerKey::of(None, Some("s2"))
        );
        assert_eq!(CallerKey::of(None, None), CallerKey::of(None, None));
    }

    #[test]
    fn circuit_opens_on_calls_fails_fast_and_half_opens_once() {
        let (h, _rx) = health(Some((2, Duration::ZERO)));
        assert!(h.admit().is_ok());
        h.record_failure(Source::Call, "x", false);
        h.record_failure(Source::Call, "x", false);
        assert_eq!(h.snapshot().circuit, CircuitState::Open);
        assert_eq!(h.status(), HealthStatus::Unhealthy);
        // The open period (0) has passed: one probe goes through, the next waits.
        assert!(h.admit().is_ok());
        assert_eq!(h.snapshot().circuit, CircuitState::HalfOpen);
        assert_eq!(h.admit(), Err(CircuitOpen));
        h.record_failure(Source::Call, "x", false);
        assert_eq!(
            h.snapshot().circuit,
            CircuitState::Open,
            "a failed probe re-opens"
        );
        assert!(h.admit().is_ok());
        h.record_success(Source::Call, FAST);
        assert_eq!(h.snapshot().circuit, CircuitState::Closed);
        assert_eq!(h.status(), HealthStatus::Healthy);
    }

    #[test]
    fn an_open_circuit_blocks_until_its_period_ends_then_a_check_closes_it() {
        let (h, _rx) = health(Some((1, Duration::from_secs(3600))));
        h.record_failure(Source::Call, "x", false);
        assert_eq!(h.admit(), Err(CircuitOpen));
        h.record_success(Source::Check, FAST);
        assert_eq!(
            h.snapshot().circuit,
            CircuitState::Open,
            "not before the period ends"
        );
        let (h, _rx) = health(Some((1, Duration::ZERO)));
        h.record_failure(Source::Call, "x", false);
        h.record_failure(Source::Check, "x", false);
        assert_eq!(
            h.snapshot().circuit,
            CircuitState::Open,
            "checks do not re-open it"
        );
        h.record_success(Source::Check, FAST);
        assert_eq!(h.snapshot().circuit, CircuitState::Closed);
        assert!(h.status().advertisable());
    }
}
