//! A response body that reports when it is finished: bytes sent, the first bytes
//! (when asked), and whether it ended cleanly. Audit and telemetry close their records
//! here, so a streamed (SSE) response is measured to its end, not to its headers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// What a finished body reports.
#[derive(Debug, Clone, Default)]
pub struct BodySummary {
    /// Bytes of data sent.
    pub bytes: u64,
    /// The first bytes, up to the capture limit.
    pub head: Bytes,
    /// The body ended with an error or was dropped before its end.
    pub aborted: bool,
}

pin_project_lite::pin_project! {
    /// Wraps a body and calls `on_end` once, at its end or when dropped.
    pub struct ObservedBody<B, F: FnOnce(BodySummary)> {
        #[pin]
        inner: B,
        on_end: Option<F>,
        capture: usize,
        head: BytesMut,
        bytes: u64,
    }

    impl<B, F: FnOnce(BodySummary)> PinnedDrop for ObservedBody<B, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(on_end) = this.on_end.take() {
                on_end(BodySummary { bytes: *this.bytes, head: std::mem::take(this.head).freeze(), aborted: true });
            }
        }
    }
}

impl<B, F: FnOnce(BodySummary)> ObservedBody<B, F> {
    /// Observe `inner`, keeping its first `capture` bytes.
    pub fn new(inner: B, capture: usize, on_end: F) -> Self {
        Self {
            inner,
            on_end: Some(on_end),
            capture,
            head: BytesMut::new(),
            bytes: 0,
        }
    }
}

impl<B, F> Body for ObservedBody<B, F>
where
    B: Body<Data = Bytes>,
    F: FnOnce(BodySummary),
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                    let room = this.capture.saturating_sub(this.head.len());
                    if room > 0 {
                        this.head.extend_from_slice(&data[..room.min(data.len())]);
                    }
                }
            }
            Poll::Ready(end) => {
                if let Some(on_end) = this.on_end.take() {
                    on_end(BodySummary {
                        bytes: *this.bytes,
                        head: std::mem::take(this.head).freeze(),
                        aborted: end.is_some(),
                    });
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn reports_size_and_head_at_the_end() {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let body = ObservedBody::new(Full::new(Bytes::from_static(b"hello world")), 5, move |s| {
            *sink.lock().unwrap() = Some(s);
        });
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello world");
        let summary = seen.lock().unwrap().take().expect("reported");
        assert_eq!(summary.bytes, 11);
        assert_eq!(&summary.head[..], b"hello");
        assert!(!summary.aborted);
    }

    #[test]
    fn a_dropped_body_reports_aborted() {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        drop(ObservedBody::new(
            Full::new(Bytes::from_static(b"x")),
            0,
            move |s| {
                *sink.lock().unwrap() = Some(s);
            },
        ));
        assert!(seen.lock().unwrap().take().expect("reported").aborted);
    }
}
