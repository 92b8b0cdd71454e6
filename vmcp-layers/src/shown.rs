//! Client-supplied text as vmcp repeats it: in error messages, log lines and audit
//! records.
//!
//! A client chooses names, URIs, ids and methods of any length and with any
//! characters. Repeated whole, a 1 MiB name is a 1 MiB log line per request, and a
//! newline or an ANSI escape in it forges log lines or rewrites the operator's
//! terminal. So every such value is shown [`shown`]: at most [`SHOWN_CHARS`]
//! characters, then `…` and the full length (`… (1048576 bytes)`), with control
//! characters (C0, DEL, C1) and the Unicode line, paragraph and bidirectional
//! controls escaped as `\n`, `\u{1b}`, `\u{202e}`. Audit records, which are JSON
//! (escaped by the serializer), use [`cut`] and write the length in a field of its
//! own.
//!
//! ```
//! use vmcp_layers::shown::{SHOWN_CHARS, shown};
//!
//! assert_eq!(shown("gh_echo").to_string(), "gh_echo");
//! assert_eq!(shown("a\nb\u{1b}[31m").to_string(), r"a\nb\u{1b}[31m");
//! let long = "x".repeat(1 << 20);
//! let text = shown(&long).to_string();
//! assert!(text.starts_with(&"x".repeat(SHOWN_CHARS)));
//! assert!(text.ends_with("… (1048576 bytes)"));
//! ```

use std::fmt::{self, Display, Write};

/// The most characters of one client-supplied value vmcp repeats.
pub const SHOWN_CHARS: usize = 256;

/// `value` as vmcp repeats client text: cut to [`SHOWN_CHARS`] characters with its
/// length, control characters escaped. Formatting never allocates the whole value.
pub fn shown<T: Display>(value: T) -> Shown<T> {
    Shown::at_most(value, SHOWN_CHARS)
}

/// The [`Display`] of [`shown`]; [`Shown::at_most`] chooses another bound.
#[derive(Debug, Clone, Copy)]
pub struct Shown<T> {
    value: T,
    max_chars: usize,
}

impl<T: Display> Shown<T> {
    /// `value` cut to `max_chars` characters (escapes count as one each).
    pub fn at_most(value: T, max_chars: usize) -> Self {
        Self { value, max_chars }
    }
}

impl<T: Display> Display for Shown<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Bounded::new(&mut *f, self.max_chars);
        write!(out, "{}", self.value)?;
        out.finish()
    }
}

/// A [`fmt::Write`] that escapes control characters and stops writing after a
/// number of characters, counting the bytes it was given after that; [`finish`]
/// writes `… (N bytes)` when it cut. Log formatters write field values through it.
///
/// [`finish`]: Bounded::finish
#[derive(Debug)]
pub struct Bounded<W> {
    inner: W,
    left: usize,
    total: usize,
    cut: bool,
}

impl<W: Write> Bounded<W> {
    /// Write at most `max_chars` characters into `inner`.
    pub fn new(inner: W, max_chars: usize) -> Self {
        Self {
            inner,
            left: max_chars,
            total: 0,
            cut: false,
        }
    }

    /// End the value: say how long it was if it was cut.
    pub fn finish(mut self) -> fmt::Result {
        if self.cut {
            write!(self.inner, "… ({} bytes)", self.total)?;
        }
        Ok(())
    }
}

impl<W: Write> Write for Bounded<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.total = self.total.saturating_add(s.len());
        if self.cut {
            return Ok(());
        }
        let mut plain = 0;
        for (at, c) in s.char_indices() {
            if self.left == 0 {
                self.inner.write_str(&s[plain..at])?;
                self.cut = true;
                return Ok(());
            }
            self.left -= 1;
            if needs_escape(c) {
                self.inner.write_str(&s[plain..at])?;
                plain = at + c.len_utf8();
                match c {
                    '\n' => self.inner.write_str("\\n")?,
                    '\r' => self.inner.write_str("\\r")?,
                    '\t' => self.inner.write_str("\\t")?,
                    c => write!(self.inner, "\\u{{{:x}}}", u32::from(c))?,
                }
            }
        }
        self.inner.write_str(&s[plain..])
    }
}

/// Whether `c` can break a log line or change how a terminal shows it: the
/// characters [`shown`] escapes.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `value` cut to [`SHOWN_CHARS`] characters, with its full length in bytes when it
/// was cut (for records that carry the length in a field of their own). Nothing is
/// escaped: the record's serializer does that.
pub fn cut(value: &str) -> (&str, Option<usize>) {
    match value.char_indices().nth(SHOWN_CHARS) {
        None => (value, None),
        Some((at, _)) => (&value[..at], Some(value.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_unchanged_and_long_ones_cut_with_their_length() {
        assert_eq!(shown("gh_echo").to_string(), "gh_echo");
        let exact = "é".repeat(SHOWN_CHARS);
        assert_eq!(shown(&exact).to_string(), exact);
        let long = "é".repeat(1 << 20);
        let text = shown(&long).to_string();
        assert_eq!(text, format!("{exact}… ({} bytes)", long.len()));
        assert_eq!(Shown::at_most("abcdef", 3).to_string(), "abc… (6 bytes)");
    }

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        let forged = "id\r\n2026-12-04T00:00:00Z  INFO vmcp: forged\u{1b}[2J\u{9b}\u{202e}\u{2028}";
        let text = shown(forged).to_string();
        assert!(!text.chars().any(needs_escape), "{text:?}");
        assert_eq!(
            text,
            r"id\r\n2026-12-04T00:00:00Z  INFO vmcp: forged\u{1b}[2J\u{9b}\u{202e}\u{2028}"
        );
    }

    #[test]
    fn values_written_in_pieces_are_cut_once() {
        // A Debug or Display impl writes in many small pieces.
        let text = Shown::at_most(format_args!("{}{}{}", "ab", "cd\n", "ef"), 4).to_string();
        assert_eq!(text, r"abcd… (7 bytes)");
    }

    #[test]
    fn cut_keeps_char_boundaries_and_reports_the_length() {
        assert_eq!(cut("gh_echo"), ("gh_echo", None));
        let long = "é".repeat(SHOWN_CHARS + 1);
        let (kept, len) = cut(&long);
        assert_eq!(kept.chars().count(), SHOWN_CHARS);
        assert_eq!(len, Some(long.len()));
    }
}
