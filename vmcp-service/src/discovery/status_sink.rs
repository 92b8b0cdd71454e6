//! The VirtualMCPServer `status` sink: a [`StatusReporter`] beside the logging one.
//!
//! Reports only replace the latest status; one writer task patches the `status`
//! subresource when what it shows changed (phase, each backend's URL, auth type,
//! health, revision), at most once per `kubernetes.statusInterval`, so a flapping
//! backend does not flood the API server. A failed write is retried at the next change
//! or interval; it never stops serving.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::Vmcp;
use crate::status::{Phase, Status, StatusReporter};

/// Feeds the writer the latest [`Status`]; pass it to
/// [`Vmcp::start_with_reporters`].
#[derive(Debug)]
pub struct StatusSink {
    latest: watch::Sender<Option<Status>>,
}

impl StatusReporter for StatusSink {
    fn report(&self, status: &Status) {
        self.latest.send_replace(Some(status.clone()));
    }
}

impl StatusSink {
    /// A sink, not writing until [`Discovery::start`](super::Discovery::start) gets it.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            latest: watch::channel(None).0,
        })
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Status>> {
        self.latest.subscribe()
    }
}

/// Patch `name`'s status whenever what it shows changes, at most once per `interval`.
pub(crate) async fn write(
    api: Api<DynamicObject>,
    name: String,
    gateway: Arc<Vmcp>,
    mut latest: watch::Receiver<Option<Status>>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut written: Option<Value> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = latest.changed() => if changed.is_err() { return },
        }
        let Some(status) = latest.borrow_and_update().clone() else {
            continue;
        };
        let shown = shown(&status, &gateway);
        if written.as_ref() == Some(&shown) {
            continue;
        }
        let body = json!({"status": document(&shown, &status)});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => written = Some(shown),
            Err(error) => {
                tracing::warn!(virtual_mcp_server = %name, %error, "cannot write the VirtualMCPServer status");
                // Try again with whatever is latest after the interval.
                latest.mark_changed();
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// What the status shows, without timestamps (the write happens when this changes).
fn shown(status: &Status, gateway: &Vmcp) -> Value {
    let backends: Vec<Value> = status
        .backends
        .iter()
        .map(|b| {
            let url = gateway
                .registry()
                .get(&b.name)
                .map(|backend| backend.config().url.clone())
                .unwrap_or_default();
            json!({
                "name": b.name,
                "url": url,
                "authType": b.auth_type,
                "status": b.health,
                "mcpRevision": b.mcp_revision,
            })
        })
        .collect();
    json!({"phase": status.phase, "backends": backends})
}

/// The `status` document: phase, a Ready condition, and each backend.
fn document(shown: &Value, status: &Status) -> Value {
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let ready = matches!(status.phase, Phase::Ready);
    let up = status
        .backends
        .iter()
        .filter(|b| b.health.advertisable())
        .count();
    let message = format!("{up} of {} backends healthy", status.backends.len());
    let backends: Vec<Value> = shown["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(&status.backends)
        .map(|(b, s)| {
            let mut b = b.clone();
            if b["mcpRevision"].is_null() {
                b.as_object_mut().map(|o| o.remove("mcpRevision"));
            }
            let checked = s.last_check.clone().unwrap_or_else(|| now.clone());
            b["lastHealthCheck"] = Value::from(checked);
            b
        })
        .collect();
    json!({
        "phase": status.phase,
        "message": message,
        "backendCount": status.backends.len(),
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": status.phase,
            "message": message,
            "lastTransitionTime": now,
        }],
        "discoveredBackends": backends,
    })
}
