//! The server's log: readable text on stderr by default, JSON lines for machines.
//! Either way every value is cut and escaped as it is written ([`safe`]), so a
//! client's names, ids and methods cannot forge or inflate log lines.

pub mod safe;

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, reload};

/// vmcp at info. rmcp's transport workers are off: each backend failure is
/// reported by vmcp itself, in words and once per change, where rmcp logs an ERROR
/// with a debug dump on every retry. rmcp's service loop is off too: it logs every
/// error answer at WARN as a debug dump with the request id as the client sent it
/// (a client's mistake is not the server's warning), and a client that leaves with
/// a call running as a WARN and an ERROR; vmcp says that itself, in one line.
/// `RUST_LOG` replaces all of this.
pub const DEFAULT_FILTER: &str = "info,rmcp=warn,rmcp::transport::worker=off,rmcp::service=off";

/// During a clean shutdown rmcp complains (at ERROR) about the channels vmcp has
/// just closed on purpose ("failed to send pending response during drain").
const SHUTDOWN_FILTER: &str = "info,rmcp=off";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per event (timestamp, level, target, fields).
    Json,
}

/// The installed logger; tells it when a shutdown begins.
#[derive(Debug)]
pub struct Logging {
    /// `None` when `RUST_LOG` chose the filter: it is left alone.
    default_filter: Option<reload::Handle<EnvFilter, Registry>>,
}

impl Logging {
    /// Install the global logger writing `format` to stderr.
    pub fn init(format: LogFormat) -> Self {
        let from_env = EnvFilter::try_from_default_env().ok();
        let chosen = from_env.is_some();
        let filter = from_env.unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
        let (filter, handle) = reload::Layer::new(filter);
        let output = match format {
            // Colours only for a person at a terminal, not in a file or a pipe.
            LogFormat::Text => fmt::layer()
                .fmt_fields(safe::SafeFields)
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .boxed(),
            LogFormat::Json => fmt::layer()
                .json()
                .flatten_event(true)
                .with_writer(std::io::stderr)
                .map_event_format(safe::SafeJson)
                .boxed(),
        };
        tracing_subscriber::registry()
            .with(filter)
            .with(output)
            .init();
        Self {
            default_filter: (!chosen).then_some(handle),
        }
    }

    /// A clean shutdown starts: silence rmcp's complaints about closed channels.
    pub fn shutting_down(&self) {
        if let Some(handle) = &self.default_filter {
            let _ = handle.reload(EnvFilter::new(SHUTDOWN_FILTER));
        }
    }
}
