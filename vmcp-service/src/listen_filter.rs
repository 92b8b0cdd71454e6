//! A Modern `subscriptions/listen` accepts only the URIs its caller may read.
//!
//! rmcp asks the handler which filter it accepts without the request
//! (`accepted_subscription_filter` has no context) and sends the acknowledgment
//! itself, so the caller's URIs are cut here, in the request body, before rmcp sees
//! it: the acknowledgment then lists exactly what was accepted. A URI the caller
//! may not read and one that does not exist are dropped alike (the same Cedar
//! decision as `resources/read`), so the acknowledgment is no existence oracle.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use std::sync::Arc;
use vmcp_layers::context::{AdmissionHandle, Discovered, ParsedMcpRequest};

/// What deciding a listen request's URIs needs from the layers.
pub(crate) struct ListenAdmission {
    handle: AdmissionHandle,
    view: Option<Discovered>,
}

/// The admission to apply, when `req` is a `subscriptions/listen` behind the
/// authorization layer.
pub(crate) fn admission<B>(req: &Request<B>) -> Option<ListenAdmission> {
    let parsed = req.extensions().get::<Arc<ParsedMcpRequest>>()?;
    if parsed.method != "subscriptions/listen" {
        return None;
    }
    Some(ListenAdmission {
        handle: req.extensions().get::<AdmissionHandle>()?.clone(),
        view: req.extensions().get::<Discovered>().cloned(),
    })
}

impl ListenAdmission {
    fn admits(&self, uri: &str) -> bool {
        let backend = self.view.as_ref().and_then(|v| v.0.resource_backend(uri));
        self.handle.0.resource(uri, backend.as_deref())
    }

    /// Drop the URIs the caller may not read from the body's filter.
    pub(crate) async fn apply<B>(self, req: Request<B>) -> Request<Full<Bytes>>
    where
        B: http_body::Body + Send + 'static,
    {
        let (parts, body) = req.into_parts();
        // Behind the stack the body is already buffered and size-limited.
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let bytes = self.cut(bytes);
        Request::from_parts(parts, Full::new(bytes))
    }

    fn cut(&self, bytes: Bytes) -> Bytes {
        let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
            return bytes;
        };
        let Some(Value::Array(uris)) = message
            .pointer_mut("/params/notifications/resourceSubscriptions")
            .map(Value::take)
        else {
            return bytes;
        };
        let admitted: Vec<Value> = uris
            .into_iter()
            .filter(|uri| uri.as_str().is_some_and(|uri| self.admits(uri)))
            .collect();
        if let Some(slot) = message.pointer_mut("/params/notifications/resourceSubscriptions") {
            *slot = Value::Array(admitted);
        }
        serde_json::to_vec(&message).map_or(bytes, Bytes::from)
    }
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
        let cut: Value = serde_json::from_slice(&admission.cut(Bytes::from_static(body))).unwrap();
        assert_eq!(
            cut["params"]["notifications"],
            serde_json::json!({"toolsListChanged": true, "resourceSubscriptions": ["ok://a", "ok://c"]})
        );
        // Nothing to cut: the bytes pass as they are.
        let plain = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{}}}"#);
        assert_eq!(admission.cut(plain.clone()), plain);
    }
}
