//! One request's audit line in the making: what the layer knows when the request
//! arrives, what the response (or the [`AuditNote`]) adds, and the line written when
//! the response body ends, or when the request ends without one.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::StatusCode;
use serde_json::{Map, Value, json};

use super::Auditor;
use super::record::{
    Metadata, Outcome, Record, RecordTarget, Subjects, audit_id, capped, event_type,
    is_jsonrpc_error, redact, target_type,
};
use crate::body::BodySummary;
use crate::context::{AuditNote, BackendTarget, Identity, ParsedMcpRequest};

pub(super) struct Pending {
    pub(super) auditor: Arc<Auditor>,
    pub(super) started: Instant,
    pub(super) path: String,
    pub(super) http_method: http::Method,
    pub(super) status: Option<StatusCode>,
    pub(super) identity: Option<Arc<Identity>>,
    pub(super) parsed: Option<Arc<ParsedMcpRequest>>,
    pub(super) backend: Option<BackendTarget>,
    /// What the layers inside learnt before any response existed, and whether the
    /// service cancelled the request on the caller's word.
    pub(super) note: AuditNote,
    /// The inner service failed (no response, not the client's doing).
    pub(super) failed: bool,
    /// The service refused the request by a rate limit ([`super::RateLimited`]).
    pub(super) limited: bool,
    pub(super) written: bool,
}

impl Pending {
    /// What became of the request. `summary` is `None` when the request ended
    /// without a response body: the response future was dropped or failed.
    fn outcome(&self, summary: Option<&BodySummary>, parsed: Option<&ParsedMcpRequest>) -> Outcome {
        if self.note.is_cancelled() {
            return Outcome::Cancelled;
        }
        if self.limited {
            return Outcome::Limited;
        }
        // A request the client waits for (one with an id): when the client goes away
        // before its answer ended, the client cancelled it (a Modern client cancels
        // by closing the request). A notification or a listen stream has no answer
        // to abandon.
        let awaited = parsed.is_some_and(|p| p.id.is_some());
        let Some(status) = self.status else {
            // The response future was dropped: the client went away (hyper drops it),
            // unless a panic is unwinding through it or the service failed.
            return if awaited && !self.failed && !std::thread::panicking() {
                Outcome::Cancelled
            } else {
                Outcome::Error
            };
        };
        let aborted = summary.is_none_or(|s| s.aborted);
        match status {
            s if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN => Outcome::Denied,
            s if s.is_server_error() => Outcome::Error,
            s if s.is_client_error() => Outcome::Failure,
            // A notification or response the server accepted (202, no body): done.
            StatusCode::ACCEPTED => Outcome::Success,
            _ if awaited && summary.is_some_and(|s| s.dropped) => Outcome::Cancelled,
            _ if aborted && summary.is_none_or(|s| s.bytes == 0) => Outcome::Error,
            _ if summary.is_some_and(|s| is_jsonrpc_error(&s.head)) => Outcome::Failure,
            _ => Outcome::Success,
        }
    }

    pub(super) fn finish(&mut self, summary: Option<BodySummary>) {
        if std::mem::replace(&mut self.written, true) {
            return;
        }
        // The response's extensions, else what the layers noted on the way in (a
        // request whose response never came).
        let parsed = self
            .parsed
            .as_deref()
            .or(self.note.parsed_request().map(|p| &**p));
        let identity = self
            .identity
            .as_deref()
            .or(self.note.caller().map(|i| &**i));
        let backend = self.backend.as_ref().or(self.note.backend_target());
        let method = parsed.map(|p| p.method.as_str());
        let event = event_type(method, &self.http_method);
        let config = &self.auditor.config;
        if !config.wants(event) {
            return;
        }
        let outcome = self.outcome(summary.as_ref(), parsed);
        let mut ids = [0u8; 36];
        let logged_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let record = Record {
            audit_id: audit_id(&mut ids),
            kind: event,
            logged_at: &logged_at,
            outcome: outcome.as_str(),
            component: &config.component,
            subjects: Subjects {
                user_id: identity.map(|i| i.subject.as_str()),
                user: identity.and_then(|i| i.claims.get("name").or(i.claims.get("email"))),
                client: parsed.and_then(|p| p.client.as_ref()),
            },
            target: RecordTarget {
                endpoint: &self.path,
                method,
                kind: parsed.and_then(|p| target_type(&p.method)),
                name: parsed.and_then(|p| p.target()),
                backend: backend.map(|BackendTarget(b)| &**b),
            },
            metadata: Metadata {
                duration_ms: (self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round()
                    / 1000.0,
                transport: "streamable-http",
                protocol_version: parsed.and_then(|p| p.revision).map(|r| r.as_str()),
                status: self.status.map(|s| s.as_u16()),
                response_size_bytes: summary.as_ref().map(|s| s.bytes),
            },
            data: None,
        };
        let max = config.max_data();
        let mut data = Map::new();
        if config.include_request_data
            && let Some(parsed) = parsed
        {
            let mut request = json!({
                "arguments": parsed.arguments.as_ref().map(|a| Value::Object(a.map().clone())),
            });
            redact(&mut request);
            data.insert("request".into(), capped(request, max));
        }
        if config.include_response_data
            && let Some(summary) = &summary
        {
            let text = String::from_utf8_lossy(&summary.head[..summary.head.len().min(max)]);
            data.insert(
                "response".into(),
                json!({"body": text, "truncated": summary.bytes as usize > max}),
            );
        }
        let record = Record {
            data: (!data.is_empty()).then_some(&data),
            ..record
        };
        let mut line = Vec::with_capacity(512);
        if let Err(e) = serde_json::to_writer(&mut line, &record) {
            tracing::error!("audit line not serialized: {e}");
            return;
        }
        line.push(b'\n');
        self.auditor.sink.write(&line);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // The request never produced a response body (the client went away, a panic
        // unwinding, the service failed): still one line.
        self.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use axum::body::Body;
    use http::{Request, Response};
    use serde_json::Value;
    use tower::{Layer, Service, ServiceExt};

    use crate::audit::{AuditLayer, AuditSettings, AuditSink};
    use crate::context::AuditNote;
    use crate::parse::McpParseLayer;

    #[derive(Default)]
    struct Lines(Mutex<Vec<Value>>);

    impl AuditSink for Lines {
        fn write(&self, line: &[u8]) {
            let line = serde_json::from_slice(line).expect("a JSON line");
            self.0.lock().unwrap().push(line);
        }
    }

    fn post(body: &str) -> Request<Body> {
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}"#;

    /// Audit around the parse layer around `inner`; the lines written.
    fn audited<S>(
        inner: S,
    ) -> (
        impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
        std::sync::Arc<Lines>,
    )
    where
        S: Service<
                Request<http_body_util::Full<bytes::Bytes>>,
                Response = Response<Body>,
                Error = Infallible,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        let lines = std::sync::Arc::new(Lines::default());
        let layer = AuditLayer::new(AuditSettings::default(), lines.clone());
        (layer.layer(McpParseLayer::new().layer(inner)), lines)
    }

    #[tokio::test]
    async fn a_request_dropped_before_its_answer_is_cancelled_and_still_named() {
        let (reached, mut entered) = tokio::sync::mpsc::channel::<()>(1);
        let (service, lines) = audited(tower::service_fn(move |_req| {
            let reached = reached.clone();
            async move {
                let _ = reached.send(()).await;
                std::future::pending::<Result<Response<Body>, Infallible>>().await
            }
        }));
        let mut call = Box::pin(service.oneshot(post(CALL)));
        tokio::select! {
            _ = &mut call => panic!("the call never answers"),
            reached = entered.recv() => reached.expect("the call reached the service"),
        }
        // What hyper does when the client goes away before the answer.
        drop(call);
        let lines = lines.0.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["outcome"], "cancelled", "{}", lines[0]);
        assert_eq!(lines[0]["target"]["method"], "tools/call");
        assert_eq!(lines[0]["target"]["name"], "slow");
    }

    #[tokio::test]
    async fn a_call_the_service_cancelled_is_cancelled_whatever_it_answered() {
        let (service, lines) = audited(tower::service_fn(|req: Request<_>| async move {
            req.extensions()
                .get::<AuditNote>()
                .expect("the audit layer's note")
                .cancel();
            Ok::<_, Infallible>(Response::new(Body::from(
                r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"cancelled"}}"#,
            )))
        }));
        let response = service.oneshot(post(CALL)).await.unwrap();
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap();
        assert_eq!(lines.0.lock().unwrap()[0]["outcome"], "cancelled");
    }

    #[tokio::test]
    async fn an_answered_call_and_a_dropped_notification_are_not_cancelled() {
        let (service, lines) = audited(tower::service_fn(|_req| async {
            Ok::<_, Infallible>(Response::new(Body::from(
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            )))
        }));
        let response = service.clone().oneshot(post(CALL)).await.unwrap();
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap();
        // Dropped before its end: a notification has no answer to abandon.
        let response = service
            .oneshot(post(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            ))
            .await
            .unwrap();
        drop(response);
        let lines = lines.0.lock().unwrap();
        let outcomes: Vec<&str> = lines
            .iter()
            .map(|l| l["outcome"].as_str().unwrap())
            .collect();
        // The notification's dropped empty body stays `error` (the exchange never
        // finished), as before cancellations were told apart.
        assert_eq!(outcomes, ["success", "error"], "{lines:?}");
    }
}
