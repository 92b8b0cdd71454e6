#![doc = include_str!("../../docs/layers/recovery.md")]
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::recovery::RecoveryLayer;
//!
//! # tokio_test_block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(RecoveryLayer::new())
//!     .service_fn(|_req: Request<Body>| async {
//!         if true { panic!("boom") }
//!         Ok::<_, Infallible>(Response::new(Body::empty()))
//!     });
//! let response = service.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::any::Any;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};
use tower_http::catch_panic::{CatchPanic, CatchPanicLayer, ResponseForPanic};

pub use crate::future::ResponseFuture;
use crate::jsonrpc;

/// Answers a panic with 500 and a JSON-RPC internal error.
#[derive(Debug, Clone, Copy, Default)]
pub struct PanicResponse;

impl ResponseForPanic for PanicResponse {
    type ResponseBody = Body;

    fn response_for_panic(&mut self, err: Box<dyn Any + Send + 'static>) -> Response<Body> {
        let message = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| err.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        tracing::error!("request handler panicked: {}", crate::shown::shown(message));
        jsonrpc::error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            jsonrpc::INTERNAL_ERROR,
            "internal error",
        )
    }
}

/// Produces [`Recovery`] services.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecoveryLayer;

impl RecoveryLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for RecoveryLayer {
    type Service = Recovery<S>;

    fn layer(&self, inner: S) -> Recovery<S> {
        Recovery {
            inner: CatchPanicLayer::custom(PanicResponse).layer(inner),
        }
    }
}

/// Catches panics of the inner service; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Recovery<S> {
    inner: CatchPanic<S, PanicResponse>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Recovery<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future =
        ResponseFuture<<CatchPanic<S, PanicResponse> as Service<Request<ReqBody>>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        ResponseFuture::inner(self.inner.call(req))
    }
}
