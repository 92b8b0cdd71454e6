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
    /// Where pins are kept: `file` (default) or `redis` (the `sessionStorage` Redis,
    /// shared by replicas; needs `sessionStorage.provider: redis`).
    #[serde(default)]
    pub store: PinStoreKind,
    /// The pin file (`store: file`); required with `store: file` unless `mode: off`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A definition with no pin: `allow` (default; pinned on first sight) or
    /// `block` (hidden until approved with `vmcp pins approve`).
    #[serde(default)]
    pub new_tools: NewToolsPolicy,
    /// The admin endpoint (`/admin/pins…` on the status listener): off when absent.
    /// It has its own bearer token, apart from `incomingAuth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<IntegrityAdminConfig>,
}

/// `integrity.admin`: where the admin endpoint's bearer token comes from (exactly
/// one of the two).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntegrityAdminConfig {
    /// A file holding the token (surrounding whitespace ignored); read at start and
    /// on reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
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
    /// The `sessionStorage` Redis, shared by replicas.
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
    pub fn validate(
        &self,
        session_storage: &super::SessionStorageConfig,
        errors: &mut Vec<String>,
    ) {
        if let Some(admin) = &self.admin {
            match (&admin.token_file, &admin.token_env) {
                (Some(_), Some(_)) | (None, None) => errors
                    .push("integrity.admin needs exactly one of tokenFile and tokenEnv".into()),
                (Some(path), None) if !path.is_absolute() => errors.push(format!(
                    "integrity.admin.tokenFile {:?} must be an absolute path",
                    path.display().to_string()
                )),
                (None, Some(name)) if name.is_empty() => {
                    errors.push("integrity.admin.tokenEnv must name a variable".into())
                }
                _ => {}
            }
        }
        if self.store == PinStoreKind::Redis {
            if self.enabled() && session_storage.provider != super::StorageProvider::Redis {
                errors.push(
                    "integrity.store: redis needs sessionStorage.provider: redis (its connection)"
                        .into(),
                );
            }
            if self.path.is_some() {
                errors.push(
                    "integrity.path is for `store: file`; remove it with `store: redis`".into(),
                );
            }
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
    fn redis_needs_the_session_storage_address() {
        let e = errors("integrity: {mode: block, store: redis}");
        assert!(e.contains("needs sessionStorage.provider: redis"), "{e}");
        let ok = errors(
            "sessionStorage: {provider: redis, address: 'localhost:6379'}\nintegrity: {mode: block, store: redis}",
        );
        assert!(ok.is_empty(), "{ok}");
        let e = errors(
            "sessionStorage: {provider: redis, address: 'localhost:6379'}\nintegrity: {mode: block, store: redis, path: /tmp/p.json}",
        );
        assert!(e.contains("integrity.path is for `store: file`"), "{e}");
    }

    #[test]
    fn admin_needs_exactly_one_token_source() {
        let base = "integrity: {mode: warn, path: /tmp/p.json, admin: ";
        assert!(errors(&format!("{base}{{}}}}")).contains("exactly one of tokenFile"));
        assert!(
            errors(&format!("{base}{{tokenFile: /t, tokenEnv: T}}}}"))
                .contains("exactly one of tokenFile")
        );
        assert!(errors(&format!("{base}{{tokenFile: t}}}}")).contains("absolute path"));
        assert!(errors(&format!("{base}{{tokenEnv: VMCP_ADMIN}}}}")).is_empty());
    }

    #[test]
    fn unknown_values_name_the_field() {
        let e = errors("integrity: {mode: strict, path: /tmp/p.json}");
        assert!(e.contains("integrity.mode"), "{e}");
        let e = errors("integrity: {mode: warn, path: /tmp/p.json, newTools: deny}");
        assert!(e.contains("integrity.newTools"), "{e}");
    }
}
