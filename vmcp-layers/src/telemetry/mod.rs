#![doc = include_str!("../../../docs/layers/telemetry.md")]
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::telemetry::{Telemetry, TelemetrySettings};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let telemetry = Telemetry::new(&TelemetrySettings {
//!     prometheus: true,
//!     ..TelemetrySettings::default()
//! }).unwrap();
//! let service = ServiceBuilder::new()
//!     .layer(telemetry.layer())
//!     .service_fn(|_req: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::empty())) });
//! let response = service.oneshot(Request::post("/mcp").body(Body::empty()).unwrap()).await.unwrap();
//! http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
//! assert!(telemetry.prometheus_text().unwrap().contains("vmcp_requests_total"));
//! # });
//! ```

pub(crate) mod exposition;
pub mod metrics;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use futures::future::BoxFuture;
use http::{HeaderMap, Request, Response};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tower::{Layer, Service};

use crate::body::ObservedBody;
use crate::context::{
    BackendCallScope, BackendCalls, BackendObserver, BackendTarget, CallKind, ParsedMcpRequest,
    StepScope,
};
pub use exposition::MetricsAccess;
pub use metrics::Metrics;

/// What the telemetry pipeline exports. The gateway's `telemetry:` section
/// (`vmcp_service::config::TelemetryConfig`) is translated into this.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// The OTLP/HTTP collector, e.g. `http://127.0.0.1:4318` (`/v1/traces` and
    /// `/v1/metrics` are appended when the URL has no path; without a scheme,
    /// `http://` is assumed). Nothing is exported without it.
    pub endpoint: Option<String>,
    /// `service.name`.
    pub service_name: String,
    /// `service.version`.
    pub service_version: String,
    /// Export traces.
    pub tracing: bool,
    /// Export metrics over OTLP.
    pub metrics: bool,
    /// Fraction of traces sampled, in `[0, 1]`; a caller's sampled parent is honoured.
    pub sampling_rate: f64,
    /// Extra HTTP headers for the collector (e.g. an API key).
    pub headers: BTreeMap<String, String>,
    /// Keep Prometheus text for `/metrics`.
    pub prometheus: bool,
    /// Extra resource attributes.
    pub custom_attributes: BTreeMap<String, String>,
    /// How often metrics are pushed.
    pub metrics_interval: Duration,
    /// Extra CA certificates trusted for an `https://` collector, besides the
    /// platform and webpki roots.
    pub ca_bundle: Option<crate::tls::CaBundle>,
}

impl Default for TelemetrySettings {
    /// Nothing exported, no Prometheus; service `vmcp` at this crate's version,
    /// every trace sampled, metrics pushed every 60 s.
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: "vmcp".to_owned(),
            service_version: env!("CARGO_PKG_VERSION").to_owned(),
            tracing: false,
            metrics: false,
            sampling_rate: 1.0,
            headers: BTreeMap::new(),
            prometheus: false,
            custom_attributes: BTreeMap::new(),
            metrics_interval: Duration::from_secs(60),
            ca_bundle: None,
        }
    }
}

/// Bound on one OTLP export (the OpenTelemetry default).
const OTLP_TIMEOUT: Duration = Duration::from_secs(10);

/// The collector URL `endpoint` stands for: `http://` is assumed without a scheme.
pub fn normalize_endpoint(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    }
}

/// `endpoint` + `/v1/<signal>` unless the endpoint already has a path.
fn signal_url(endpoint: &str, signal: &str) -> String {
    let endpoint = normalize_endpoint(endpoint);
    match reqwest::Url::parse(&endpoint) {
        Ok(url) if url.path() == "/" || url.path().is_empty() => {
            format!("{}/v1/{signal}", endpoint.trim_end_matches('/'))
        }
        _ => endpoint,
    }
}

struct Shared {
    tracer: Option<SdkTracer>,
    metrics: Metrics,
}

/// The telemetry pipeline: tracer and meter providers and the metrics. Build the
/// [`TelemetryLayer`] from it; keep it to flush and shut down.
pub struct Telemetry {
    shared: Arc<Shared>,
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("tracing", &self.tracer_provider.is_some())
            .field("metrics", &self.shared.metrics)
            .finish()
    }
}

/// Why the telemetry pipeline could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The HTTPS client for the collector could not be built.
    #[error("telemetry: {0}")]
    Client(#[from] crate::tls::TlsError),
    /// The OTLP span exporter could not be built.
    #[error("telemetry: the OTLP trace exporter cannot be built: {0}")]
    TraceExporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// The OTLP metric exporter could not be built.
    #[error("telemetry: the OTLP metric exporter cannot be built: {0}")]
    MetricExporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

impl Telemetry {
    /// Build the pipeline for `settings`.
    pub fn new(settings: &TelemetrySettings) -> Result<Self, TelemetryError> {
        let mut attributes = vec![KeyValue::new(
            "service.version",
            settings.service_version.clone(),
        )];
        attributes.extend(
            settings
                .custom_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attributes(attributes)
            .build();
        let headers: HashMap<String, String> = settings
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let endpoint = settings.endpoint.as_deref();
        // One client for both signals, built only when something is exported.
        let http = match endpoint {
            Some(_) if settings.tracing || settings.metrics => Some(
                crate::tls::blocking_http_client(OTLP_TIMEOUT, settings.ca_bundle.as_ref())?,
            ),
            _ => None,
        };
        let tracer_provider = match (endpoint, &http) {
            (Some(endpoint), Some(http)) if settings.tracing => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(signal_url(endpoint, "traces"))
                    .with_http_client(http.clone())
                    .with_headers(headers.clone())
                    .build()
                    .map_err(TelemetryError::TraceExporter)?;
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                            settings.sampling_rate,
                        ))))
                        .with_resource(resource.clone())
                        .build(),
                )
            }
            _ => None,
        };
        let meter_provider = match (endpoint, &http) {
            (Some(endpoint), Some(http)) if settings.metrics => {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(signal_url(endpoint, "metrics"))
                    .with_http_client(http.clone())
                    .with_headers(headers)
                    .build()
                    .map_err(TelemetryError::MetricExporter)?;
                let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
                    .with_interval(settings.metrics_interval)
                    .build();
                Some(
                    SdkMeterProvider::builder()
                        .with_reader(reader)
                        .with_resource(resource)
                        .build(),
                )
            }
            _ => None,
        };
        let meter = meter_provider
            .as_ref()
            .map(|p| opentelemetry::metrics::MeterProvider::meter(p, "vmcp"));
        let shared = Arc::new(Shared {
            tracer: tracer_provider.as_ref().map(|p| p.tracer("vmcp")),
            metrics: Metrics::new(meter.as_ref(), settings.prometheus),
        });
        Ok(Self {
            shared,
            tracer_provider,
            meter_provider,
        })
    }

    /// The layer recording into this pipeline.
    pub fn layer(&self) -> TelemetryLayer {
        TelemetryLayer {
            shared: self.shared.clone(),
        }
    }

    /// The Prometheus text exposition (when Prometheus is enabled).
    pub fn prometheus_text(&self) -> Option<String> {
        self.shared.metrics.prometheus_text()
    }

    /// Count one backend definition seen changed from its pin (tool integrity; the
    /// gateway calls this on catalog changes, never per request).
    pub fn integrity_change(&self, backend: &str, entry: &'static str) {
        self.shared.metrics.integrity_change(backend, entry);
    }

    /// Export everything buffered now. Blocks: call it from a blocking context.
    pub fn force_flush(&self) {
        if let Some(p) = &self.tracer_provider
            && let Err(e) = p.force_flush()
        {
            tracing::warn!("trace flush failed: {e}");
        }
        if let Some(p) = &self.meter_provider
            && let Err(e) = p.force_flush()
        {
            tracing::warn!("metrics flush failed: {e}");
        }
    }

    /// Flush and stop the exporters. Blocks: call it from a blocking context.
    pub fn shutdown(&self) {
        if let Some(p) = &self.tracer_provider {
            let _ = p.shutdown();
        }
        if let Some(p) = &self.meter_provider {
            let _ = p.shutdown();
        }
    }
}

/// Produces [`TelemetryService`]s.
#[derive(Clone)]
pub struct TelemetryLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TelemetryLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for TelemetryLayer {
    type Service = TelemetryService<S>;

    fn layer(&self, inner: S) -> TelemetryService<S> {
        TelemetryService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Records spans and metrics; see the [module docs](self).
#[derive(Clone)]
pub struct TelemetryService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for TelemetryService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryService").finish_non_exhaustive()
    }
}

struct Carrier<'a> {
    headers: &'a HeaderMap,
    meta_traceparent: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.headers
            .get(key)
            .and_then(|v| v.to_str().ok())
            .or(if key == "traceparent" {
                self.meta_traceparent
            } else {
                None
            })
    }

    fn keys(&self) -> Vec<&str> {
        self.headers.keys().map(|k| k.as_str()).collect()
    }
}

/// `http <METHOD>` for the standard methods; an extension method (any token a
/// client sends) is `http other`.
fn http_method(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "http GET",
        http::Method::POST => "http POST",
        http::Method::DELETE => "http DELETE",
        http::Method::HEAD => "http HEAD",
        http::Method::OPTIONS => "http OPTIONS",
        http::Method::PUT => "http PUT",
        http::Method::PATCH => "http PATCH",
        _ => "http other",
    }
}

/// The W3C `traceparent` of a span context.
fn traceparent(cx: &opentelemetry::trace::SpanContext) -> Option<String> {
    cx.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            cx.trace_id(),
            cx.span_id(),
            cx.trace_flags().to_u8()
        )
    })
}

struct RequestObserver {
    shared: Arc<Shared>,
    parent: Context,
}

struct BackendScope {
    shared: Arc<Shared>,
    span: Option<opentelemetry_sdk::trace::Span>,
    backend: String,
    method: String,
    started: Instant,
}

impl BackendObserver for RequestObserver {
    fn start(&self, backend: &str, method: &str, name: Option<&str>) -> Box<dyn BackendCallScope> {
        let span = self.shared.tracer.as_ref().map(|tracer| {
            let mut attributes = vec![
                KeyValue::new("mcp.method.name", method.to_owned()),
                KeyValue::new("vmcp.backend", backend.to_owned()),
            ];
            if let Some(name) = name {
                attributes.push(KeyValue::new("vmcp.backend.target", name.to_owned()));
            }
            tracer
                .span_builder(format!("{method} {backend}"))
                .with_kind(SpanKind::Client)
                .with_attributes(attributes)
                .start_with_context(tracer, &self.parent)
        });
        Box::new(BackendScope {
            shared: self.shared.clone(),
            span,
            backend: backend.to_owned(),
            method: method.to_owned(),
            started: Instant::now(),
        })
    }

    fn step(&self, composite: &str, step: &str) -> Box<dyn StepScope> {
        let span = self.shared.tracer.as_ref().map(|tracer| {
            tracer
                .span_builder(format!("composite step {composite}.{step}"))
                .with_kind(SpanKind::Internal)
                .with_attributes([
                    KeyValue::new("vmcp.composite", composite.to_owned()),
                    KeyValue::new("vmcp.step", step.to_owned()),
                ])
                .start_with_context(tracer, &self.parent)
        });
        Box::new(StepSpan {
            shared: self.shared.clone(),
            span,
            parent: self.parent.clone(),
        })
    }

    fn workflow(&self, composite: &str, elapsed: std::time::Duration, error: bool) {
        self.shared.metrics.workflow(composite, elapsed, error);
    }

    fn rate_limit(&self, tool: &str, bucket: &str, decision: &str) {
        self.shared.metrics.rate_limit(tool, bucket, decision);
    }

    fn optimizer_fallback(&self) {
        self.shared.metrics.optimizer_fallback();
    }
}

struct StepSpan {
    shared: Arc<Shared>,
    span: Option<opentelemetry_sdk::trace::Span>,
    parent: Context,
}

impl StepScope for StepSpan {
    fn calls(&self) -> BackendCalls {
        let parent = match &self.span {
            Some(span) => Context::new().with_remote_span_context(span.span_context().clone()),
            None => self.parent.clone(),
        };
        BackendCalls(Arc::new(RequestObserver {
            shared: self.shared.clone(),
            parent,
        }))
    }

    fn end(mut self: Box<Self>, outcome: &str) {
        if let Some(span) = self.span.as_mut() {
            span.set_attribute(KeyValue::new("vmcp.step.outcome", outcome.to_owned()));
            if outcome != "success" && outcome != "skipped" {
                span.set_status(Status::error(outcome.to_owned()));
            }
            span.end();
        }
    }
}

impl BackendCallScope for BackendScope {
    fn traceparent(&self) -> Option<String> {
        self.span
            .as_ref()
            .and_then(|s| traceparent(s.span_context()))
    }

    fn end(mut self: Box<Self>, error: Option<&str>) {
        self.shared.metrics.backend(
            &self.backend,
            &self.method,
            self.started.elapsed(),
            error.is_some(),
        );
        if let Some(span) = self.span.as_mut() {
            if let Some(error) = error {
                span.set_status(Status::error(error.to_owned()));
            }
            span.end();
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for TelemetryService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let started = Instant::now();
        let parsed = req.extensions().get::<Arc<ParsedMcpRequest>>().cloned();
        // The span names the client's method as sent; the metrics bound it
        // (`metrics::method_label`).
        let method: Cow<'static, str> = match &parsed {
            Some(p) => Cow::Owned(p.method.clone()),
            None => Cow::Borrowed(http_method(req.method())),
        };
        let mut span = None;
        let mut parent = Context::new();
        if let Some(tracer) = &self.shared.tracer {
            let meta_traceparent = parsed
                .as_ref()
                .and_then(|p| p.meta.as_ref())
                .and_then(|m| m.get("traceparent"))
                .and_then(|v| v.as_str());
            let remote = TraceContextPropagator::new().extract(&Carrier {
                headers: req.headers(),
                meta_traceparent,
            });
            let target = parsed.as_ref().and_then(|p| p.target());
            let name = match target {
                Some(t) => format!("{method} {t}"),
                None => method.to_string(),
            };
            let mut attributes = vec![KeyValue::new("mcp.method.name", method.to_string())];
            if let Some(p) = &parsed {
                let key = match CallKind::of_method(&p.method) {
                    Some(CallKind::Tool) => Some("gen_ai.tool.name"),
                    Some(CallKind::Prompt) => Some("gen_ai.prompt.name"),
                    Some(CallKind::Resource) => Some("mcp.resource.uri"),
                    None => None,
                };
                if let (Some(key), Some(target)) = (key, p.target()) {
                    attributes.push(KeyValue::new(key, target.to_owned()));
                }
                if let Some(revision) = p.revision {
                    attributes.push(KeyValue::new("mcp.protocol.version", revision.as_str()));
                }
            }
            if let Some(BackendTarget(backend)) = req.extensions().get::<BackendTarget>() {
                attributes.push(KeyValue::new("vmcp.backend", backend.to_string()));
            }
            let s = tracer
                .span_builder(name)
                .with_kind(SpanKind::Server)
                .with_attributes(attributes)
                .start_with_context(tracer, &remote);
            parent = Context::new().with_remote_span_context(s.span_context().clone());
            span = Some(s);
        }
        req.extensions_mut()
            .insert(BackendCalls(Arc::new(RequestObserver {
                shared: self.shared.clone(),
                parent,
            })));
        let shared = self.shared.clone();
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            let status = response.status();
            Ok(response.map(move |body| {
                Body::new(ObservedBody::new(body, 0, move |summary| {
                    let error = status.is_client_error()
                        || status.is_server_error()
                        || (summary.aborted && summary.bytes == 0);
                    shared.metrics.request(&method, started.elapsed(), error);
                    if let Some(mut span) = span {
                        span.set_attribute(KeyValue::new(
                            "http.response.status_code",
                            i64::from(status.as_u16()),
                        ));
                        if error {
                            span.set_status(Status::error(format!("HTTP {}", status.as_u16())));
                        }
                        span.end();
                    }
                }))
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_urls() {
        assert_eq!(
            signal_url("http://127.0.0.1:4318", "traces"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            signal_url("otel:4318/", "metrics"),
            "http://otel:4318/v1/metrics"
        );
        assert_eq!(
            signal_url("http://c/custom/path", "traces"),
            "http://c/custom/path"
        );
    }
}
