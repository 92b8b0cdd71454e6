//! Authentication and MCP parsing: who is calling, and what they ask for.
//!
//! The [`AuthLayer`] first authenticates the caller (`incomingAuth.type`):
//!
//! - `anonymous`: every caller is [`Identity::anonymous`].
//! - `oidc`: a bearer JWT validated by a [`JwtValidator`]. A missing or refused token
//!   is answered **401** with `WWW-Authenticate: Bearer …, resource_metadata="…"`
//!   pointing at the RFC 9728 protected-resource metadata ([`metadata_router`]).
//!
//! Then it decodes the JSON-RPC body **once** ([`ParsedMcpRequest`]) and hands both on
//! as request extensions (`Arc<Identity>`, `Arc<ParsedMcpRequest>`), so no later layer
//! parses again. It also returns them in the response extensions for the audit layer.
//! A body that is not one JSON-RPC object is answered 400 (`-32700`, or `-32600` for a
//! batch), a body over the limit set by [`headers`](crate::headers) 413, and a
//! 2026-07-28 header that disagrees with the body (`Mcp-Method`, `Mcp-Name`,
//! `MCP-Protocol-Version` against `_meta`) 400 with `-32020`.
//!
//! The token is checked before the body is read: an unauthenticated caller never gets
//! its body parsed.
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use axum::body::Body;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::{auth::AuthLayer, Identity, ParsedMcpRequest};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(AuthLayer::anonymous())
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

pub mod jwt;

use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use tower::{Layer, Service};

use crate::authz::AuthzConfig;
use crate::context::{Identity, ParseError, ParsedMcpRequest};
use crate::jsonrpc;
pub use jwt::{JwtError, JwtSettings, JwtValidator};

/// `incomingAuth:` — how callers authenticate, and (`authz`) what they may do.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncomingAuthConfig {
    /// `anonymous` or `oidc`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// OIDC/JWT settings, required when `type` is `oidc`.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
    /// Authorization policies.
    #[serde(default)]
    pub authz: Option<AuthzConfig>,
}

/// `incomingAuth.oidc:` — the token issuer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcConfig {
    /// The issuer (`iss`); keys are discovered from its
    /// `/.well-known/openid-configuration` unless `jwksUrl` is set.
    #[serde(default)]
    pub issuer: String,
    /// The audience tokens must carry (`aud`).
    #[serde(default)]
    pub audience: String,
    /// The JWKS URL, skipping discovery.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// This server's resource identifier (its public MCP URL), announced in the
    /// protected-resource metadata. Default: derived from the request's `Host`.
    #[serde(default)]
    pub resource: Option<String>,
    /// Scopes announced in the protected-resource metadata.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Clock skew tolerated on `exp`/`nbf` (default 30s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub leeway: Option<Duration>,
    /// The least time between two JWKS fetches triggered by unknown key ids
    /// (default 10s).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub jwks_refresh_min_interval: Option<Duration>,
    /// Allow `http://` issuer and JWKS URLs that are not loopback.
    #[serde(default)]
    pub insecure_allow_http: bool,
}

fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
        .is_some_and(|h| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        })
}

impl IncomingAuthConfig {
    /// Check the section; each message names its field (`incomingAuth.oidc.issuer …`).
    pub fn validate(&self, errors: &mut Vec<String>) {
        match self.kind.as_str() {
            "anonymous" => {}
            "oidc" => match &self.oidc {
                None => errors.push("incomingAuth.oidc is required when type is \"oidc\"".into()),
                Some(oidc) => oidc.validate(errors),
            },
            "" => errors.push("incomingAuth.type is required (\"anonymous\" or \"oidc\")".into()),
            other => errors.push(format!(
                "incomingAuth.type must be \"anonymous\" or \"oidc\" (got {other:?})"
            )),
        }
        if let Some(authz) = &self.authz {
            authz.validate("incomingAuth.authz", errors);
        }
    }
}

impl OidcConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        let mut url = |field: &str, value: &str| {
            if value.is_empty() {
                errors.push(format!("incomingAuth.oidc.{field} is required"));
            } else if reqwest::Url::parse(value).is_err() {
                errors.push(format!("incomingAuth.oidc.{field} {value:?} is not a URL"));
            } else if !(value.starts_with("https://")
                || (value.starts_with("http://")
                    && (self.insecure_allow_http || is_loopback_url(value))))
            {
                errors.push(format!(
                    "incomingAuth.oidc.{field} must use https:// (or set insecureAllowHttp)"
                ));
            }
        };
        url("issuer", &self.issuer);
        if let Some(jwks) = &self.jwks_url {
            url("jwksUrl", jwks);
        }
        if self.audience.is_empty() {
            errors.push("incomingAuth.oidc.audience is required".into());
        }
    }

    /// Validator settings from this section (`group_claim` from the authz section).
    pub fn settings(&self, group_claim: Option<&str>) -> JwtSettings {
        let mut settings = JwtSettings::new(&self.issuer, &self.audience);
        settings.jwks_url = self.jwks_url.clone();
        if let Some(leeway) = self.leeway {
            settings.leeway = leeway;
        }
        if let Some(interval) = self.jwks_refresh_min_interval {
            settings.refresh_min_interval = interval;
        }
        if let Some(claim) = group_claim {
            settings.group_claim = claim.to_owned();
        }
        settings
    }
}

#[derive(Debug)]
enum Authenticator {
    Anonymous,
    Jwt(Arc<JwtValidator>),
}

#[derive(Debug)]
struct AuthInner {
    authenticator: Authenticator,
    resource: Option<String>,
}

/// Produces [`Auth`] services; holds the authenticator.
#[derive(Debug, Clone)]
pub struct AuthLayer {
    inner: Arc<AuthInner>,
}

impl AuthLayer {
    /// Every caller is anonymous; the body is still parsed.
    pub fn anonymous() -> Self {
        Self {
            inner: Arc::new(AuthInner {
                authenticator: Authenticator::Anonymous,
                resource: None,
            }),
        }
    }

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

/// Authenticates and parses; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Arc<AuthInner>,
}

fn anonymous() -> Arc<Identity> {
    static ANONYMOUS: OnceLock<Arc<Identity>> = OnceLock::new();
    ANONYMOUS
        .get_or_init(|| Arc::new(Identity::anonymous()))
        .clone()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

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

/// The 2026-07-28 header/body consistency rules.
fn header_mismatch(headers: &HeaderMap, parsed: &ParsedMcpRequest) -> Option<&'static str> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(method) = get("mcp-method")
        && method != parsed.method
    {
        return Some("Mcp-Method header does not match the request body");
    }
    if let Some(name) = get("mcp-name")
        && Some(name) != parsed.target()
    {
        return Some("Mcp-Name header does not match the request body");
    }
    if let (Some(header), Some(meta)) =
        (get("mcp-protocol-version"), parsed.meta_protocol_version())
        && header != meta
    {
        return Some("MCP-Protocol-Version header does not match _meta protocolVersion");
    }
    None
}

fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Auth<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: http_body::Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<axum::BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let identity = match &auth.authenticator {
                Authenticator::Anonymous => anonymous(),
                Authenticator::Jwt(validator) => {
                    let result = match bearer(&parts.headers) {
                        Some(token) => validator.validate(token).await,
                        None => Err(JwtError::Missing),
                    };
                    match result {
                        Ok(identity) => identity,
                        Err(error) => {
                            tracing::debug!("authentication refused: {error}");
                            let resource = resource_of(auth.resource.as_deref(), &parts);
                            return Ok(unauthorized(&resource, &error));
                        }
                    }
                }
            };
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) => {
                    let error: axum::BoxError = error.into();
                    let (status, message) = if is_length_limit(&*error) {
                        (StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
                    } else {
                        (StatusCode::BAD_REQUEST, "request body could not be read")
                    };
                    return Ok(jsonrpc::error_response(
                        status,
                        None,
                        jsonrpc::INVALID_REQUEST,
                        message,
                    ));
                }
            };
            let mut parsed = None;
            if parts.method == Method::POST {
                let header = |name| {
                    parts
                        .headers
                        .get(name)
                        .and_then(|v: &HeaderValue| v.to_str().ok())
                };
                match ParsedMcpRequest::parse(
                    &bytes,
                    header("mcp-protocol-version"),
                    parts.headers.contains_key("mcp-session-id"),
                ) {
                    Ok(request) => {
                        if let Some(message) = header_mismatch(&parts.headers, &request) {
                            return Ok(jsonrpc::error_response(
                                StatusCode::BAD_REQUEST,
                                request.id.as_ref(),
                                jsonrpc::HEADER_MISMATCH,
                                message,
                            ));
                        }
                        parsed = Some(Arc::new(request));
                    }
                    Err(error) => {
                        let code = match error {
                            ParseError::NotJson(_) => jsonrpc::PARSE_ERROR,
                            _ => jsonrpc::INVALID_REQUEST,
                        };
                        return Ok(jsonrpc::error_response(
                            StatusCode::BAD_REQUEST,
                            None,
                            code,
                            &error.to_string(),
                        ));
                    }
                }
            }
            parts.extensions.insert(identity.clone());
            if let Some(parsed) = &parsed {
                parts.extensions.insert(parsed.clone());
            }
            let response = inner
                .call(Request::from_parts(parts, Full::new(bytes)))
                .await?;
            let mut response = response.map(Body::new);
            response.extensions_mut().insert(identity);
            if let Some(parsed) = parsed {
                response.extensions_mut().insert(parsed);
            }
            Ok(response)
        })
    }
}

/// The RFC 9728 protected-resource metadata routes for `mcp_path` (e.g. `/mcp`):
/// `/.well-known/oauth-protected-resource` and
/// `/.well-known/oauth-protected-resource<mcp_path>`.
pub fn metadata_router(oidc: &OidcConfig, mcp_path: &str) -> axum::Router {
    let issuer = oidc.issuer.clone();
    let scopes = oidc.scopes.clone();
    let resource = oidc.resource.clone();
    let path = mcp_path.to_owned();
    let handler = move |headers: HeaderMap| {
        let resource = resource.clone().unwrap_or_else(|| {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}{path}")
        });
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": [issuer.clone()],
            "bearer_methods_supported": ["header"],
        });
        if !scopes.is_empty() {
            document["scopes_supported"] = serde_json::json!(scopes.clone());
        }
        async move { axum::Json(document) }
    };
    let suffixed = format!("/.well-known/oauth-protected-resource{mcp_path}");
    axum::Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(handler.clone()),
        )
        .route(&suffixed, axum::routing::get(handler))
}

#[cfg(test)]
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

    #[test]
    fn config_errors_name_fields() {
        let mut errors = Vec::new();
        IncomingAuthConfig {
            kind: "oidc".into(),
            oidc: Some(OidcConfig {
                issuer: "http://idp.example.com".into(),
                ..OidcConfig::default()
            }),
            authz: None,
        }
        .validate(&mut errors);
        assert_eq!(
            errors,
            vec![
                "incomingAuth.oidc.issuer must use https:// (or set insecureAllowHttp)",
                "incomingAuth.oidc.audience is required"
            ]
        );
    }
}
