//! `audit:` — the audit log: the YAML model, its validation with field paths, and
//! the layer's typed settings.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use vmcp_layers::audit::{AuditSettings, EVENT_TYPES};

/// `audit:` — the audit log.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditConfig {
    /// Write audit lines (default true when the section is present).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The `component` field (default `vmcp`).
    #[serde(default)]
    pub component: Option<String>,
    /// Only these event types (default: all).
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Never these event types.
    #[serde(default)]
    pub exclude_event_types: Vec<String>,
    /// Include the request's params (redacted, capped).
    #[serde(default)]
    pub include_request_data: bool,
    /// Include the response body (capped).
    #[serde(default)]
    pub include_response_data: bool,
    /// Cap on each included payload, in bytes (default 10000).
    #[serde(default)]
    pub max_data_size: Option<usize>,
    /// Append lines to this file instead of standard output.
    #[serde(default)]
    pub log_file: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            component: None,
            event_types: Vec::new(),
            exclude_event_types: Vec::new(),
            include_request_data: false,
            include_response_data: false,
            max_data_size: None,
            log_file: None,
        }
    }
}

impl AuditConfig {
    /// Check the section; messages name the field (`audit.eventTypes[1] …`).
    pub fn validate(&self, errors: &mut Vec<String>) {
        for (field, list) in [
            ("eventTypes", &self.event_types),
            ("excludeEventTypes", &self.exclude_event_types),
        ] {
            for (i, t) in list.iter().enumerate() {
                if !EVENT_TYPES.contains(&t.as_str()) {
                    errors.push(format!(
                        "audit.{field}[{i}] {t:?} is not an event type (expected one of {})",
                        EVENT_TYPES.join(", ")
                    ));
                }
            }
        }
        if self.max_data_size == Some(0) {
            errors.push("audit.maxDataSize must be greater than 0".into());
        }
    }

    /// The audit layer's settings (the defaults where a key is absent).
    pub fn settings(&self) -> AuditSettings {
        let defaults = AuditSettings::default();
        AuditSettings {
            component: self.component.clone().unwrap_or(defaults.component),
            event_types: self.event_types.clone(),
            exclude_event_types: self.exclude_event_types.clone(),
            include_request_data: self.include_request_data,
            include_response_data: self.include_response_data,
            max_data_size: self.max_data_size.unwrap_or(defaults.max_data_size),
        }
    }
}
