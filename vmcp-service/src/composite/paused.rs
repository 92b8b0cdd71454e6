//! A run paused for a 2026-07-28 caller's answers. The gateway keeps nothing between
//! rounds: everything needed to resume (the arguments, the finished steps' results,
//! the questions outstanding, the workflow's identity and deadline) goes into the
//! `requestState` of the `input_required` result, sealed (`crate::seal`), and comes
//! back with the retry. Steps that finished are not run again.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::done::Done;
use crate::config::composite::CompositeToolConfig;

/// The seal purpose of a paused run's state.
pub(crate) const PURPOSE: &str = "workflow";

/// What resumes a paused run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PausedRun {
    /// The composite, and a digest of its definition: a reload that changed it
    /// between rounds makes the state stale rather than resuming a different graph.
    pub(crate) composite: String,
    pub(crate) definition: String,
    pub(crate) workflow_id: String,
    pub(crate) start_time: String,
    /// Unix ms when the run started, and when its workflow `timeout` ends.
    pub(crate) started_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) params: Map<String, Value>,
    pub(crate) done: BTreeMap<String, Done>,
    /// A declined elicitation chose `skip_remaining`.
    pub(crate) skip_rest: bool,
    /// The elicitation steps waiting for an answer, each with when it was asked.
    pub(crate) waiting: BTreeMap<String, u64>,
}

/// One question for the caller: an `elicitation/create` under the step's id.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    pub(crate) step: String,
    pub(crate) message: String,
    pub(crate) schema: Map<String, Value>,
}

/// A run that cannot go on without the caller's answers.
#[derive(Debug)]
pub(crate) struct Paused {
    pub(crate) state: PausedRun,
    pub(crate) questions: Vec<Question>,
    /// How long the state stays valid: the shortest waiting step's `timeout`, never
    /// past the workflow's deadline.
    pub(crate) ttl: Duration,
}

/// A digest of `config` (SHA-256 of its JSON form, hex).
pub(crate) fn definition_digest(config: &CompositeToolConfig) -> String {
    let json = serde_json::to_vec(config).unwrap_or_default();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &json);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
