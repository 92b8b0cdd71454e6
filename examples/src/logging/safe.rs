//! Log lines that a client cannot forge or inflate, whoever wrote the event (vmcp,
//! rmcp, hyper): every field value is cut and its control characters escaped as it
//! is written.
//!
//! vmcp cuts the client's text where it builds a message ([`vmcp_layers::shown`]),
//! but other crates' events carry client values too (rmcp logs a request's id as
//! sent), so the bundled server's formatter bounds every value again.

use std::fmt::{self, Write};

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use vmcp_layers::shown::{Bounded, needs_escape};

/// The most characters of one field's value in a log line (the message excepted).
pub const FIELD_CHARS: usize = 1024;
/// The most characters of an event's message (vmcp's own reports, such as a refused
/// reload naming every problem, can be long).
pub const MESSAGE_CHARS: usize = 8192;

/// The text format's field formatter: `message field=value …` like tracing's
/// default, with every value cut to [`FIELD_CHARS`] (the message to
/// [`MESSAGE_CHARS`]) and control characters escaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct SafeFields;

impl<'a> MakeVisitor<Writer<'a>> for SafeFields {
    type Visitor = SafeVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> SafeVisitor<'a> {
        SafeVisitor {
            writer: target,
            empty: true,
            result: Ok(()),
        }
    }
}

/// Writes one event's or span's fields; see [`SafeFields`].
#[derive(Debug)]
pub struct SafeVisitor<'a> {
    writer: Writer<'a>,
    empty: bool,
    result: fmt::Result,
}

impl SafeVisitor<'_> {
    fn field(&mut self, name: &str, value: &dyn fmt::Debug) -> fmt::Result {
        if !self.empty {
            self.writer.write_char(' ')?;
        }
        self.empty = false;
        let limit = if name == "message" {
            MESSAGE_CHARS
        } else {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if self.writer.has_ansi_escapes() {
                write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")?;
            } else {
                write!(self.writer, "{name}=")?;
            }
            FIELD_CHARS
        };
        let mut out = Bounded::new(&mut self.writer, limit);
        write!(out, "{value:?}")?;
        out.finish()
    }
}

impl Visit for SafeVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // The message reads as text; other strings are quoted, as tracing does.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{}", ErrorChain(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `log.` fields are the `log` crate's metadata, shown by the event formatter.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        self.result = self.field(field.name(), value);
    }
}

impl VisitOutput<fmt::Result> for SafeVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for SafeVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// An error and its sources: `error: source: source`.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Lines longer than this are read back and have their strings cut.
const JSON_LINE_BYTES: usize = 16 * 1024;

/// The JSON format's event formatter: tracing's own (which escapes what JSON must),
/// with strings over [`FIELD_CHARS`] cut in lines over 16 KiB, and the control
/// characters JSON leaves raw (DEL, C1, the Unicode line and bidirectional
/// controls) escaped too.
#[derive(Debug, Clone)]
pub struct SafeJson<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for SafeJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        if line.len() > JSON_LINE_BYTES
            && let Ok(mut value) = serde_json::from_str::<Value>(&line)
        {
            cut_strings(&mut value);
            line = value.to_string();
            line.push('\n');
        }
        let mut plain = 0;
        for (at, c) in line.char_indices() {
            // Outside strings JSON has no such characters; inside, `\uXXXX` is the
            // same character to a reader (all of them are in the BMP).
            if c != '\n' && needs_escape(c) {
                writer.write_str(&line[plain..at])?;
                write!(writer, "\\u{:04x}", u32::from(c))?;
                plain = at + c.len_utf8();
            }
        }
        writer.write_str(&line[plain..])
    }
}

fn cut_strings(value: &mut Value) {
    match value {
        Value::String(text) if text.len() > FIELD_CHARS => {
            *text = vmcp_layers::shown::Shown::at_most(text.as_str(), FIELD_CHARS).to_string();
        }
        Value::Array(items) => items.iter_mut().for_each(cut_strings),
        Value::Object(map) => map.values_mut().for_each(cut_strings),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    const FORGED: &str = "x\n2026-12-04T00:00:00Z  INFO vmcp: forged\u{1b}[2J\u{9b}";

    fn id() -> String {
        format!("{FORGED}{}", "y".repeat(1 << 20))
    }

    fn emit() {
        let id = id();
        tracing::warn!(target: "rmcp::service", %id, error = ?FORGED, "response error");
        tracing::warn!("message {FORGED}");
    }

    #[test]
    fn text_lines_escape_and_cut_every_value() {
        let buffer = Buffer::default();
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(SafeFields)
            .with_ansi(false)
            .with_writer(buffer.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let text = buffer.text();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains(['\u{1b}', '\u{9b}', '\r']), "{text:?}");
        assert!(text.len() < 2 * (FIELD_CHARS + 400), "{}", text.len());
        assert!(text.contains(r"id=x\n2026-12-04T00:00:00Z  INFO vmcp: forged\u{1b}[2J\u{9b}yyy"));
        assert!(
            text.contains(&format!("… ({} bytes)", id().len())),
            "{text}"
        );
        assert!(text.contains(r#"message x\n2026"#), "{text}");
    }

    #[test]
    fn json_lines_escape_and_cut_every_value() {
        let buffer = Buffer::default();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(buffer.clone())
            .map_event_format(SafeJson);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let text = buffer.text();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains(['\u{1b}', '\u{9b}', '\r']), "{text:?}");
        for line in text.lines() {
            let event: Value = serde_json::from_str(line).unwrap();
            assert!(event["level"].is_string(), "{line}");
        }
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let logged = first["id"].as_str().unwrap();
        let length = format!("… ({} bytes)", id().len());
        // A cut string is also escaped (the cut may not be where JSON readers look).
        assert!(
            logged.starts_with(r"x\n2026-12-04T00:00:00Z  INFO vmcp: forged\u{1b}[2J\u{9b}yyy")
                && logged.ends_with(&length),
            "{logged}"
        );
        assert_eq!(first["message"], "response error");
    }
}
