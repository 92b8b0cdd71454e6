//! Reporting integrity events: one log line when found, then an audit line and a
//! metric once the layer stack (which owns the audit log and the metrics) is attached.
//! The startup check runs before the stack exists, so its events wait in a bounded
//! backlog until then.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use vmcp_layers::audit::AuditLayer;
use vmcp_layers::telemetry::Telemetry;

use super::{Finding, FindingState, PinKey};

/// Events kept until the stack is attached; later ones are only logged.
const MAX_BACKLOG: usize = 256;
/// Names from a backend are cut to this many characters in log lines.
const MAX_LOGGED_NAME: usize = 128;

/// A change or an approval, ready to record.
#[derive(Debug, Clone)]
pub(super) struct Event {
    kind: &'static str,
    outcome: &'static str,
    entry: &'static str,
    name: String,
    backend: String,
    data: Map<String, Value>,
}

impl Event {
    pub(super) fn change(finding: &Finding) -> Self {
        let fields: Vec<&String> = finding.diff.keys().collect();
        let name = logged(&finding.name);
        let state = match finding.state {
            FindingState::Changed => "changed",
            FindingState::New => "new",
            FindingState::Unverified => "unverified",
            FindingState::Unpinned => "unpinned",
        };
        let action = if finding.blocked {
            "hidden until approved (vmcp pins approve)"
        } else {
            "still advertised (mode: warn)"
        };
        tracing::warn!(
            backend = %finding.backend,
            kind = finding.kind,
            name = %name,
            state,
            fields = ?fields,
            pinned = finding.pinned_sha256.as_deref().unwrap_or("-"),
            seen = %finding.seen_sha256,
            "tool integrity: {} {name:?} of backend {:?} is {state} from its pin; {action}",
            finding.kind,
            finding.backend,
        );
        let mut data = Map::new();
        data.insert("state".into(), json!(state));
        data.insert("fields".into(), json!(fields));
        data.insert("seen_sha256".into(), json!(finding.seen_sha256));
        if let Some(pinned) = &finding.pinned_sha256 {
            data.insert("pinned_sha256".into(), json!(pinned));
        }
        Self {
            kind: "integrity_change",
            outcome: if finding.blocked { "blocked" } else { "warned" },
            entry: finding.kind,
            name: finding.name.clone(),
            backend: finding.backend.clone(),
            data,
        }
    }

    pub(super) fn approval(
        backend: &str,
        key: &PinKey,
        sha256: &str,
        approved_by: Option<&str>,
    ) -> Self {
        let by = approved_by.map(logged);
        tracing::info!(
            backend,
            kind = key.kind.as_str(),
            name = %logged(&key.name),
            sha256,
            approved_by = by.as_deref().unwrap_or("-"),
            "tool integrity: approved definition applied"
        );
        let mut data = Map::new();
        data.insert("sha256".into(), json!(sha256));
        if let Some(by) = by {
            data.insert("approved_by".into(), json!(by));
        }
        Self {
            kind: "integrity_approval",
            outcome: "success",
            entry: key.kind.as_str(),
            name: key.name.clone(),
            backend: backend.to_owned(),
            data,
        }
    }
}

fn logged(name: &str) -> String {
    match name.char_indices().nth(MAX_LOGGED_NAME) {
        Some((end, _)) => format!("{}… ({} bytes)", &name[..end], name.len()),
        None => name.to_owned(),
    }
}

#[derive(Default)]
struct Attached {
    attached: bool,
    audit: Option<AuditLayer>,
    telemetry: Option<Arc<Telemetry>>,
    backlog: Vec<Event>,
}

/// Where events are recorded.
#[derive(Default)]
pub(super) struct Sinks(Mutex<Attached>);

impl Sinks {
    pub(super) fn attach(&self, audit: Option<AuditLayer>, telemetry: Option<Arc<Telemetry>>) {
        let mut sinks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sinks.audit = audit;
        sinks.telemetry = telemetry;
        sinks.attached = true;
        let backlog = std::mem::take(&mut sinks.backlog);
        for event in &backlog {
            sinks.record(event);
        }
    }

    pub(super) fn emit(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let mut sinks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for event in events {
            if sinks.attached {
                sinks.record(&event);
            } else if sinks.backlog.len() < MAX_BACKLOG {
                sinks.backlog.push(event);
            }
        }
    }
}

impl Attached {
    fn record(&self, event: &Event) {
        if let Some(audit) = &self.audit {
            audit.record_entry_event(
                event.kind,
                event.outcome,
                event.entry,
                &event.name,
                &event.backend,
                Some(&event.data),
            );
        }
        if event.kind == "integrity_change"
            && let Some(telemetry) = &self.telemetry
        {
            telemetry.integrity_change(&event.backend, event.entry);
        }
    }
}
