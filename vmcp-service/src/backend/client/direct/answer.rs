//! Reading a direct request's answer: which message answers the request, and the
//! result read as rmcp's client reads it.

use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, ErrorData, GetPromptResponse,
    GetPromptResult, InputRequiredResult, RequestId, ServerResult,
};
use rmcp::service::ServiceError;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::value::RawValue;

use super::DirectError;

/// The parts of an incoming message needed to tell what it is.
#[derive(Deserialize)]
pub(super) struct Envelope {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    pub(super) method: Option<IgnoredAny>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorData>,
}

impl Envelope {
    pub(super) fn into_answer(self, id: i64) -> Result<Option<Box<RawValue>>, ServiceError> {
        let ours = match &self.id {
            Some(RequestId::Number(n)) => *n == id,
            Some(RequestId::String(_)) => false,
            // An error the server could not correlate (no id) answers the request
            // it is in reply to: a POST carries one request.
            None => self.error.is_some(),
        };
        if !ours {
            return Ok(None);
        }
        match (self.result, self.error) {
            (_, Some(error)) => Err(ServiceError::McpError(error)),
            (Some(result), None) => Ok(Some(result)),
            (None, None) => Err(ServiceError::UnexpectedResponse),
        }
    }
}

/// The envelope of a message: read from text after one UTF-8 check of it (a read
/// of bytes checks each string and raw value again); bytes that fail the check are
/// read as bytes, so the error is serde_json's.
pub(super) fn envelope(body: &[u8]) -> Result<Envelope, DirectError> {
    Ok(match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text)?,
        Err(_) => serde_json::from_slice(body)?,
    })
}

/// The answer in a JSON body.
pub(super) fn answer(body: &[u8], id: i64) -> Result<Option<Box<RawValue>>, ServiceError> {
    envelope(body)?.into_answer(id)
}

fn parse<T: DeserializeOwned>(raw: &str) -> Result<T, ServiceError> {
    serde_json::from_str(raw).map_err(|e| DirectError::Malformed(e).into())
}

/// A `prompts/get` answer: a prompt, or an MRTR `input_required`.
pub(crate) fn prompt_response(raw: &str) -> Result<GetPromptResponse, ServiceError> {
    if let Ok(result) = serde_json::from_str::<GetPromptResult>(raw) {
        return Ok(GetPromptResponse::Complete(result));
    }
    parse(raw).map(GetPromptResponse::InputRequired)
}

/// A `tools/call` answer read as rmcp's client reads it: a result, an MRTR
/// `input_required` or a task.
pub(crate) fn call_response(raw: &str) -> Result<CallToolResponse, ServiceError> {
    if let Ok(result) = serde_json::from_str::<CallToolResult>(raw) {
        return Ok(CallToolResponse::Complete(result));
    }
    if let Ok(result) = serde_json::from_str::<InputRequiredResult>(raw) {
        return Ok(CallToolResponse::InputRequired(result));
    }
    if let Ok(result) = serde_json::from_str::<CreateTaskResult>(raw) {
        return Ok(CallToolResponse::Task(result));
    }
    contentless_call_result(raw).map(CallToolResponse::Complete)
}

/// A `tools/call` answer with no content (`{}`, `{"_meta": …}`, a task ack) is an
/// empty result, as rmcp's client reads it.
fn contentless_call_result(raw: &str) -> Result<CallToolResult, ServiceError> {
    let (result_type, meta) = match parse::<ServerResult>(raw)? {
        ServerResult::EmptyResult(_) => (None, None),
        ServerResult::TaskAckResult(ack) => (Some(ack.result_type), ack.meta),
        ServerResult::CustomResult(custom) => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct MetaOnly {
                #[serde(rename = "_meta")]
                meta: rmcp::model::MetaObject,
            }
            let MetaOnly { meta } =
                serde_json::from_value(custom.0).map_err(|_| ServiceError::UnexpectedResponse)?;
            (None, Some(meta))
        }
        _ => return Err(ServiceError::UnexpectedResponse),
    };
    let mut result = CallToolResult::default();
    result.result_type = result_type;
    result.meta = meta;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_by_id() {
        let ok = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert_eq!(answer(ok, 7).unwrap().unwrap().get(), r#"{"content":[]}"#);
        assert!(answer(ok, 8).unwrap().is_none());
        let err = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}"#;
        match answer(err, 7) {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602),
            other => panic!("{other:?}"),
        }
        let uncorrelated = br#"{"jsonrpc":"2.0","error":{"code":-32020,"message":"hdr"}}"#;
        assert!(matches!(
            answer(uncorrelated, 3),
            Err(ServiceError::McpError(_))
        ));
        assert!(matches!(
            answer(b"not json", 1),
            Err(ServiceError::TransportSend(_))
        ));
        // Read as text after one UTF-8 check; bytes that fail it are still refused.
        assert!(matches!(
            answer(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"\xff\"}}",
                1
            ),
            Err(ServiceError::TransportSend(_))
        ));
        assert!(matches!(
            envelope(b"{\"id\":1,\"result\":{\"a\":\"\xc3\"}}"),
            Err(DirectError::Malformed(_))
        ));
    }

    #[test]
    fn contentless_results_read_as_empty_call_results() {
        let empty = contentless_call_result("{}").unwrap();
        assert!(empty.content.is_empty());
        let meta = contentless_call_result(r#"{"_meta":{"k":1}}"#).unwrap();
        assert_eq!(meta.meta.unwrap().0["k"], 1);
    }
}
