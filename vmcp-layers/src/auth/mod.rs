#![doc = include_str!("../../../docs/layers/auth.md")]
//!
//! # Example
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use axum::body::Body;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::{auth::AuthLayer, parse::McpParseLayer, Identity, ParsedMcpRequest};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(AuthLayer::anonymous())
//!     .layer(McpParseLayer::new())
//!     .service_fn(|req: Request<Full<bytes::Bytes>>| async move {
//!         let parsed = req.extensions().get::<Arc<ParsedMcpRequest>>().unwrap();
//!         let who = req.extensions().get::<Arc<Identity>>().unwrap();
//!         Ok::<_, Infallible>(Response::new(Body::from(format!("{} {}", who.subject, parsed.method))))
//!     });
//! let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
//! let response = service.oneshot(Request::post("/mcp").body(Body::from(body)).unwrap()).await.unwrap();
//! # let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
//! # assert_eq!(&bytes[..], b"anonymous tools/list");
//! # });
//! ```

mod claim;
#[cfg(feature = "jwt")]
pub mod jwt;
#[cfg(feature = "jwt")]
mod metadata;

pub use claim::RequiredClaim;
#[cfg(feature = "jwt")]
pub use metadata::{ResourceMetadata, metadata_router};

use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
#[cfg(feature = "jwt")]
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http::{Request, Response};
use tower::{Layer, Service};

use crate::context::Identity;
#[cfg(feature = "jwt")]
use crate::jsonrpc;
#[cfg(feature = "jwt")]
pub use jwt::{JwksSource, JwtError, JwtSettings, JwtValidator};

#[derive(Debug)]
enum Authenticator {
    Anonymous,
    #[cfg(feature = "jwt")]
    Jwt(Arc<JwtValidator>),
}

#[derive(Debug)]
struct AuthInner {
    authenticator: Authenticator,
    #[cfg_attr(not(feature = "jwt"), allow(dead_code))]
    resource: Option<String>,
}

/// Produces [`Auth`] services; holds the authenticator.
#[derive(Debug, Clone)]
pub struct AuthLayer {
    inner: Arc<AuthInner>,
}

impl AuthLayer {
    /// Every caller is anonymous.
    pub fn anonymous() -> Self {
        Self {
            inner: Arc::new(AuthInner {
                authenticator: Authenticator::Anonymous,
                resource: None,
            }),
        }
    }

    #[cfg(feature = "jwt")]
    /// Bearer JWTs validated by `validator`. `resource` is this server's public MCP
    /// URL (for the `resource_metadata` of a 401); `None` derives it per request.
    pub fn jwt(validator: Arc<JwtValidator>, resource: Option<String>) -> Self {
        Self {
            inner: Arc::new(AuthInner {
                authenticator: Authenticator::Jwt(validator),
                resource,
            }),
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            auth: self.inner.clone(),
        }
    }
}

/// Authenticates; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Arc<AuthInner>,
}

/// `identity` noted for the audit and handed to the layers inside.
fn authenticated(parts: &mut http::request::Parts, identity: &Arc<Identity>) {
    if let Some(note) = parts.extensions.get::<crate::context::AuditNote>() {
        note.identity(identity);
    }
    parts.extensions.insert(identity.clone());
}

fn anonymous() -> Arc<Identity> {
    static ANONYMOUS: OnceLock<Arc<Identity>> = OnceLock::new();
    ANONYMOUS
        .get_or_init(|| Arc::new(Identity::anonymous()))
        .clone()
}

#[cfg(feature = "jwt")]
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(feature = "jwt")]
/// The RFC 9728 metadata URL for `resource` (`https://h/mcp` →
/// `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_url(resource: &str) -> String {
    match reqwest::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            let mut origin = url.origin().ascii_serialization();
            origin.push_str("/.well-known/oauth-protected-resource");
            origin.push_str(path);
            origin
        }
        Err(_) => resource.to_owned(),
    }
}

#[cfg(feature = "jwt")]
/// The resource a request addresses: configured, or `http://<Host><path>`.
fn resource_of(configured: Option<&str>, parts: &http::request::Parts) -> String {
    if let Some(resource) = configured {
        return resource.to_owned();
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}{}", parts.uri.path())
}

#[cfg(feature = "jwt")]
fn unauthorized(resource: &str, error: &JwtError) -> Response<Body> {
    let mut challenge = format!(
        "Bearer realm=\"vmcp\", resource_metadata=\"{}\"",
        metadata_url(resource)
    );
    if *error != JwtError::Missing {
        challenge.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{error}\""
        ));
    }
    let mut response = jsonrpc::error_response(
        StatusCode::UNAUTHORIZED,
        None,
        jsonrpc::UNAUTHORIZED,
        &error.to_string(),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Auth<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    // Boxed: a JWT may need the issuer's keys fetched before the inner call.
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // Known at once (anonymous, or a token validated before and still fresh):
        // the inner service `poll_ready` readied is called here, with no clone of
        // it (and of every boxed layer inside it) per request.
        let known = match &self.auth.authenticator {
            Authenticator::Anonymous => Some((anonymous(), false)),
            #[cfg(feature = "jwt")]
            Authenticator::Jwt(validator) => {
                (!crate::headers::ambiguous_authorization(req.headers()))
                    .then(|| bearer(req.headers()))
                    .flatten()
                    .and_then(|token| validator.cached(token))
                    .map(|identity| (identity, true))
            }
        };
        if let Some((identity, bearer_token)) = known {
            let (mut parts, body) = req.into_parts();
            if bearer_token
                && let Some(token) = bearer(&parts.headers).map(crate::context::SubjectToken::new)
            {
                parts.extensions.insert(token);
            }
            authenticated(&mut parts, &identity);
            let answer = self.inner.call(Request::from_parts(parts, body));
            return Box::pin(async move {
                let mut response = answer.await?.map(Body::new);
                response.extensions_mut().insert(identity);
                Ok(response)
            });
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let identity = match &auth.authenticator {
                Authenticator::Anonymous => anonymous(),
                #[cfg(feature = "jwt")]
                Authenticator::Jwt(validator) => {
                    // Mounted without the header layer, the same refusal it makes:
                    // which of two tokens was checked would be anyone's guess.
                    if crate::headers::ambiguous_authorization(&parts.headers) {
                        return Ok(jsonrpc::error_response(
                            StatusCode::BAD_REQUEST,
                            None,
                            jsonrpc::INVALID_REQUEST,
                            "more than one Authorization header",
                        ));
                    }
                    let token = bearer(&parts.headers);
                    let result = match token {
                        Some(token) => validator.validate(token).await,
                        None => Err(JwtError::Missing),
                    };
                    match result {
                        Ok(identity) => {
                            // Validated: the subject token of an outgoing exchange.
                            if let Some(token) = token.map(crate::context::SubjectToken::new) {
                                parts.extensions.insert(token);
                            }
                            identity
                        }
                        Err(error) => {
                            tracing::debug!("authentication refused: {error}");
                            let resource = resource_of(auth.resource.as_deref(), &parts);
                            return Ok(unauthorized(&resource, &error));
                        }
                    }
                }
            };
            authenticated(&mut parts, &identity);
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.map(Body::new);
            response.extensions_mut().insert(identity);
            Ok(response)
        })
    }
}

#[cfg(all(test, feature = "jwt"))]
mod tests {
    use super::*;

    #[test]
    fn metadata_url_inserts_the_well_known_segment() {
        assert_eq!(
            metadata_url("https://vmcp.example.com/mcp"),
            "https://vmcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:4483/"),
            "http://127.0.0.1:4483/.well-known/oauth-protected-resource"
        );
    }

    #[tokio::test]
    async fn two_authorization_headers_are_refused_when_mounted_alone() {
        use tower::ServiceExt;
        let validator = JwtValidator::with_keys(
            JwtSettings::new("https://idp", "vmcp"),
            &jsonwebtoken::jwk::JwkSet { keys: Vec::new() },
        );
        let service = AuthLayer::jwt(Arc::new(validator), None).layer(tower::service_fn(
            |_req: Request<Body>| async {
                Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
            },
        ));
        let request = Request::post("/mcp")
            .header(header::AUTHORIZATION, "Bearer a")
            .header(header::AUTHORIZATION, "Bearer b")
            .body(Body::empty())
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn bearer_needs_the_scheme() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
    }
}
