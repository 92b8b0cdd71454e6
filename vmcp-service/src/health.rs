//! Backend health: the status model, the circuit breaker, and the periodic monitor.
//!
//! Every backend carries a [`BackendHealth`]. Periodic checks *and* real calls feed
//! it, so a backend whose calls time out is not "healthy" because its ping works.
//! Only `healthy` and `degraded` backends are advertised; a flip of that is
//! announced as a [`BackendEventKind::HealthChanged`] event, which the aggregator
//! turns into a catalog rebuild (debounced there, never on this path).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendEvent, BackendEventKind, BackendRegistry};
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

#[derive(Debug)]
struct State {
    status: HealthStatus,
    failures: u32,
    last_check: Option<SystemTime>,
    last_error: Option<String>,
    circuit: CircuitState,
    opened_at: Option<Instant>,
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
                failures: 0,
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
            consecutive_failures: s.failures,
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

    /// Record a successful check or call that took `latency`.
    pub fn record_success(&self, latency: Duration) {
        let settings = self.settings();
        let mut s = self.state();
        let before = s.status;
        s.failures = 0;
        s.last_check = Some(SystemTime::now());
        s.last_error = None;
        s.circuit = CircuitState::Closed;
        s.opened_at = None;
        s.status = if latency > settings.degraded_threshold {
            HealthStatus::Degraded
        } else {
            HealthStatus::Healthy
        };
        let after = s.status;
        drop(s);
        self.announce(before, after);
    }

    /// Record a failed check or call. `unauthenticated` marks a 401/403 refusal.
    pub fn record_failure(&self, error: &str, unauthenticated: bool) {
        let settings = self.settings();
        let mut s = self.state();
        let before = s.status;
        s.failures = s.failures.saturating_add(1);
        s.last_check = Some(SystemTime::now());
        s.last_error = Some(error.to_owned());
        if let Some((threshold, _)) = settings.circuit
            && (s.circuit == CircuitState::HalfOpen || s.failures >= threshold)
        {
            if s.circuit != CircuitState::Open {
                tracing::warn!(backend = %self.backend, "circuit opened after {} failures", s.failures);
            }
            s.circuit = CircuitState::Open;
            s.opened_at = Some(Instant::now());
        }
        if unauthenticated {
            s.status = HealthStatus::Unauthenticated;
        } else if s.failures >= settings.unhealthy_threshold || s.circuit == CircuitState::Open {
            s.status = HealthStatus::Unhealthy;
        }
        let after = s.status;
        drop(s);
        self.announce(before, after);
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

/// Run periodic health checks on every backend until `shutdown`.
pub async fn monitor(
    registry: Arc<BackendRegistry>,
    settings: impl Fn() -> HealthSettings + Send + 'static,
    shutdown: CancellationToken,
) {
    loop {
        let current = settings();
        let checks = registry
            .all()
            .into_iter()
            .map(|backend| async move { backend.health_check(current.timeout).await });
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = futures::future::join_all(checks) => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(current.interval) => {}
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

    #[test]
    fn statuses_follow_thresholds_and_announce_flips_only() {
        let (h, mut rx) = health(None);
        assert_eq!(h.status(), HealthStatus::Unknown);
        h.record_success(Duration::from_millis(1));
        assert_eq!(h.status(), HealthStatus::Healthy);
        assert!(rx.try_recv().is_ok());
        h.record_success(Duration::from_millis(1));
        assert!(rx.try_recv().is_err(), "no event without a change");
        h.record_success(Duration::from_millis(500));
        assert_eq!(h.status(), HealthStatus::Degraded);
        h.record_failure("x", false);
        h.record_failure("x", false);
        assert_eq!(h.status(), HealthStatus::Degraded, "below the threshold");
        h.record_failure("boom", false);
        assert_eq!(h.status(), HealthStatus::Unhealthy);
        assert_eq!(h.snapshot().last_error.as_deref(), Some("boom"));
        h.record_failure("denied", true);
        assert_eq!(h.status(), HealthStatus::Unauthenticated);
        assert!(!h.status().advertisable());
    }

    #[test]
    fn circuit_opens_fails_fast_and_half_opens_once() {
        let (h, _rx) = health(Some((2, Duration::from_millis(0))));
        assert!(h.admit().is_ok());
        h.record_failure("x", false);
        h.record_failure("x", false);
        assert_eq!(h.snapshot().circuit, CircuitState::Open);
        assert_eq!(h.status(), HealthStatus::Unhealthy);
        // The open period (0 ms) has passed: one probe goes through, the next waits.
        assert!(h.admit().is_ok());
        assert_eq!(h.snapshot().circuit, CircuitState::HalfOpen);
        assert_eq!(h.admit(), Err(CircuitOpen));
        h.record_success(Duration::from_millis(1));
        assert_eq!(h.snapshot().circuit, CircuitState::Closed);
        assert!(h.admit().is_ok());
    }

    #[test]
    fn open_circuit_blocks_until_its_period_ends() {
        let (h, _rx) = health(Some((1, Duration::from_secs(3600))));
        h.record_failure("x", false);
        assert_eq!(h.admit(), Err(CircuitOpen));
    }
}
