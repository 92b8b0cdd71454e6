//! A finished step as templates and a paused run's state see it.

use rmcp::model::CallToolResult;
use serde_json::Value;

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Completed,
    Failed,
    Skipped,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// A finished step (also carried in a paused run's state).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Done {
    pub(crate) status: Status,
    pub(crate) output: Value,
    pub(crate) content: Value,
    pub(crate) error: Option<String>,
    /// The tool's own result, for a composite without `output` whose last step it is.
    pub(crate) raw: Option<CallToolResult>,
}
