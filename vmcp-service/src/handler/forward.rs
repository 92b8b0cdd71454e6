//! What reaches the caller while its call runs: the backend's progress and logs
//! (through a per-call [`Relay`]), and the caller's cancellation going the other way.
//!
//! A Legacy session chooses its log level once with `logging/setLevel` (kept in
//! [`LogLevels`]); a Modern request names it in its own `_meta`
//! (`io.modelcontextprotocol/logLevel`) and gets no log messages without it. A
//! Legacy session that never set a level gets none either: MCP lets a server choose
//! what it sends before `setLevel`, and not relaying keeps plain calls on the cheap
//! path.
#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still part of both revisions.

use dashmap::DashMap;
use rmcp::RoleServer;
use rmcp::model::LoggingLevel;
use rmcp::service::{Peer, RequestContext};

use crate::backend::relay::Relay;
use crate::backend::relay::{Relayed, Wants, relay};
use crate::sessions::Sessions;

/// Log levels of Legacy sessions, by `Mcp-Session-Id`.
#[derive(Debug, Default)]
pub(crate) struct LogLevels(DashMap<String, LoggingLevel>);

impl LogLevels {
    /// `session` asked for `level`; levels of sessions that ended are dropped.
    pub(super) fn set(&self, sessions: &Sessions, session: String, level: LoggingLevel) {
        self.0.retain(|id, _| sessions.has_legacy(id));
        self.0.insert(session, level);
    }

    /// Whether `session` chose a level (its calls relay logs: the fast path leaves
    /// them to the handler).
    pub(crate) fn is_set(&self, session: &str) -> bool {
        !self.0.is_empty() && self.0.contains_key(session)
    }

    fn get(&self, session: &str) -> Option<LoggingLevel> {
        self.0.get(session).map(|level| *level)
    }
}

/// What the caller of `ctx` asked to hear about its call. `session` finds a Legacy
/// caller's session id; it is only asked when some session set a level.
pub(super) fn wants(
    ctx: &RequestContext<RoleServer>,
    levels: &LogLevels,
    session: impl FnOnce() -> Option<String>,
) -> Wants {
    let logs = if ctx.meta.protocol_version().is_some() {
        ctx.meta.log_level()
    } else if levels.0.is_empty() {
        None
    } else {
        session().and_then(|s| levels.get(&s))
    };
    Wants {
        progress: ctx.meta.get_progress_token(),
        logs,
    }
}

/// The caller cancelled (Legacy `notifications/cancelled`, or a Modern client
/// closed its answer stream) before the backend answered.
#[derive(Debug)]
pub(super) struct Cancelled;

/// What a cancelled call answers (a Legacy client that cancelled ignores it).
const CANCELLED: &str = "the request was cancelled";

impl From<Cancelled> for rmcp::ErrorData {
    fn from(_: Cancelled) -> Self {
        rmcp::ErrorData::internal_error(CANCELLED, None)
    }
}

impl Cancelled {
    /// Whether `error` is the answer of a cancelled call.
    pub(super) fn is(error: &rmcp::ErrorData) -> bool {
        error.code == rmcp::model::ErrorCode::INTERNAL_ERROR && error.message == CANCELLED
    }

    /// The one line a call its caller abandoned leaves in the log (rmcp's own, a
    /// WARN with a debug dump and an ERROR about the closed stream, are filtered by
    /// the bundled server). Routine, so INFO. The request's audit line (when the
    /// stack audits) says `cancelled`, whatever the answer shows.
    pub(super) fn log(ctx: &RequestContext<RoleServer>, method: &str, name: &str, backend: &str) {
        audit_cancelled(ctx);
        tracing::info!(
            %backend,
            "{method} {}: the caller cancelled it before the answer; cancelled on the backend too",
            vmcp_layers::shown::shown(name)
        );
    }
}

/// The caller cancelled `ctx`'s request and the handler stopped it: its audit line
/// (behind an auditing stack) says `cancelled`, whatever the answer shows.
pub(super) fn audit_cancelled(ctx: &RequestContext<RoleServer>) {
    if let Some(note) = ctx
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<vmcp_layers::context::AuditNote>())
    {
        note.cancel();
    }
}

/// Run the backend call `call`, relaying what the caller `wants` as it arrives and
/// everything relayed before the answer ahead of it. When the caller cancels, the
/// call is dropped, which cancels it on the backend: `notifications/cancelled` on a
/// Legacy backend, a closed answer stream on a Modern one.
pub(super) async fn drive<T, F, Fut>(
    ctx: &RequestContext<RoleServer>,
    wants: Wants,
    call: F,
) -> Result<T, Cancelled>
where
    F: FnOnce(Option<Relay>) -> Fut,
    Fut: Future<Output = T>,
{
    if wants.is_empty() {
        return tokio::select! {
            biased;
            out = call(None) => Ok(out),
            () = ctx.ct.cancelled() => Err(Cancelled),
        };
    }
    let (relay, mut relayed) = relay(wants);
    let mut call = std::pin::pin!(call(Some(relay)));
    loop {
        tokio::select! {
            biased;
            () = ctx.ct.cancelled() => return Err(Cancelled),
            Some(item) = relayed.recv() => deliver(&ctx.peer, item).await,
            out = &mut call => {
                // The answer came after everything relayed so far: deliver that first.
                while let Ok(item) = relayed.try_recv() {
                    deliver(&ctx.peer, item).await;
                }
                return Ok(out);
            }
        }
    }
}

/// Send one relayed notification to the caller. Legacy sessions get progress on the
/// request's own stream (rmcp routes it by the client's token) and logs on the
/// session stream; Modern requests get both on their answer stream.
pub(super) async fn deliver(peer: &Peer<RoleServer>, item: Relayed) {
    let sent = match item {
        Relayed::Progress(progress) => peer.notify_progress(progress).await,
        Relayed::Log(log) => peer.notify_logging_message(log).await,
    };
    if let Err(error) = sent {
        tracing::debug!("could not relay a notification to the caller: {error}");
    }
}
