#![doc = include_str!("../../../docs/layers/authz.md")]
//!
//! # Example
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use axum::body::Body;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::authz::{AuthorizationLayer, cedar::{CedarAuthorizer, CedarSettings, sources}};
//! use vmcp_layers::context::{AdmissionDecision, Identity, ParsedMcpRequest};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let policies = vec![r#"permit(principal, action == Action::"call_tool", resource == Tool::"echo");"#.to_string()];
//! let cedar = CedarAuthorizer::from_sources(&sources("authz", &policies, &[]), CedarSettings::default()).unwrap();
//! let service = ServiceBuilder::new()
//!     .layer(AuthorizationLayer::new(Arc::new(cedar)))
//!     .service_fn(|req: Request<()>| async move {
//!         let allowed = req.extensions().get::<AdmissionDecision>().is_some_and(|d| d.allowed);
//!         Ok::<_, Infallible>(Response::new(Body::from(allowed.to_string())))
//!     });
//! // What the parse and auth layers would have inserted:
//! let mut request = Request::new(());
//! request.extensions_mut().insert(Arc::new(ParsedMcpRequest {
//!     id: Some(1.into()), method: "tools/call".into(), name: Some("echo".into()), ..Default::default()
//! }));
//! request.extensions_mut().insert(Arc::new(Identity::anonymous()));
//! let response = service.oneshot(request).await.unwrap();
//! # let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
//! assert_eq!(&bytes[..], b"true");
//! # });
//! ```

pub mod cedar;
mod error;
mod policies;

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::context::{
    Admission, AdmissionDecision, AdmissionHandle, AdmissionKey, CallKind, Discovered, Identity,
    ListKind, ParsedMcpRequest, ToolAnnotations,
};
pub use crate::future::ResponseFuture;
use crate::prerequisite;
use crate::rewrite::LocalCall;
use cedar::{CedarAuthorizer, Target};

/// Per-item admission for one caller, over the shared authorizer.
struct IdentityAdmission {
    authorizer: Arc<CedarAuthorizer>,
    identity: Arc<Identity>,
}

impl IdentityAdmission {
    fn allowed(&self, target: Target<'_>) -> bool {
        self.authorizer
            .decide(&self.identity, target, None)
            .unwrap_or_else(|e| {
                tracing::warn!("{}; item filtered", crate::shown::shown(&e));
                false
            })
    }
}

impl Admission for IdentityAdmission {
    fn list_hidden(&self, kind: ListKind) -> bool {
        self.authorizer
            .list_hidden(&self.identity, kind)
            .unwrap_or(true)
    }

    fn tool(&self, name: &str, backend: Option<&str>, annotations: &ToolAnnotations) -> bool {
        self.allowed(Target::Tool {
            name,
            backend,
            annotations,
        })
    }

    fn tool_call(
        &self,
        name: &str,
        backend: Option<&str>,
        annotations: &ToolAnnotations,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        // The path of a direct call's decision (`decide` below): arguments in context.
        let target = Target::Tool {
            name,
            backend,
            annotations,
        };
        self.authorizer
            .decide(&self.identity, target, Some(arguments))
            .unwrap_or_else(|e| {
                tracing::warn!("{e}; denied");
                false
            })
    }

    fn prompt(&self, name: &str, backend: Option<&str>) -> bool {
        self.allowed(Target::Prompt { name, backend })
    }

    fn resource(&self, uri: &str, backend: Option<&str>) -> bool {
        self.allowed(Target::Resource { uri, backend })
    }

    /// Argument-free decisions depend only on the policies (this authorizer: a reload
    /// makes another) and the identity, and are cached per identity already.
    fn stable_key(&self) -> Option<AdmissionKey> {
        Some(AdmissionKey::new(
            self.authorizer.clone(),
            self.identity.clone(),
        ))
    }
}

/// The admission handle of `identity` under `authorizer`: what the layer attaches
/// to each request, for callers that outlive a request (a session told about
/// changes after the policies were reloaded).
pub fn admission(authorizer: Arc<CedarAuthorizer>, identity: Arc<Identity>) -> AdmissionHandle {
    AdmissionHandle(Arc::new(IdentityAdmission {
        authorizer,
        identity,
    }))
}

/// Produces [`Authorization`] services; holds the authorizer.
#[derive(Debug, Clone)]
pub struct AuthorizationLayer {
    authorizer: Arc<CedarAuthorizer>,
}

impl AuthorizationLayer {
    /// Decide with `authorizer`.
    pub fn new(authorizer: Arc<CedarAuthorizer>) -> Self {
        Self { authorizer }
    }
}

impl<S> Layer<S> for AuthorizationLayer {
    type Service = Authorization<S>;

    fn layer(&self, inner: S) -> Authorization<S> {
        Authorization {
            inner,
            authorizer: self.authorizer.clone(),
        }
    }
}

/// Makes the admission decision; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Authorization<S> {
    inner: S,
    authorizer: Arc<CedarAuthorizer>,
}

/// The decision for one parsed request (`None` for methods that are not checked).
pub fn decide(
    authorizer: &CedarAuthorizer,
    identity: &Arc<Identity>,
    parsed: &ParsedMcpRequest,
    view: Option<&Discovered>,
    annotations: Option<&ToolAnnotations>,
) -> Option<AdmissionDecision> {
    let kind = CallKind::of_request(parsed)?;
    let none = ToolAnnotations::default();
    // The arguments are parsed only for policies that read `context` (a decision
    // reads none of them otherwise).
    let empty = serde_json::Map::new();
    let arguments = match &parsed.arguments {
        Some(arguments) if authorizer.reads_context() => arguments.map(),
        _ => &empty,
    };
    let allowed = match (kind, parsed.target()) {
        (_, None) => Ok(false),
        (CallKind::Tool, Some(name)) => {
            let backend = view.and_then(|v| v.0.tool(name)).map(|t| t.backend);
            authorizer.decide(
                identity,
                Target::Tool {
                    name,
                    backend: backend.as_deref(),
                    annotations: annotations.unwrap_or(&none),
                },
                Some(arguments),
            )
        }
        (CallKind::Prompt, Some(name)) => {
            let backend = view.and_then(|v| v.0.prompt_backend(name));
            authorizer.decide(
                identity,
                Target::Prompt {
                    name,
                    backend: backend.as_deref(),
                },
                Some(arguments),
            )
        }
        (CallKind::Resource, Some(uri)) => {
            let backend = view.and_then(|v| v.0.resource_backend(uri));
            authorizer.decide(
                identity,
                Target::Resource {
                    uri,
                    backend: backend.as_deref(),
                },
                Some(&Default::default()),
            )
        }
    };
    let allowed = allowed.unwrap_or_else(|e| {
        tracing::warn!("{}; denied", crate::shown::shown(&e));
        false
    });
    Some(AdmissionDecision { kind, allowed })
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Authorization<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        const LAYER: &str = "AuthorizationLayer";
        let parsed = match prerequisite::parsed(req.extensions(), LAYER) {
            Ok(parsed) => parsed.cloned(),
            Err(missing) => return ResponseFuture::ready(missing.into_response()),
        };
        if let Some(parsed) = parsed {
            let identity = match prerequisite::identity(req.extensions(), LAYER) {
                Ok(identity) => identity.clone(),
                Err(missing) => return ResponseFuture::ready(missing.into_response()),
            };
            // A gateway-local tool every caller may call (`crate::rewrite`): what it
            // answers is decided per caller by the service.
            let decision = if req.extensions().get::<LocalCall>().is_some() {
                CallKind::of_request(&parsed).map(|kind| AdmissionDecision {
                    kind,
                    allowed: true,
                })
            } else {
                decide(
                    &self.authorizer,
                    &identity,
                    &parsed,
                    req.extensions().get::<Discovered>(),
                    req.extensions().get::<ToolAnnotations>(),
                )
            };
            if let Some(decision) = decision {
                req.extensions_mut().insert(decision);
            }
            req.extensions_mut()
                .insert(admission(self.authorizer.clone(), identity));
        }
        ResponseFuture::inner(self.inner.call(req))
    }
}
