//! `integrity:` — tool integrity: pin what backends advertise, and warn about or
//! block a definition that changes after it was pinned (docs/integrity.md).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `integrity:` — pins of backend definitions (tools, prompts, resource templates).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntegrityConfig {
    /// `off` (default), `warn` (a changed definition stays, with an audit line, a
    /// metric and a WARN) or `block` (a changed definition is hidden until approved).
    #[serde(default)]
    pub mode: IntegrityMode,
    /// Where pins are kept: `file` (default; `redis` is not available yet).
    #[serde(default)]
    pub store: PinStoreKind,
    /// The pin file (`store: file`); required unless `mode: off`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A definition with no pin: `allow` (default; pinned on first sight) or
    /// `block` (hidden until approved with `vmcp pins approve`).
    #[serde(default)]
    pub new_tools: NewToolsPolicy,
}

/// `integrity.mode`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum IntegrityMode {
    /// No pins, no checks.
    #[default]
    Off,
    /// A changed definition stays advertised; it is reported.
    Warn,
    /// A changed definition is hidden (and calls to it refused as unknown) until approved.
    Block,
}

/// `integrity.store`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PinStoreKind {
    /// A JSON file (`integrity.path`), shared by the gateway and `vmcp pins`.
    #[default]
    File,
    /// Redis, shared by replicas (not available yet: refused by validation).
    Redis,
}

/// `integrity.newTools`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum NewToolsPolicy {
    /// Pin a definition on first sight and advertise it (trust on first use).
    #[default]
    Allow,
    /// Hide a definition without a pin until it is approved.
    Block,
}

impl IntegrityConfig {
    /// Whether pins are checked at all.
    pub fn enabled(&self) -> bool {
        self.mode != IntegrityMode::Off
    }

    /// Check the section; messages name the field (`integrity.path …`).
    pub fn validate(&self, errors: &mut Vec<String>) {
        if self.store == PinStoreKind::Redis {
            errors.push(
                "integrity.store: redis is not available yet; use `store: file` with `integrity.path`"
                    .into(),
            );
            return;
        }
        match &self.path {
            None if self.enabled() => errors.push(
                "integrity.path is required with `store: file` (the pin file, e.g. /var/lib/vmcp/pins.json)"
                    .into(),
            ),
            Some(path) if path.as_os_str().is_empty() => {
                errors.push("integrity.path must not be empty".into())
            }
            Some(path)
                if path.file_name().is_none() || path.to_string_lossy().ends_with('/') =>
            {
                errors.push(format!(
                "integrity.path {:?} must name a file, not a directory",
                    path.display().to_string()
                ))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    fn errors(yaml: &str) -> String {
        load_str(yaml)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_path_is_required_unless_off() {
        assert!(errors("integrity: {mode: block}").contains("integrity.path is required"));
        assert!(errors("integrity: {mode: off}").is_empty());
        assert!(errors("integrity: {mode: warn, path: /tmp/pins.json}").is_empty());
        assert!(errors("integrity: {mode: warn, path: /tmp/}").contains("must name a file"));
    }

    #[test]
    fn redis_is_refused_with_a_clear_message() {
        let e = errors("integrity: {mode: block, store: redis}");
        assert!(
            e.contains("integrity.store: redis is not available yet"),
            "{e}"
        );
    }

    #[test]
    fn unknown_values_name_the_field() {
        let e = errors("integrity: {mode: strict, path: /tmp/p.json}");
        assert!(e.contains("integrity.mode"), "{e}");
        let e = errors("integrity: {mode: warn, path: /tmp/p.json, newTools: deny}");
        assert!(e.contains("integrity.newTools"), "{e}");
    }
}
