//! The named response future shared by the layers that either answer at once (a
//! refusal) or await the inner service, converting its body to [`Body`].
//!
//! Named instead of boxed, as tower-http does: no allocation per request, and the
//! type shows in the service's signature. Also [`poll_now`], the one poll a layer
//! makes to learn whether what it waits for is already at hand.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

/// Polls `future` once, without a task to wake: whether it is ready now.
///
/// A layer that must await something before calling its inner service (a body, a
/// view) asks first; when it is at hand, the inner service `poll_ready` readied is
/// called at once, with no clone of it (and of every boxed layer inside it) per
/// request. `Pending` means the same future is awaited later, in a task whose waker
/// it registers then.
pub(crate) fn poll_now<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

pin_project! {
    /// Either the inner service's future or an answer the layer gave itself.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<F> {
        Inner {
            #[pin]
            future: F,
        },
        Ready {
            response: Option<Response<Body>>,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }

    pub(crate) fn ready(response: Response<Body>) -> Self {
        Self {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(Body::new)))
            }
            KindProj::Ready { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
        }
    }
}
