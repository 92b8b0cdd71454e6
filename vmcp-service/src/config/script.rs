//! `codeMode:` — the `execute_tool_script` tool: a Starlark script that calls the
//! caller's tools as functions (docs/code-mode.md). Every limit has a default, so
//! `codeMode: {enabled: true}` is a complete configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The tool code mode advertises (no composite may take its name).
pub const EXECUTE_TOOL_SCRIPT: &str = "execute_tool_script";
/// Default Starlark statements one script may execute.
pub const DEFAULT_STEP_LIMIT: u64 = 100_000;
/// Default tool calls one `parallel([...])` runs at once.
pub const DEFAULT_PARALLEL_MAX_CONCURRENCY: usize = 10;
/// Default bound on one tool call a script makes.
pub const DEFAULT_TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default wall-clock cap of one script (the reference's fixed minute).
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default bound on the script's Starlark heap.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 64 * 1024 * 1024;
/// Default bound on the script's result and printed text.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// The largest `parallelMaxConcurrency` (each one is a concurrent backend call).
pub const MAX_PARALLEL_MAX_CONCURRENCY: usize = 100;

/// `codeMode:` — advertise `execute_tool_script` (both revisions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeModeConfig {
    /// Advertise `execute_tool_script`. Default false.
    #[serde(default)]
    pub enabled: bool,
    /// Starlark statements one script may execute (default 100000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_limit: Option<u64>,
    /// Tool calls one `parallel([...])` runs at once (1–100, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_max_concurrency: Option<usize>,
    /// Bound on each tool call a script makes. Default 30s.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub tool_call_timeout: Option<Duration>,
    /// Wall-clock cap of one script, its tool calls included. Default 1m.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub script_timeout: Option<Duration>,
    /// Bound on the script's Starlark heap, in bytes (default 64 MiB; at least 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// Bound on the script's result plus its printed text, in bytes (default 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
}

/// The limits of one script, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptLimits {
    /// Statements the script may execute.
    pub steps: u64,
    /// Calls one `parallel` runs at once.
    pub parallel: usize,
    /// Bound on each tool call.
    pub tool_call_timeout: Duration,
    /// Wall-clock cap of the script.
    pub script_timeout: Duration,
    /// Bound on the Starlark heap.
    pub memory_bytes: u64,
    /// Bound on the result and printed text.
    pub output_bytes: usize,
}

impl CodeModeConfig {
    /// The limits, defaults applied.
    pub fn limits(&self) -> ScriptLimits {
        ScriptLimits {
            steps: self.step_limit.unwrap_or(DEFAULT_STEP_LIMIT),
            parallel: self
                .parallel_max_concurrency
                .unwrap_or(DEFAULT_PARALLEL_MAX_CONCURRENCY),
            tool_call_timeout: self.tool_call_timeout.unwrap_or(DEFAULT_TOOL_CALL_TIMEOUT),
            script_timeout: self.script_timeout.unwrap_or(DEFAULT_SCRIPT_TIMEOUT),
            memory_bytes: self.max_memory_bytes.unwrap_or(DEFAULT_MAX_MEMORY_BYTES),
            output_bytes: self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        const AT: &str = "codeMode";
        if self.step_limit == Some(0) {
            errors.push(format!("{AT}.stepLimit must be greater than 0"));
        }
        if let Some(n) = self.parallel_max_concurrency
            && !(1..=MAX_PARALLEL_MAX_CONCURRENCY).contains(&n)
        {
            errors.push(format!(
                "{AT}.parallelMaxConcurrency must be between 1 and \
                 {MAX_PARALLEL_MAX_CONCURRENCY}, not {n}"
            ));
        }
        for (key, value) in [
            ("toolCallTimeout", self.tool_call_timeout),
            ("scriptTimeout", self.script_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                errors.push(format!("{AT}.{key} must be greater than 0"));
            }
        }
        // Below a megabyte the interpreter's own start-up allocations fail scripts.
        if let Some(bytes) = self.max_memory_bytes
            && bytes < 1024 * 1024
        {
            errors.push(format!(
                "{AT}.maxMemoryBytes must be at least 1048576 (1 MiB), not {bytes}"
            ));
        }
        if self.max_output_bytes == Some(0) {
            errors.push(format!("{AT}.maxOutputBytes must be greater than 0"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<String> {
        let config: CodeModeConfig = serde_yaml_ng::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        config.validate(&mut errors);
        errors
    }

    #[test]
    fn defaults_are_the_reference_values() {
        let limits = CodeModeConfig::default().limits();
        assert_eq!(limits.steps, 100_000);
        assert_eq!(limits.parallel, 10);
        assert_eq!(limits.tool_call_timeout, Duration::from_secs(30));
        assert_eq!(limits.script_timeout, Duration::from_secs(60));
        assert!(errors("enabled: true").is_empty());
    }

    #[test]
    fn bad_limits_are_named_by_path() {
        assert_eq!(
            errors(
                "{enabled: true, stepLimit: 0, parallelMaxConcurrency: 0, toolCallTimeout: 0s, \
                 scriptTimeout: 0s, maxMemoryBytes: 10, maxOutputBytes: 0}"
            ),
            [
                "codeMode.stepLimit must be greater than 0",
                "codeMode.parallelMaxConcurrency must be between 1 and 100, not 0",
                "codeMode.toolCallTimeout must be greater than 0",
                "codeMode.scriptTimeout must be greater than 0",
                "codeMode.maxMemoryBytes must be at least 1048576 (1 MiB), not 10",
                "codeMode.maxOutputBytes must be greater than 0",
            ]
        );
    }
}
