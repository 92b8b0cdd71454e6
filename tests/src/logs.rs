//! This test process's log as the gateway writes it, for tests that count WARN lines
//! (one per outage, not one per request).

use std::sync::{Arc, Mutex};

/// WARN and above of this process, captured.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    /// Capture WARN and above for the rest of this process (nextest runs each test
    /// in a process of its own).
    pub fn install() -> Self {
        use tracing_subscriber::util::SubscriberInitExt as _;
        let logs = Self::default();
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_ansi(false)
            .finish()
            .try_init()
            .expect("no other subscriber in this process");
        logs
    }

    /// How many captured lines contain `needle`.
    pub fn lines_with(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}
