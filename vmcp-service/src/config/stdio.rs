//! The `stdio` backend keys (`command`, `args`, `env`, `cwd`) and their checks.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{BackendConfig, Transport};

/// One value of a stdio backend's `env`: a literal, or `{fromEnv: VAR}` read from the
/// gateway's own environment when the process is spawned (keeps secrets out of the
/// file). Values are never logged; `Debug` shows only where a value comes from.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum EnvValue {
    /// `NAME: value`.
    Literal(String),
    /// `NAME: {fromEnv: VAR}`.
    FromEnv {
        /// The gateway's environment variable to copy.
        #[serde(rename = "fromEnv")]
        from_env: String,
    },
}

impl std::fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvValue::Literal(_) => f.write_str("Literal(<redacted>)"),
            EnvValue::FromEnv { from_env } => write!(f, "FromEnv({from_env})"),
        }
    }
}

impl EnvValue {
    /// The value to give the child, or the name of the missing gateway variable.
    pub fn resolve(&self) -> Result<String, &str> {
        match self {
            EnvValue::Literal(value) => Ok(value.clone()),
            EnvValue::FromEnv { from_env } => {
                std::env::var(from_env).map_err(|_| from_env.as_str())
            }
        }
    }
}

/// Where `command` resolves: a path containing `/` is taken as is (relative to `cwd`
/// when given), a bare name is looked up on the gateway's `PATH`. `None` when it is
/// not an executable file.
pub fn find_executable(command: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    if command.contains('/') {
        let path = match cwd {
            Some(dir) if Path::new(command).is_relative() => dir.join(command),
            _ => PathBuf::from(command),
        };
        return is_executable(&path).then_some(path);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(command))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    meta.is_file()
}

/// Environment variable names a child may be given: no `=` or NUL, not empty.
fn is_valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// The transport-dependent checks of `backends[i]` (`field`): a stdio backend needs a
/// command that exists and no URL; the other transports take none of the stdio keys.
pub(super) fn check(field: &str, backend: &BackendConfig, errors: &mut Vec<String>) {
    if backend.transport() != Transport::Stdio {
        for (key, set) in [
            ("command", backend.command.is_some()),
            ("args", !backend.args.is_empty()),
            ("env", !backend.env.is_empty()),
            ("cwd", backend.cwd.is_some()),
        ] {
            if set {
                errors.push(format!("{field}.{key} is only used with transport: stdio"));
            }
        }
        return;
    }
    if !backend.url.is_empty() {
        errors.push(format!("{field}.url is not used with transport: stdio"));
    }
    if let Some(cwd) = &backend.cwd
        && !cwd.is_dir()
    {
        errors.push(format!("{field}.cwd {} is not a directory", cwd.display()));
    }
    match backend.command.as_deref() {
        None | Some("") => {
            errors.push(format!("{field}.command is required with transport: stdio"))
        }
        Some(command) => {
            if find_executable(command, backend.cwd.as_deref()).is_none() {
                errors.push(if command.contains('/') {
                    format!("{field}.command {command:?} is not an executable file")
                } else {
                    format!("{field}.command {command:?} was not found on PATH")
                });
            }
        }
    }
    for (i, arg) in backend.args.iter().enumerate() {
        if arg.contains('\0') {
            errors.push(format!("{field}.args[{i}] contains a NUL byte"));
        }
    }
    for (name, value) in &backend.env {
        if !is_valid_env_name(name) {
            errors.push(format!("{field}.env {name:?} is not a valid variable name"));
            continue;
        }
        // Only the variable's name is reported, never a value.
        match value {
            EnvValue::FromEnv { from_env } if std::env::var_os(from_env).is_none() => {
                errors.push(format!(
                    "{field}.env.{name}.fromEnv: the gateway's environment has no {from_env}"
                ));
            }
            EnvValue::Literal(v) if v.contains('\0') => {
                errors.push(format!("{field}.env.{name} contains a NUL byte"));
            }
            _ => {}
        }
    }
}
