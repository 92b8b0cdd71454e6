//! Where audit lines go: standard output, any writer (a file), or `tracing`.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// Where audit lines go. `write` gets one complete JSON line (with `\n`).
pub trait AuditSink: Send + Sync {
    /// Write one line.
    fn write(&self, line: &[u8]);
}

/// Lines to standard output.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutSink;

impl AuditSink for StdoutSink {
    fn write(&self, line: &[u8]) {
        let _ = std::io::stdout().lock().write_all(line);
    }
}

/// Lines to any writer (a file, a buffer), one `write_all` per line.
#[derive(Debug)]
pub struct WriterSink<W>(Mutex<W>);

impl<W: Write + Send> WriterSink<W> {
    /// Write lines to `writer`.
    pub fn new(writer: W) -> Self {
        Self(Mutex::new(writer))
    }
}

impl WriterSink<std::fs::File> {
    /// Append lines to the file at `path`.
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self::new(file))
    }
}

impl<W: Write + Send> AuditSink for WriterSink<W> {
    fn write(&self, line: &[u8]) {
        let mut writer = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writer.write_all(line).and_then(|_| writer.flush()) {
            tracing::error!("audit line not written: {e}");
        }
    }
}

/// Lines as `tracing` events (target `vmcp::audit`, level INFO).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

impl AuditSink for TracingSink {
    fn write(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        tracing::info!(target: "vmcp::audit", "{}", line.trim_end());
    }
}
