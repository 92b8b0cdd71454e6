//! A layer stack that can be replaced while it serves: hot reload of the door.
//!
//! [`StackSwitch`] holds the current routes (the MCP endpoint wrapped in its layers,
//! plus the protected-resource metadata and `/metrics`) behind an atomic pointer.
//! Each request loads the pointer once and runs entirely on the stack it loaded, so
//! a [`StackSwitch::replace`] takes effect for the next request while requests in
//! flight finish under the old layers (old policies, old audit sink), which are
//! dropped when the last of them ends.
//!
//! ```
//! # use std::convert::Infallible;
//! # use http::{Request, Response};
//! # use http_body_util::Full;
//! use vmcp_layers::stack::StackBuilder;
//! use vmcp_layers::switch::StackSwitch;
//!
//! let mcp = tower::service_fn(|_req: Request<Full<bytes::Bytes>>| async {
//!     Ok::<_, Infallible>(Response::new(axum::body::Body::from("{}")))
//! });
//! let switch = StackSwitch::new(StackBuilder::new().build(mcp.clone()));
//! let app: axum::Router = switch.router();
//! // Later, with new settings:
//! switch.replace(StackBuilder::new().build(mcp));
//! # let _ = app;
//! ```

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Service, ServiceExt};

use crate::stack::Stack;

/// The replaceable stack; cloning shares it.
#[derive(Clone)]
pub struct StackSwitch {
    current: Arc<ArcSwap<Stack>>,
}

impl std::fmt::Debug for StackSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackSwitch")
            .field("current", &*self.current.load())
            .finish()
    }
}

impl StackSwitch {
    /// Serve `stack` until it is replaced.
    pub fn new(stack: Stack) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(stack)),
        }
    }

    /// Serve `stack` from the next request on.
    pub fn replace(&self, stack: Stack) {
        self.current.store(Arc::new(stack));
    }

    /// The stack serving new requests now.
    pub fn current(&self) -> Arc<Stack> {
        self.current.load_full()
    }

    /// A router that sends every request to the current stack's routes (merge it
    /// with other routes; theirs take precedence). Paths no stack serves are 404.
    pub fn router(&self) -> axum::Router {
        axum::Router::new().fallback_service(self.clone())
    }
}

impl Service<Request<Body>> for StackSwitch {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // One load per request; the router clone is an `Arc` clone.
        let router = self.current.load().router_ref().clone();
        Box::pin(router.oneshot(req))
    }
}
