//! A Modern `subscriptions/listen` is set up before rmcp acknowledges it.
//!
//! rmcp sends the acknowledgment itself, before it hands the stream to the
//! handler, and decides which filter it accepts without the request
//! (`accepted_subscription_filter` has no context). So the request is prepared
//! here, on its way in:
//!
//! - the URIs the caller may not read are cut from the body's filter, so the
//!   acknowledgment lists exactly what was accepted. A URI the caller may not read
//!   and one that does not exist are dropped alike (the same Cedar decision as
//!   `resources/read`), so the acknowledgment is no existence oracle;
//! - the listener is registered ([`Sessions::prepare_modern`]) and its URIs are
//!   mirrored onto their backends, so an update the backend sends after the
//!   acknowledgment reaches the client, as for a Legacy `resources/subscribe`.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use vmcp_layers::context::{AdmissionHandle, Discovered, Identity, ParsedMcpRequest};

use crate::aggregator::Aggregator;
use crate::caller_caps::{CallerCaps, Permit};
use crate::session_binding::{Caller, PerCaller};
use crate::sessions::Sessions;
use crate::visibility::Visibility;

/// The service's response body, named here so this module does not import the
/// service's (which imports it).
type VmcpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

const URIS: &str = "/params/notifications/resourceSubscriptions";

/// Whether `parsed` is a `subscriptions/listen` (to be [`prepare`]d).
pub(crate) fn is_listen(parsed: &ParsedMcpRequest) -> bool {
    parsed.method == "subscriptions/listen"
}

/// Prepare a `subscriptions/listen` request for rmcp: cut, register, mirror (see
/// the module docs). The listener's guard goes in the request's extensions, for the
/// handler to attach the stream to; it is removed when the request is done.
pub(crate) async fn prepare<B>(
    req: Request<B>,
    aggregator: &Aggregator,
    sessions: &Arc<Sessions>,
    permit: Permit,
) -> Request<Full<Bytes>>
where
    B: http_body::Body + Send + 'static,
{
    let (mut parts, body) = req.into_parts();
    // Behind the stack or the bare checks the body is already buffered and
    // size-limited.
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let admission = parts
        .extensions
        .get::<AdmissionHandle>()
        .map(|handle| ListenAdmission {
            handle: handle.clone(),
            view: parts.extensions.get::<Discovered>().cloned(),
        });
    let (bytes, uris) = cut(bytes, admission.as_ref());
    let catalog = aggregator.catalog();
    let visibility = Visibility::new(
        parts.extensions.get::<Arc<Identity>>().cloned(),
        admission.map(|a| a.handle.0),
        &catalog,
    );
    let owners: BTreeSet<Arc<str>> = uris
        .iter()
        .filter_map(|uri| catalog.resource_owner(uri).cloned())
        .collect();
    parts
        .extensions
        .insert(sessions.prepare_modern(uris, visibility, permit));
    // Each bounded by its backend's call timeout: a stalled backend delays only the
    // listen streams that ask for its URIs.
    futures::future::join_all(
        owners
            .iter()
            .map(|owner| crate::propagation::sync_backend(aggregator, sessions, owner)),
    )
    .await;
    Request::from_parts(parts, Full::new(bytes))
}

/// Take `caller`'s share of `operational.listenStreams` for a new stream; `None`
/// over a cap (answer [`refusal`]).
pub(crate) fn admit(
    caps: &Arc<CallerCaps>,
    caller: Caller,
    aggregator: &Aggregator,
) -> Option<Permit> {
    let limits = aggregator.config().operational.listen_streams.limits();
    let per_caller = limits.per_caller(&caller);
    caps.acquire(caller, per_caller, limits.max)
        .inspect_err(|refused| {
            tracing::warn!(
                ?refused,
                "refused a subscriptions/listen stream: operational.listenStreams cap reached"
            );
        })
        .ok()
}

/// The answer to a listen over a cap: HTTP 429 with a JSON-RPC error for the
/// request's `id` (the code and message docs/configuration.md names).
pub(crate) fn refusal(id: Option<&Value>) -> http::Response<VmcpBody> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": LISTEN_OVER_CAP, "message": "too many subscriptions/listen streams; close one first"},
    });
    let mut response = http::Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The JSON-RPC error code of a listen refused by `operational.listenStreams`.
pub(crate) const LISTEN_OVER_CAP: i64 = -32000;

/// What deciding a listen request's URIs needs from the layers.
struct ListenAdmission {
    handle: AdmissionHandle,
    view: Option<Discovered>,
}

impl ListenAdmission {
    fn admits(&self, uri: &str) -> bool {
        let backend = self.view.as_ref().and_then(|v| v.0.resource_backend(uri));
        self.handle.0.resource(uri, backend.as_deref())
    }
}

/// The body with the URIs `admission` refuses dropped from its filter (the bytes as
/// they were when nothing is dropped, or without authorization), and the URIs that
/// stay.
fn cut(bytes: Bytes, admission: Option<&ListenAdmission>) -> (Bytes, BTreeSet<String>) {
    let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
        return (bytes, BTreeSet::new());
    };
    let Some(Value::Array(asked)) = message.pointer_mut(URIS) else {
        return (bytes, BTreeSet::new());
    };
    let strings = |asked: &[Value]| {
        asked
            .iter()
            .filter_map(|uri| uri.as_str().map(str::to_owned))
            .collect()
    };
    let Some(admission) = admission else {
        return (bytes, strings(asked));
    };
    let admits = |uri: &Value| uri.as_str().is_some_and(|uri| admission.admits(uri));
    if asked.iter().all(admits) {
        return (bytes, strings(asked));
    }
    asked.retain(admits);
    let uris = strings(asked);
    let bytes = serde_json::to_vec(&message).map_or(bytes, Bytes::from);
    (bytes, uris)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcp_layers::context::{Admission, ListKind, ToolAnnotations};

    /// Admits URIs starting with `ok://`.
    struct Prefix;
    impl Admission for Prefix {
        fn list_hidden(&self, _: ListKind) -> bool {
            false
        }
        fn tool(&self, _: &str, _: Option<&str>, _: &ToolAnnotations) -> bool {
            false
        }
        fn tool_call(
            &self,
            _: &str,
            _: Option<&str>,
            _: &ToolAnnotations,
            _: &serde_json::Map<String, Value>,
        ) -> bool {
            false
        }
        fn prompt(&self, _: &str, _: Option<&str>) -> bool {
            false
        }
        fn resource(&self, uri: &str, _: Option<&str>) -> bool {
            uri.starts_with("ok://")
        }
    }

    #[test]
    fn only_admitted_uris_stay_and_the_rest_is_untouched() {
        let admission = ListenAdmission {
            handle: AdmissionHandle(Arc::new(Prefix)),
            view: None,
        };
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["ok://a","no://b",7,"ok://c"]}}}"#;
        let (bytes, uris) = cut(Bytes::from_static(body), Some(&admission));
        let cut_body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            cut_body["params"]["notifications"],
            serde_json::json!({"toolsListChanged": true, "resourceSubscriptions": ["ok://a", "ok://c"]})
        );
        assert_eq!(uris, BTreeSet::from(["ok://a".into(), "ok://c".into()]));
        // Without authorization nothing is cut, and every string URI is registered.
        let (bytes, uris) = cut(Bytes::from_static(body), None);
        assert_eq!(bytes, Bytes::from_static(body));
        assert_eq!(uris.len(), 3);
        // Nothing to cut: the bytes pass as they are.
        let plain = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{}}}"#);
        assert_eq!(
            cut(plain.clone(), Some(&admission)),
            (plain, BTreeSet::new())
        );
    }
}
