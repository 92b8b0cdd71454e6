//! `/metrics`: the Prometheus text, behind the Host check and, by default, the
//! stack's authentication. The series name backends and methods, so the route is
//! guarded like the gateway's `/status`.

use std::sync::Arc;

use axum::response::IntoResponse;
use http::StatusCode;

use super::Telemetry;
use crate::auth::{AuthLayer, RequiredClaim};
use crate::context::Identity;
use crate::headers::HeaderValidationLayer;

/// Who may read `/metrics`. Every variant first wants a `Host` the stack's header
/// rules accept (403 otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MetricsAccess {
    /// Any request with an accepted `Host`.
    Open,
    /// A request the stack's authentication accepts (the `/mcp` bearer token;
    /// 401 without it). Under anonymous authentication this is [`Open`](Self::Open).
    #[default]
    Authenticated,
    /// [`Authenticated`](Self::Authenticated), and the identity carries the claim
    /// (403 otherwise).
    Claim(RequiredClaim),
}

/// The `/metrics` route of `telemetry`, guarded as `access` says.
pub(crate) fn router(
    telemetry: Arc<Telemetry>,
    access: &MetricsAccess,
    auth: &AuthLayer,
    headers: HeaderValidationLayer,
) -> axum::Router {
    let mut router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = telemetry.prometheus_text().unwrap_or_default();
            async move {
                (
                    [
                        (
                            http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        ),
                        (http::header::CACHE_CONTROL, "no-store"),
                    ],
                    text,
                )
            }
        }),
    );
    if let MetricsAccess::Claim(required) = access {
        let required = Arc::new(required.clone());
        router = router.route_layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let admitted = request
                    .extensions()
                    .get::<Arc<Identity>>()
                    .is_some_and(|identity| required.admits(identity));
                async move {
                    if admitted {
                        next.run(request).await
                    } else {
                        (StatusCode::FORBIDDEN, "Forbidden").into_response()
                    }
                }
            },
        ));
    }
    if *access != MetricsAccess::Open {
        router = router.route_layer(auth.clone());
    }
    router.route_layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let allowed = headers.allows_host(request.headers(), request.uri().host());
            async move {
                if allowed {
                    next.run(request).await
                } else {
                    (StatusCode::FORBIDDEN, "Forbidden: Host not allowed").into_response()
                }
            }
        },
    ))
}
