//! `telemetry:` — OpenTelemetry and Prometheus: the YAML model, its validation with
//! field paths, and the pipeline's typed settings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use vmcp_layers::telemetry::{TelemetrySettings, normalize_endpoint};
use vmcp_layers::tls::{CaBundle, TlsError};

/// A sampling rate written as a number or a string (`"0.1"`, as the reference does).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum SamplingRate {
    /// `0.1`
    Number(f64),
    /// `"0.1"`
    Text(String),
}

impl SamplingRate {
    /// The rate, if it is a number in `[0, 1]`.
    pub fn value(&self) -> Option<f64> {
        let v = match self {
            SamplingRate::Number(n) => *n,
            SamplingRate::Text(t) => t.trim().parse().ok()?,
        };
        (0.0..=1.0).contains(&v).then_some(v)
    }
}

/// `telemetry:` — OpenTelemetry and Prometheus.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector, e.g. `http://127.0.0.1:4318` (`/v1/traces` and
    /// `/v1/metrics` are appended when the URL has no path). Without a scheme,
    /// `http://` is assumed.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `service.name` (default `vmcp`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// `service.version` (default the crate version).
    #[serde(default)]
    pub service_version: Option<String>,
    /// Export traces.
    #[serde(default)]
    pub tracing_enabled: bool,
    /// Export metrics over OTLP.
    #[serde(default)]
    pub metrics_enabled: bool,
    /// Fraction of traces sampled (default 1.0); a caller's sampled parent is honoured.
    #[serde(default)]
    pub sampling_rate: Option<SamplingRate>,
    /// Extra HTTP headers for the collector (e.g. an API key).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Serve Prometheus text at `/metrics`.
    #[serde(default)]
    pub enable_prometheus_metrics_path: bool,
    /// Extra resource attributes.
    #[serde(default)]
    pub custom_attributes: BTreeMap<String, String>,
    /// How often metrics are pushed (default 60s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub metrics_interval: Option<Duration>,
    /// Extra CA certificates (PEM, absolute path) trusted for an `https://` collector,
    /// besides the platform and webpki roots (the reference's key name).
    #[serde(default)]
    pub ca_cert_path: Option<std::path::PathBuf>,
}

impl TelemetryConfig {
    /// Check the section; messages name the field (`telemetry.samplingRate …`).
    pub fn validate(&self, errors: &mut Vec<String>) {
        if let Some(rate) = &self.sampling_rate
            && rate.value().is_none()
        {
            errors.push("telemetry.samplingRate must be a number between 0 and 1".into());
        }
        if (self.tracing_enabled || self.metrics_enabled) && self.endpoint.is_none() {
            errors.push(
                "telemetry.endpoint is required when tracingEnabled or metricsEnabled is true"
                    .into(),
            );
        }
        if let Some(endpoint) = &self.endpoint
            && reqwest::Url::parse(&normalize_endpoint(endpoint)).is_err()
        {
            errors.push(format!("telemetry.endpoint {endpoint:?} is not a URL"));
        }
        if self.metrics_interval.is_some_and(|d| d.is_zero()) {
            errors.push("telemetry.metricsInterval must be greater than 0".into());
        }
        super::validate::validate_ca_path(
            "telemetry.caCertPath",
            self.ca_cert_path.as_deref(),
            errors,
        );
    }

    /// The pipeline's settings (the defaults where a key is absent). Reads the CA
    /// bundle, but only when something is exported over it.
    pub fn settings(&self) -> Result<TelemetrySettings, TlsError> {
        let defaults = TelemetrySettings::default();
        let exports = self.endpoint.is_some() && (self.tracing_enabled || self.metrics_enabled);
        let ca_bundle = match &self.ca_cert_path {
            Some(path) if exports => Some(CaBundle::load(path)?),
            _ => None,
        };
        Ok(TelemetrySettings {
            endpoint: self.endpoint.clone(),
            service_name: self.service_name.clone().unwrap_or(defaults.service_name),
            service_version: self
                .service_version
                .clone()
                .unwrap_or(defaults.service_version),
            tracing: self.tracing_enabled,
            metrics: self.metrics_enabled,
            sampling_rate: self
                .sampling_rate
                .as_ref()
                .and_then(SamplingRate::value)
                .unwrap_or(defaults.sampling_rate),
            headers: self.headers.clone(),
            prometheus: self.enable_prometheus_metrics_path,
            custom_attributes: self.custom_attributes.clone(),
            metrics_interval: self.metrics_interval.unwrap_or(defaults.metrics_interval),
            ca_bundle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_rates() {
        assert_eq!(SamplingRate::Text("0.1".into()).value(), Some(0.1));
        assert_eq!(SamplingRate::Number(2.0).value(), None);
        let mut errors = Vec::new();
        TelemetryConfig {
            tracing_enabled: true,
            sampling_rate: Some(SamplingRate::Text("x".into())),
            ..TelemetryConfig::default()
        }
        .validate(&mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
