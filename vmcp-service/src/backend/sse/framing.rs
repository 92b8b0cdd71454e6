//! Framing under the SSE parser: the response body is split into lines and handed to
//! `sse_stream` one line at a time, with a bound on the size of one event.

use bytes::Bytes;
use futures::{StreamExt, stream::BoxStream};
use sse_stream::{Sse, SseStream};

/// Errors of the byte stream under the SSE parser.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    #[error(transparent)]
    Http(reqwest::Error),
    #[error("server-sent event larger than {max} bytes")]
    EventTooLarge { max: usize },
}

/// Parses the response body as server-sent events, failing once an event exceeds `max_event_size`.
///
/// The body is handed to the parser one line at a time: when `sse_stream` meets a malformed
/// line it drops the rest of the chunk it is parsing, so with whole network chunks one bad line
/// could swallow the valid events after it.
pub(super) fn event_stream(
    response: reqwest::Response,
    max_event_size: usize,
) -> BoxStream<'static, Result<Sse, sse_stream::Error>> {
    let mut limiter = EventSizeLimiter::new(max_event_size);
    let lines = response.bytes_stream().flat_map(move |chunk| {
        let mut pieces = Vec::new();
        match chunk {
            Err(error) => pieces.push(Err(BodyError::Http(error))),
            Ok(chunk) => {
                for line in split_lines(chunk) {
                    if limiter.observe(&line) {
                        pieces.push(Ok(line));
                    } else {
                        pieces.push(Err(BodyError::EventTooLarge {
                            max: max_event_size,
                        }));
                        break;
                    }
                }
            }
        }
        futures::stream::iter(pieces)
    });
    SseStream::from_bytes_stream(lines).boxed()
}

/// Splits `chunk` after each line terminator (`\r\n`, `\n` or `\r`), without copying.
pub(super) fn split_lines(mut chunk: Bytes) -> Vec<Bytes> {
    let mut lines = Vec::new();
    while let Some(position) = chunk
        .iter()
        .position(|&byte| byte == b'\n' || byte == b'\r')
    {
        let mut end = position + 1;
        if chunk[position] == b'\r' && chunk.get(end) == Some(&b'\n') {
            end += 1;
        }
        lines.push(chunk.split_to(end));
    }
    if !chunk.is_empty() {
        lines.push(chunk);
    }
    lines
}

/// Counts the bytes of the event being received (line terminators excluded); an empty line
/// ends an event. `\r\n`, `\n` and `\r` are all line terminators, as in the SSE spec.
pub(super) struct EventSizeLimiter {
    max: usize,
    size: usize,
    at_line_start: bool,
    after_cr: bool,
}

impl EventSizeLimiter {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            size: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Feeds `chunk`; false once the current event is larger than the limit.
    pub(super) fn observe(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                // The `\n` of a `\r\n` pair: the line already ended at `\r`.
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    if self.at_line_start {
                        self.size = 0;
                    }
                    self.at_line_start = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.at_line_start = false;
                    self.size += 1;
                    if self.size > self.max {
                        return false;
                    }
                }
            }
        }
        true
    }
}
