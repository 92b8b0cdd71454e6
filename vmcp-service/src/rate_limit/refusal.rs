//! The answer to a request refused by a rate limit, as the reference answers it:
//! code 429, message `Rate limit exceeded`, `data.retryAfterSeconds` (whole
//! seconds, rounded up). A 2026-07-28 request gets the JSON-RPC error at HTTP 200;
//! a 2025-11-25 `tools/call` gets an `isError` result whose `structuredContent`
//! carries the code and data (what the reference's Legacy clients read), other
//! 2025-11-25 verbs the JSON-RPC error. The HTTP response also carries
//! `Retry-After` and `RateLimit` headers.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use vmcp_layers::context::{McpRevision, ParsedMcpRequest};

use super::BucketKind;

/// The JSON-RPC code of a refusal (the HTTP status's number, as the reference uses).
pub(crate) const CODE: i32 = 429;
/// The JSON-RPC message of a refusal.
pub(crate) const MESSAGE: &str = "Rate limit exceeded";

/// A request refused by a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Whole seconds until the refusing buckets have a token (at least 1).
    pub(crate) retry_after_secs: u64,
    /// The bucket that refused.
    pub(crate) bucket: BucketKind,
}

impl Refusal {
    pub(crate) fn new(retry_after: Duration, bucket: BucketKind) -> Self {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        Self {
            retry_after_secs: secs.max(1),
            bucket,
        }
    }

    /// `{"code":429,"message":"Rate limit exceeded","data":{"retryAfterSeconds":N}}`.
    fn error_object(&self) -> String {
        format!(
            r#"{{"code":{CODE},"message":"{MESSAGE}","data":{{"retryAfterSeconds":{}}}}}"#,
            self.retry_after_secs
        )
    }

    /// What a composite step refused by a limit fails with.
    pub(crate) fn step_error(&self) -> String {
        format!("{MESSAGE} (retry after {} seconds)", self.retry_after_secs)
    }
}

/// The HTTP answer refusing `parsed` (a request: it has an id).
pub(crate) fn response(
    parsed: &ParsedMcpRequest,
    refusal: &Refusal,
) -> http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>> {
    // The id is the client's JSON value, written back as it came.
    let id = parsed
        .id
        .as_ref()
        .map_or_else(|| "null".to_owned(), ToString::to_string);
    let error = refusal.error_object();
    let body = if parsed.revision != Some(McpRevision::Modern) && parsed.method == "tools/call" {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{}"}}],"structuredContent":{error},"isError":true}}}}"#,
            refusal.step_error()
        )
    } else {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
    };
    let mut response = http::Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(refusal.retry_after_secs),
    );
    // draft-ietf-httpapi-ratelimit-headers: the refusing policy, nothing remaining,
    // and when it resets.
    if let Ok(value) = http::HeaderValue::from_str(&format!(
        "\"{}\";r=0;t={}",
        refusal.bucket.label(),
        refusal.retry_after_secs
    )) {
        headers.insert("ratelimit", value);
    }
    response
        .extensions_mut()
        .insert(vmcp_layers::audit::RateLimited);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(method: &str, revision: McpRevision) -> ParsedMcpRequest {
        ParsedMcpRequest {
            id: Some(serde_json::json!("a\"1")),
            method: method.to_owned(),
            revision: Some(revision),
            ..ParsedMcpRequest::default()
        }
    }

    async fn body(
        response: http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>,
    ) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn retry_after_is_rounded_up() {
        let r = |d| Refusal::new(d, BucketKind::Shared).retry_after_secs;
        assert_eq!(r(Duration::from_millis(1)), 1);
        assert_eq!(r(Duration::ZERO), 1);
        assert_eq!(r(Duration::from_millis(2001)), 3);
        assert_eq!(r(Duration::from_secs(2)), 2);
    }

    #[tokio::test]
    async fn modern_error_and_legacy_result() {
        let refusal = Refusal::new(Duration::from_millis(1500), BucketKind::PerUser);
        let modern = response(&parsed("tools/call", McpRevision::Modern), &refusal);
        assert_eq!(modern.status(), http::StatusCode::OK);
        assert_eq!(modern.headers()["retry-after"], "2");
        assert_eq!(modern.headers()["ratelimit"], "\"perUser\";r=0;t=2");
        assert!(
            modern
                .extensions()
                .get::<vmcp_layers::audit::RateLimited>()
                .is_some()
        );
        assert_eq!(
            body(modern).await,
            r#"{"jsonrpc":"2.0","id":"a\"1","error":{"code":429,"message":"Rate limit exceeded","data":{"retryAfterSeconds":2}}}"#
        );
        let legacy = body(response(
            &parsed("tools/call", McpRevision::Legacy),
            &refusal,
        ))
        .await;
        let value: serde_json::Value = serde_json::from_str(&legacy).unwrap();
        assert_eq!(value["result"]["isError"], true);
        assert_eq!(value["result"]["structuredContent"]["code"], 429);
        assert_eq!(
            value["result"]["structuredContent"]["data"]["retryAfterSeconds"],
            2
        );
        let read = body(response(
            &parsed("resources/read", McpRevision::Legacy),
            &refusal,
        ))
        .await;
        let value: serde_json::Value = serde_json::from_str(&read).unwrap();
        assert_eq!(value["error"]["code"], 429);
    }
}
