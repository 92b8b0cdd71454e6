//! The integrity admin endpoint (`integrity.admin`, off by default): what
//! `vmcp pins list|diff|approve` does, over HTTP, for operators who cannot reach the
//! pin store (a gateway in a container, pins in Redis).
//!
//! `GET /admin/pins`, `GET /admin/pins/diff`, `POST /admin/pins/approve
//! {name | backend [, kind]}`. Its own bearer token (`tokenFile` or `tokenEnv`),
//! apart from `incomingAuth`: an MCP caller's token must never approve a definition.
//! The token is read per request (so a reload or a rotated file applies at once) and
//! compared in constant time; a wrong or missing one is a bare 401. With the section
//! absent the routes answer 404, as if they did not exist.

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::aggregator::Aggregator;
use crate::config::IntegrityAdminConfig;
use crate::integrity::EntryKind;
use crate::integrity::approval::{self, Selection};

/// Who the admin endpoint records as the approver.
const APPROVER: &str = "admin";

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// No `integrity.admin`: the endpoint does not exist.
    Off,
    /// The configured token cannot be read (logged; the caller learns nothing).
    Unavailable,
    /// No token, or the wrong one.
    Unauthorized,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = match self {
            Refusal::Off => StatusCode::NOT_FOUND.into_response(),
            Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE.into_response(),
            Refusal::Unauthorized => {
                let mut r = StatusCode::UNAUTHORIZED.into_response();
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                r
            }
        };
        no_store(&mut response);
        response
    }
}

fn no_store(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The token `admin` names, trimmed (`None`: unset, empty or unreadable).
fn configured_token(admin: &IntegrityAdminConfig) -> Option<String> {
    let token = match (&admin.token_file, &admin.token_env) {
        (Some(path), _) => match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(file = %path.display(), "integrity.admin.tokenFile cannot be read: {e}");
                return None;
            }
        },
        (None, Some(name)) => std::env::var(name).ok()?,
        (None, None) => return None,
    };
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// Whether `given` is `expected`, in time independent of where they differ and of
/// their lengths (both are hashed first).
fn same_token(given: &str, expected: &str) -> bool {
    use aws_lc_rs::digest::{SHA256, digest};
    let (a, b) = (
        digest(&SHA256, given.as_bytes()),
        digest(&SHA256, expected.as_bytes()),
    );
    aws_lc_rs::constant_time::verify_slices_are_equal(a.as_ref(), b.as_ref()).is_ok()
}

/// Let the request in, or say why not.
fn admit(aggregator: &Aggregator, headers: &HeaderMap) -> Result<(), Refusal> {
    let config = aggregator.config();
    let admin = config
        .integrity
        .as_ref()
        .and_then(|i| i.admin.as_ref())
        .ok_or(Refusal::Off)?;
    let expected = configured_token(admin).ok_or(Refusal::Unavailable)?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or(Refusal::Unauthorized)?;
    if same_token(given, &expected) {
        Ok(())
    } else {
        Err(Refusal::Unauthorized)
    }
}

/// The admin routes (mounted beside the status routes).
pub(crate) fn router(aggregator: Arc<Aggregator>) -> axum::Router {
    axum::Router::new()
        .route("/admin/pins", get(list))
        .route("/admin/pins/diff", get(diff))
        .route("/admin/pins/approve", post(approve))
        .with_state(aggregator)
}

/// `?backend=`, `?name=` and `?kind=` of the read routes.
#[derive(Debug, Default, Deserialize)]
struct Filter {
    backend: Option<String>,
    name: Option<String>,
    kind: Option<String>,
}

impl Filter {
    /// From a query string (`backend=B&name=N&kind=K`; other keys ignored).
    fn from_query(query: Option<&str>) -> Self {
        let mut filter = Filter::default();
        let Some(url) = query.and_then(|q| reqwest::Url::parse(&format!("http://q/?{q}")).ok())
        else {
            return filter;
        };
        for (key, value) in url.query_pairs() {
            let slot = match &*key {
                "backend" => &mut filter.backend,
                "name" => &mut filter.name,
                "kind" => &mut filter.kind,
                _ => continue,
            };
            *slot = Some(value.into_owned());
        }
        filter
    }

    fn selection(&self) -> Result<Selection<'_>, Failure> {
        let kind = match self.kind.as_deref() {
            None => None,
            Some(k) => Some(
                EntryKind::parse(k)
                    .ok_or((StatusCode::BAD_REQUEST, "kind is tool, prompt or template"))?,
            ),
        };
        Ok(Selection {
            backend: self.backend.as_deref(),
            name: self.name.as_deref(),
            kind,
        })
    }
}

/// A refused request: its status and a short reason (no backend data).
type Failure = (StatusCode, &'static str);

fn error(status: StatusCode, message: &str) -> Response {
    let mut response = (status, Json(json!({"error": message}))).into_response();
    no_store(&mut response);
    response
}

fn ok(body: serde_json::Value) -> Response {
    let mut response = Json(body).into_response();
    no_store(&mut response);
    response
}

/// The document the current store holds, or the response saying why not.
async fn document(
    aggregator: &Aggregator,
) -> Result<
    (
        Arc<dyn crate::integrity::PinStore>,
        crate::integrity::PinDocument,
    ),
    Failure,
> {
    let store = aggregator
        .integrity()
        .store()
        .ok_or((StatusCode::CONFLICT, "integrity is off (integrity.mode)"))?;
    let (doc, _) = store.load().await.map_err(|e| {
        tracing::error!("admin endpoint: {e}");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the pin store cannot be read",
        )
    })?;
    Ok((store, doc))
}

/// A read request admitted, its query's filter checked and the store's document
/// loaded; or the response refusing it.
async fn read(
    aggregator: &Aggregator,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(Filter, crate::integrity::PinDocument), Response> {
    admit(aggregator, headers).map_err(IntoResponse::into_response)?;
    let filter = Filter::from_query(query);
    if let Err((status, message)) = filter.selection() {
        return Err(error(status, message));
    }
    let (_, doc) = document(aggregator)
        .await
        .map_err(|(status, message)| error(status, message))?;
    Ok((filter, doc))
}

async fn list(
    State(aggregator): State<Arc<Aggregator>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let (filter, doc) = match read(&aggregator, &headers, query.as_deref()).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    let Ok(selection) = filter.selection() else {
        return error(StatusCode::BAD_REQUEST, "kind is tool, prompt or template");
    };
    let entries: Vec<_> = approval::rows(&doc, selection)
        .into_iter()
        .map(|row| {
            json!({
                "backend": row.backend,
                "kind": row.key.kind.as_str(),
                "name": row.key.name,
                "state": row.state.as_str(),
                "pinnedSha256": row.pinned,
                "pendingSha256": row.pending,
            })
        })
        .collect();
    ok(json!({ "entries": entries }))
}

async fn diff(
    State(aggregator): State<Arc<Aggregator>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let (filter, doc) = match read(&aggregator, &headers, query.as_deref()).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    let Ok(selection) = filter.selection() else {
        return error(StatusCode::BAD_REQUEST, "kind is tool, prompt or template");
    };
    let pending: Vec<_> = approval::diffs(&doc, selection)
        .into_iter()
        .map(|d| {
            json!({
                "backend": d.backend,
                "kind": d.key.kind.as_str(),
                "name": d.key.name,
                "diff": d.fields,
            })
        })
        .collect();
    ok(json!({ "pending": pending }))
}

async fn approve(
    State(aggregator): State<Arc<Aggregator>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(refusal) = admit(&aggregator, &headers) {
        return refusal.into_response();
    }
    let filter: Filter = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "the body is {\"name\": N} or {\"backend\": B} (and optionally \"kind\")",
            );
        }
    };
    if filter.name.is_none() && filter.backend.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "approve a name, or everything of one backend",
        );
    }
    if let Err((status, message)) = filter.selection() {
        return error(status, message);
    }
    let store = match aggregator.integrity().store() {
        Some(store) => store,
        None => return error(StatusCode::CONFLICT, "integrity is off (integrity.mode)"),
    };
    let approved = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = approved.clone();
    let stored = store
        .update(Box::new(move |doc| {
            let Ok(selection) = filter.selection() else {
                return false;
            };
            let now = approval::approve(doc, selection, APPROVER);
            let changed = !now.is_empty();
            *out.lock().unwrap_or_else(|e| e.into_inner()) = now;
            changed
        }))
        .await;
    if let Err(e) = stored {
        tracing::error!("admin endpoint: approval not stored: {e}");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the pin store cannot be written",
        );
    }
    let approved = std::mem::take(&mut *approved.lock().unwrap_or_else(|e| e.into_inner()));
    if approved.is_empty() {
        return error(StatusCode::NOT_FOUND, "nothing pending matches");
    }
    // Apply at once here (other replicas follow within their 1 s poll); the rebuild
    // writes the audit line of each applied approval, with `approved_by`.
    aggregator.rebuild().await;
    let approved: Vec<_> = approved
        .iter()
        .map(|(backend, key, pin)| {
            json!({
                "backend": backend,
                "kind": key.kind.as_str(),
                "name": key.name,
                "sha256": pin.sha256,
            })
        })
        .collect();
    ok(json!({ "approved": approved }))
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("s3cret-token", "s3cret-token"));
        assert!(!same_token("s3cret-toke", "s3cret-token"));
        assert!(!same_token("", "s3cret-token"));
        assert!(!same_token("s3cret-token ", "s3cret-token"));
    }
}
