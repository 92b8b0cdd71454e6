//! The server's log: readable text on stderr by default, JSON lines for machines.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, reload};

/// vmcp at info. rmcp's transport workers are off: each backend failure is
/// reported by vmcp itself, in words and once per change, where rmcp logs an ERROR
/// with a debug dump on every retry. `RUST_LOG` replaces all of this.
pub const DEFAULT_FILTER: &str = "info,rmcp=warn,rmcp::transport::worker=off";

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
            LogFormat::Text => fmt::layer().with_writer(std::io::stderr).boxed(),
            LogFormat::Json => fmt::layer()
                .json()
                .flatten_event(true)
                .with_writer(std::io::stderr)
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
