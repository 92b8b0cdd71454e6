//! The request and backend metrics, recorded both into OpenTelemetry instruments
//! (exported over OTLP) and into a Prometheus registry (served as text at `/metrics`).

use std::sync::Mutex;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter as OtelCounter, Histogram as OtelHistogram, Meter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The HTTP methods of requests that are not JSON-RPC, as labels. The method comes
/// from the client, and every distinct label value is a series kept for the life of
/// the process, so only these and the MCP methods
/// ([`CLIENT_METHODS`](crate::jsonrpc::CLIENT_METHODS)) are labels; anything else is
/// counted as [`OTHER`].
const HTTP_METHODS: &[&str] = &[
    "http GET",
    "http POST",
    "http DELETE",
    "http HEAD",
    "http OPTIONS",
    "http PUT",
    "http PATCH",
];

/// The label of every method not in the known list.
pub const OTHER: &str = "other";

/// `method` as a metric label: itself when it is a known MCP method (or a known
/// `http <METHOD>`), [`OTHER`] otherwise, so a client cannot grow the series.
pub fn method_label(method: &str) -> &'static str {
    crate::jsonrpc::CLIENT_METHODS
        .iter()
        .chain(HTTP_METHODS)
        .find(|known| **known == method)
        .copied()
        .unwrap_or(OTHER)
}
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

struct Otel {
    requests: OtelCounter<u64>,
    duration: OtelHistogram<f64>,
    errors: OtelCounter<u64>,
    backend_requests: OtelCounter<u64>,
    backend_duration: OtelHistogram<f64>,
    backend_errors: OtelCounter<u64>,
    workflows: OtelCounter<u64>,
    workflow_duration: OtelHistogram<f64>,
    workflow_errors: OtelCounter<u64>,
    integrity_changes: OtelCounter<u64>,
    rate_limit: OtelCounter<u64>,
    optimizer_fallbacks: OtelCounter<u64>,
}

struct Prom {
    registry: Mutex<Registry>,
    requests: Family<Labels, Counter>,
    duration: HistogramFamily,
    errors: Family<Labels, Counter>,
    backend_requests: Family<Labels, Counter>,
    backend_duration: HistogramFamily,
    backend_errors: Family<Labels, Counter>,
    workflows: Family<Labels, Counter>,
    workflow_duration: HistogramFamily,
    workflow_errors: Family<Labels, Counter>,
    integrity_changes: Family<Labels, Counter>,
    rate_limit: Family<Labels, Counter>,
    optimizer_fallbacks: Counter,
}

/// The gateway's metrics: per method, and per backend and method.
pub struct Metrics {
    otel: Option<Otel>,
    prom: Option<Prom>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("otel", &self.otel.is_some())
            .field("prometheus", &self.prom.is_some())
            .finish()
    }
}

impl Metrics {
    /// Metrics into `meter` (OTLP) and/or a Prometheus registry.
    pub fn new(meter: Option<&Meter>, prometheus: bool) -> Self {
        let otel = meter.map(|m| Otel {
            requests: m
                .u64_counter("vmcp.requests")
                .with_description("MCP requests served")
                .build(),
            duration: m
                .f64_histogram("vmcp.request.duration")
                .with_unit("s")
                .with_description("MCP request duration")
                .build(),
            errors: m
                .u64_counter("vmcp.request.errors")
                .with_description("MCP requests that failed")
                .build(),
            backend_requests: m
                .u64_counter("vmcp.backend.requests")
                .with_description("Requests sent to backends")
                .build(),
            backend_duration: m
                .f64_histogram("vmcp.backend.request.duration")
                .with_unit("s")
                .with_description("Backend request duration")
                .build(),
            backend_errors: m
                .u64_counter("vmcp.backend.errors")
                .with_description("Backend requests that failed")
                .build(),
            workflows: m
                .u64_counter("vmcp.workflow.executions")
                .with_description("Composite tool runs")
                .build(),
            workflow_duration: m
                .f64_histogram("vmcp.workflow.duration")
                .with_unit("s")
                .with_description("Composite tool run duration")
                .build(),
            workflow_errors: m
                .u64_counter("vmcp.workflow.errors")
                .with_description("Composite tool runs that failed")
                .build(),
            integrity_changes: m
                .u64_counter("vmcp.integrity.changes")
                .with_description("Backend definitions seen changed from their pin")
                .build(),
            rate_limit: m
                .u64_counter("vmcp.rate_limit.decisions")
                .with_description("Rate-limit decisions per tool, bucket and decision")
                .build(),
            optimizer_fallbacks: m
                .u64_counter("vmcp.optimizer.keyword_fallbacks")
                .with_description(
                    "find_tool searches answered by keyword only: the embedding service failed",
                )
                .build(),
        });
        let prom = prometheus.then(|| {
            let mut registry = Registry::default();
            let prom = Prom {
                requests: Family::default(),
                duration: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
                errors: Family::default(),
                backend_requests: Family::default(),
                backend_duration: Family::new_with_constructor(
                    latency_histogram as fn() -> Histogram,
                ),
                backend_errors: Family::default(),
                workflows: Family::default(),
                workflow_duration: Family::new_with_constructor(
                    latency_histogram as fn() -> Histogram,
                ),
                workflow_errors: Family::default(),
                integrity_changes: Family::default(),
                rate_limit: Family::default(),
                optimizer_fallbacks: Counter::default(),
                registry: Mutex::new(Registry::default()),
            };
            registry.register(
                "vmcp_requests",
                "MCP requests served",
                prom.requests.clone(),
            );
            registry.register(
                "vmcp_request_duration_seconds",
                "MCP request duration",
                prom.duration.clone(),
            );
            registry.register(
                "vmcp_request_errors",
                "MCP requests that failed",
                prom.errors.clone(),
            );
            registry.register(
                "vmcp_backend_requests",
                "Requests sent to backends",
                prom.backend_requests.clone(),
            );
            registry.register(
                "vmcp_backend_request_duration_seconds",
                "Backend request duration",
                prom.backend_duration.clone(),
            );
            registry.register(
                "vmcp_backend_errors",
                "Backend requests that failed",
                prom.backend_errors.clone(),
            );
            registry.register(
                "vmcp_workflow_executions",
                "Composite tool runs",
                prom.workflows.clone(),
            );
            registry.register(
                "vmcp_workflow_duration_seconds",
                "Composite tool run duration",
                prom.workflow_duration.clone(),
            );
            registry.register(
                "vmcp_workflow_errors",
                "Composite tool runs that failed",
                prom.workflow_errors.clone(),
            );
            registry.register(
                "vmcp_integrity_changes",
                "Backend definitions seen changed from their pin",
                prom.integrity_changes.clone(),
            );
            registry.register(
                "vmcp_rate_limit_decisions",
                "Rate-limit decisions per tool, bucket and decision",
                prom.rate_limit.clone(),
            );
            registry.register(
                "vmcp_optimizer_keyword_fallbacks",
                "find_tool searches answered by keyword only: the embedding service failed",
                prom.optimizer_fallbacks.clone(),
            );
            *prom.registry.lock().unwrap_or_else(|e| e.into_inner()) = registry;
            prom
        });
        Self { otel, prom }
    }

    /// Whether anything is recorded.
    pub fn enabled(&self) -> bool {
        self.otel.is_some() || self.prom.is_some()
    }

    /// One served request. `method` is bounded by [`method_label`].
    pub fn request(&self, method: &str, elapsed: Duration, error: bool) {
        let method = method_label(method);
        if let Some(otel) = &self.otel {
            let attrs = [KeyValue::new("mcp.method.name", method)];
            otel.requests.add(1, &attrs);
            otel.duration.record(elapsed.as_secs_f64(), &attrs);
            if error {
                otel.errors.add(1, &attrs);
            }
        }
        if let Some(prom) = &self.prom {
            let labels: Labels = vec![("mcp_method", method.to_owned())];
            prom.requests.get_or_create(&labels).inc();
            prom.duration
                .get_or_create(&labels)
                .observe(elapsed.as_secs_f64());
            if error {
                prom.errors.get_or_create(&labels).inc();
            }
        }
    }

    /// One backend call. `backend` is a configured name; `method` is bounded by
    /// [`method_label`].
    pub fn backend(&self, backend: &str, method: &str, elapsed: Duration, error: bool) {
        let method = method_label(method);
        if let Some(otel) = &self.otel {
            let attrs = [
                KeyValue::new("mcp.method.name", method),
                KeyValue::new("vmcp.backend", backend.to_owned()),
            ];
            otel.backend_requests.add(1, &attrs);
            otel.backend_duration.record(elapsed.as_secs_f64(), &attrs);
            if error {
                otel.backend_errors.add(1, &attrs);
            }
        }
        if let Some(prom) = &self.prom {
            let labels: Labels = vec![
                ("backend", backend.to_owned()),
                ("mcp_method", method.to_owned()),
            ];
            prom.backend_requests.get_or_create(&labels).inc();
            prom.backend_duration
                .get_or_create(&labels)
                .observe(elapsed.as_secs_f64());
            if error {
                prom.backend_errors.get_or_create(&labels).inc();
            }
        }
    }

    /// One run of composite tool `composite`.
    pub fn workflow(&self, composite: &str, elapsed: Duration, error: bool) {
        if let Some(otel) = &self.otel {
            let attrs = [KeyValue::new("vmcp.composite", composite.to_owned())];
            otel.workflows.add(1, &attrs);
            otel.workflow_duration.record(elapsed.as_secs_f64(), &attrs);
            if error {
                otel.workflow_errors.add(1, &attrs);
            }
        }
        if let Some(prom) = &self.prom {
            let labels: Labels = vec![("composite", composite.to_owned())];
            prom.workflows.get_or_create(&labels).inc();
            prom.workflow_duration
                .get_or_create(&labels)
                .observe(elapsed.as_secs_f64());
            if error {
                prom.workflow_errors.get_or_create(&labels).inc();
            }
        }
    }

    /// One backend definition seen changed from its pin (tool integrity). `backend`
    /// is a configured name; `entry` is `tool`, `prompt` or `template`.
    pub fn integrity_change(&self, backend: &str, entry: &'static str) {
        if let Some(otel) = &self.otel {
            otel.integrity_changes.add(
                1,
                &[
                    KeyValue::new("vmcp.backend", backend.to_owned()),
                    KeyValue::new("vmcp.entry", entry),
                ],
            );
        }
        if let Some(prom) = &self.prom {
            let labels: Labels = vec![("backend", backend.to_owned()), ("entry", entry.to_owned())];
            prom.integrity_changes.get_or_create(&labels).inc();
        }
    }

    /// One rate-limit decision. The caller bounds `tool` (configured names, `*`,
    /// or a method label); `bucket` and `decision` are fixed words.
    pub fn rate_limit(&self, tool: &str, bucket: &str, decision: &str) {
        if let Some(otel) = &self.otel {
            otel.rate_limit.add(
                1,
                &[
                    KeyValue::new("tool", tool.to_owned()),
                    KeyValue::new("bucket", bucket.to_owned()),
                    KeyValue::new("decision", decision.to_owned()),
                ],
            );
        }
        if let Some(prom) = &self.prom {
            let labels: Labels = vec![
                ("tool", tool.to_owned()),
                ("bucket", bucket.to_owned()),
                ("decision", decision.to_owned()),
            ];
            prom.rate_limit.get_or_create(&labels).inc();
        }
    }

    /// One `find_tool` answered by keyword only because the embedding service
    /// failed (the optimizer's degraded mode).
    pub fn optimizer_fallback(&self) {
        if let Some(otel) = &self.otel {
            otel.optimizer_fallbacks.add(1, &[]);
        }
        if let Some(prom) = &self.prom {
            prom.optimizer_fallbacks.inc();
        }
    }

    /// The Prometheus text exposition, if Prometheus is enabled.
    pub fn prometheus_text(&self) -> Option<String> {
        let prom = self.prom.as_ref()?;
        let mut text = String::new();
        let registry = prom.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry).ok()?;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_the_counters() {
        let metrics = Metrics::new(None, true);
        metrics.request("tools/call", Duration::from_millis(3), false);
        metrics.request("tools/call", Duration::from_millis(3), true);
        metrics.backend("gh", "tools/call", Duration::from_millis(2), false);
        metrics.integrity_change("gh", "tool");
        let text = metrics.prometheus_text().unwrap();
        assert!(
            text.contains("vmcp_integrity_changes_total{backend=\"gh\",entry=\"tool\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vmcp_requests_total{mcp_method=\"tools/call\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("vmcp_request_errors_total{mcp_method=\"tools/call\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "vmcp_backend_requests_total{backend=\"gh\",mcp_method=\"tools/call\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("vmcp_request_duration_seconds_count{mcp_method=\"tools/call\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn unknown_methods_share_one_label() {
        let metrics = Metrics::new(None, true);
        for i in 0..100 {
            metrics.request(&format!("x/{i}"), Duration::from_millis(1), true);
        }
        metrics.request("http GET", Duration::from_millis(1), false);
        let text = metrics.prometheus_text().unwrap();
        assert!(
            text.contains("vmcp_requests_total{mcp_method=\"other\"} 100"),
            "{text}"
        );
        assert!(
            text.contains("vmcp_requests_total{mcp_method=\"http GET\"} 1"),
            "{text}"
        );
        assert!(!text.contains("x/1"), "{text}");
    }
}
