//! A boxed service whose clone is a reference count.
//!
//! tower's `BoxCloneSyncService` clones the service inside it, and the pipeline
//! boxes each optional layer around the last box: cloning the outer box (axum's
//! router does, once per request, and so does every layer that must wait before
//! calling inside) cloned every box beneath it, one allocation each. A
//! [`SharedService`] holds its service in an `Arc`; a call clones that service
//! alone, whose inner box is again a `SharedService`, and waits for it to be
//! ready inside the call's future (as `tower::util::Oneshot` does), so it is
//! always ready itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Service, ServiceExt};

/// A boxed, shared service; see the [module docs](self).
pub struct SharedService<Req, Res>(Arc<dyn Call<Req, Res>>);

impl<Req, Res> SharedService<Req, Res> {
    /// `service`, boxed and shared.
    pub fn new<S>(service: S) -> Self
    where
        S: Service<Req, Response = Res, Error = Infallible> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        Req: Send + 'static,
    {
        Self(Arc::new(service))
    }
}

impl<Req, Res> Clone for SharedService<Req, Res> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<Req, Res> Service<Req> for SharedService<Req, Res> {
    type Response = Res;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Res, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call readies its own clone of the service.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.0.call_clone(req)
    }
}

/// A service called through a clone of itself, readied first.
trait Call<Req, Res>: Send + Sync {
    fn call_clone(&self, req: Req) -> BoxFuture<'static, Result<Res, Infallible>>;
}

impl<S, Req> Call<Req, S::Response> for S
where
    S: Service<Req, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    Req: Send + 'static,
{
    fn call_clone(&self, req: Req) -> BoxFuture<'static, Result<S::Response, Infallible>> {
        let service = self.clone();
        Box::pin(service.oneshot(req))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its clones; ready only on the second poll, and answers how often
    /// it was polled before its call.
    struct Counted {
        clones: Arc<AtomicUsize>,
        polls: usize,
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.clones.fetch_add(1, Ordering::SeqCst);
            Self {
                clones: self.clones.clone(),
                polls: 0,
            }
        }
    }

    impl Service<()> for Counted {
        type Response = usize;
        type Error = Infallible;
        type Future = std::future::Ready<Result<usize, Infallible>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            self.polls += 1;
            if self.polls < 2 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            std::future::ready(Ok(self.polls))
        }
    }

    #[tokio::test]
    async fn a_call_readies_one_clone_and_a_clone_of_the_box_copies_nothing() {
        let clones = Arc::new(AtomicUsize::new(0));
        let shared = SharedService::new(Counted {
            clones: clones.clone(),
            polls: 0,
        });
        let mut copies: Vec<_> = (0..3).map(|_| shared.clone()).collect();
        assert_eq!(clones.load(Ordering::SeqCst), 0);
        for copy in &mut copies {
            // Waited for until ready (two polls), then called.
            assert_eq!(copy.call(()).await.unwrap(), 2);
        }
        assert_eq!(clones.load(Ordering::SeqCst), 3);
    }
}
