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
    /// The body was dropped before its end (the client went away), not ended by an
    /// error of its own.
    pub dropped: bool,
}

pin_project_lite::pin_project! {
    /// Wraps a body and calls `on_end` once, at its end or when dropped.
    pub struct ObservedBody<B, F: FnOnce(BodySummary)> {
        #[pin]
        inner: B,
        on_end: Option<F>,
        capture: usize,
        // The first bytes: a slice of the first data frame (no copy) while they all
        // come from it, copied into `more` only when a second frame adds to them.
        first: Bytes,
        more: Option<BytesMut>,
        bytes: u64,
        // The inner body said it has nothing more to send (a sized body's last
        // frame): dropping it then is not cutting it short.
        ended: bool,
    }

    impl<B, F: FnOnce(BodySummary)> PinnedDrop for ObservedBody<B, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(on_end) = this.on_end.take() {
                on_end(BodySummary { bytes: *this.bytes, head: head(this.first, this.more), aborted: true, dropped: !*this.ended });
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
            first: Bytes::new(),
            more: None,
            bytes: 0,
            ended: false,
        }
    }
}

/// The captured bytes, taken out of an observed body.
fn head(first: &mut Bytes, more: &mut Option<BytesMut>) -> Bytes {
    match more.take() {
        Some(more) => more.freeze(),
        None => std::mem::take(first),
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
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            *this.ended = inner.is_end_stream();
        }
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                    let kept = this.more.as_ref().map_or(this.first.len(), BytesMut::len);
                    let take = this.capture.saturating_sub(kept).min(data.len());
                    if take > 0 {
                        match this.more {
                            None if kept == 0 => *this.first = data.slice(..take),
                            None => {
                                let mut more = BytesMut::from(&this.first[..]);
                                more.extend_from_slice(&data[..take]);
                                *this.more = Some(more);
                            }
                            Some(more) => more.extend_from_slice(&data[..take]),
                        }
                    }
                }
            }
            Poll::Ready(end) => {
                if let Some(on_end) = this.on_end.take() {
                    on_end(BodySummary {
                        bytes: *this.bytes,
                        head: head(this.first, this.more),
                        aborted: end.is_some(),
                        dropped: false,
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

    #[tokio::test]
    async fn keeps_the_head_across_frames() {
        use futures::stream;
        use http_body_util::StreamBody;
        for (capture, expected) in [(0, &b""[..]), (2, b"ab"), (4, b"abcd"), (9, b"abcdefg")] {
            let seen = Arc::new(Mutex::new(None));
            let sink = seen.clone();
            let frames = ["abc", "d", "efg"].map(|s| {
                Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(s.as_bytes())))
            });
            let body =
                ObservedBody::new(StreamBody::new(stream::iter(frames)), capture, move |s| {
                    *sink.lock().unwrap() = Some(s);
                });
            body.collect().await.unwrap();
            let summary = seen.lock().unwrap().take().expect("reported");
            assert_eq!((&summary.head[..], summary.bytes), (expected, 7));
        }
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
        let summary = seen.lock().unwrap().take().expect("reported");
        assert!(summary.aborted && summary.dropped);
    }

    /// hyper stops polling a sized body after its last frame and drops it: that is
    /// its end, not a client cutting it short.
    #[tokio::test]
    async fn a_sized_body_dropped_after_its_last_frame_was_not_cut_short() {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let mut body = ObservedBody::new(Full::new(Bytes::from_static(b"x")), 0, move |s| {
            *sink.lock().unwrap() = Some(s);
        });
        body.frame().await.expect("a frame").expect("data");
        drop(body);
        let summary = seen.lock().unwrap().take().expect("reported");
        assert_eq!((summary.bytes, summary.dropped), (1, false));
    }
}
