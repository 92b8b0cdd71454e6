//! The input-required (MRTR, SEP-2322) fixtures of 2026-07-28: the
//! `test_input_required_result_*` tools, and the answer helpers the
//! `test_input_required_result_prompt` prompt shares.
//!
//! A separate module because these requests are stateless round trips: the fixture
//! asks for input, the client calls again with `inputResponses` and the HMAC-sealed
//! `requestState` ([`crate::StateCodec`]), which is checked here.

use rmcp::model::{CallToolRequestParams, CallToolResponse, InputRequests, InputRequiredResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value, json};

use crate::client_requests::{elicit, sample};
use crate::{Fixture, complete, typed};

/// A complete tool result with one text item.
fn text_result(text: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(complete::<rmcp::model::CallToolResult>(
        json!({"content": [{"type": "text", "text": text.into()}]}),
    )?
    .into())
}

/// An `InputRequiredResult` asking for `requests` (keyed JSON requests), with `state`.
pub(crate) fn input_required(
    requests: Value,
    state: Option<String>,
) -> Result<InputRequiredResult, ErrorData> {
    let requests: InputRequests = typed(requests)?;
    Ok(InputRequiredResult::new(Some(requests), state))
}

/// The client's answer to input request `key`, which must be an accepted
/// `ElicitResult` (`{"action": "accept", "content": {...}}`).
///
/// `Ok(None)`: no answer under `key`, so ask again. `Err`: an answer that is not an
/// `ElicitResult` at all, which is a protocol error.
pub(crate) fn elicit_answer<'a>(
    responses: &'a Option<rmcp::model::InputResponses>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ErrorData> {
    let Some(answer) = responses.as_ref().and_then(|r| r.get(key)) else {
        return Ok(None);
    };
    let valid = answer.get("action").and_then(Value::as_str).is_some();
    if !valid {
        return Err(ErrorData::invalid_params(
            format!("inputResponses.{key} is not an ElicitResult"),
            Some(json!({"key": key})),
        ));
    }
    let content = answer.get("content").and_then(Value::as_object);
    Ok(Some(content.unwrap_or_else(|| EMPTY.get_or_init(Map::new))))
}

static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();

/// `field` of an accepted elicitation's content as a string (`"unknown"` if absent).
pub(crate) fn string_field(content: &Map<String, Value>, field: &str) -> String {
    content
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned()
}

/// Any JSON object answer under `key` (sampling and roots results).
fn object_answer<'a>(
    responses: &'a Option<rmcp::model::InputResponses>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ErrorData> {
    match responses.as_ref().and_then(|r| r.get(key)) {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(ErrorData::invalid_params(
            format!("inputResponses.{key} is not an object"),
            Some(json!({"key": key})),
        )),
    }
}

impl Fixture {
    fn open_state(&self, state: &Option<String>) -> Result<Option<Value>, ErrorData> {
        match state {
            None => Ok(None),
            Some(sealed) => self.shared.codec.open(sealed).map(Some).ok_or_else(|| {
                ErrorData::invalid_params("requestState integrity check failed", None)
            }),
        }
    }

    fn seal(&self, state: Value) -> Option<String> {
        Some(self.shared.codec.seal(&state))
    }

    fn nonce() -> u64 {
        getrandom::u64().unwrap_or_default()
    }

    /// The input-required (MRTR) tools; `None` when `name` is not one of them.
    pub(crate) fn input_required_tool(
        &self,
        params: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let responses = &params.input_responses;
        let result = (|| -> Result<CallToolResponse, ErrorData> {
            match params.name.as_ref() {
                "test_input_required_result_elicitation" => {
                    if let Some(content) = elicit_answer(responses, "user_name")? {
                        return text_result(format!("Hello, {}!", string_field(content, "name")));
                    }
                    let ask = json!({"user_name": elicit("What is your name?",
                        json!({"name": {"type": "string"}}), json!(["name"]))});
                    Ok(input_required(ask, None)?.into())
                }
                "test_input_required_result_sampling" => {
                    if let Some(answer) = object_answer(responses, "sample_request")? {
                        let text = answer
                            .get("content")
                            .and_then(|c| c.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or("no response");
                        return text_result(format!("Sampling result: {text}"));
                    }
                    let ask =
                        json!({"sample_request": sample("What is the capital of France?", 100)});
                    Ok(input_required(ask, None)?.into())
                }
                "test_input_required_result_list_roots" => {
                    if let Some(answer) = object_answer(responses, "roots_request")? {
                        let roots = answer
                            .get("roots")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len);
                        return text_result(format!("Found {roots} root(s)"));
                    }
                    let ask = json!({"roots_request": {"method": "roots/list", "params": {}}});
                    Ok(input_required(ask, None)?.into())
                }
                "test_input_required_result_request_state" => {
                    let state = self.open_state(&params.request_state)?;
                    if let (Some(state), Some(content)) =
                        (state, elicit_answer(responses, "confirm")?)
                        && state["kind"] == "request-state"
                        && content.get("ok") == Some(&Value::Bool(true))
                    {
                        return text_result("state-ok: requestState validated");
                    }
                    let ask = json!({"confirm": elicit("Please confirm",
                        json!({"ok": {"type": "boolean"}}), json!(["ok"]))});
                    let state = self.seal(json!({"kind": "request-state", "nonce": Self::nonce()}));
                    Ok(input_required(ask, state)?.into())
                }
                "test_input_required_result_multiple_inputs" => {
                    let state = self.open_state(&params.request_state)?;
                    let name = elicit_answer(responses, "user_name")?;
                    let greeting = object_answer(responses, "greeting")?;
                    let roots = object_answer(responses, "client_roots")?;
                    if let (Some(state), Some(name), Some(greeting), Some(roots)) =
                        (state, name, greeting, roots)
                        && state["kind"] == "multiple-inputs"
                    {
                        let greeting = greeting
                            .get("content")
                            .and_then(|c| c.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or("Hello there!");
                        let roots = roots
                            .get("roots")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len);
                        return text_result(format!(
                            "Name: {}; Greeting: {greeting}; Roots: {roots}",
                            string_field(name, "name")
                        ));
                    }
                    let ask = json!({
                        "user_name": elicit("What is your name?", json!({"name": {"type": "string"}}), json!(["name"])),
                        "greeting": sample("Generate a greeting", 50),
                        "client_roots": {"method": "roots/list", "params": {}}
                    });
                    let state =
                        self.seal(json!({"kind": "multiple-inputs", "nonce": Self::nonce()}));
                    Ok(input_required(ask, state)?.into())
                }
                "test_input_required_result_multi_round" => {
                    let state = self.open_state(&params.request_state)?;
                    let round = state.as_ref().and_then(|s| s["round"].as_u64());
                    if round == Some(1)
                        && let Some(content) = elicit_answer(responses, "step1")?
                    {
                        let name = string_field(content, "name");
                        let ask = json!({"step2": elicit("Step 2: What is your favorite color?",
                            json!({"color": {"type": "string"}}), json!(["color"]))});
                        let state =
                            self.seal(json!({"round": 2, "name": name, "nonce": Self::nonce()}));
                        return Ok(input_required(ask, state)?.into());
                    }
                    if round == Some(2)
                        && let Some(content) = elicit_answer(responses, "step2")?
                    {
                        let name = state
                            .as_ref()
                            .and_then(|s| s["name"].as_str())
                            .unwrap_or("friend")
                            .to_owned();
                        let color = string_field(content, "color");
                        return text_result(format!(
                            "Multi-round complete for {name} who likes {color}"
                        ));
                    }
                    let ask = json!({"step1": elicit("Step 1: What is your name?",
                        json!({"name": {"type": "string"}}), json!(["name"]))});
                    let state = self.seal(json!({"round": 1, "nonce": Self::nonce()}));
                    Ok(input_required(ask, state)?.into())
                }
                "test_input_required_result_tampered_state" => {
                    let state = self.open_state(&params.request_state)?;
                    if let (Some(state), Some(_)) = (state, elicit_answer(responses, "confirm")?)
                        && state["kind"] == "tamper-test"
                    {
                        return text_result("integrity-ok: state verified");
                    }
                    let ask = json!({"confirm": elicit("Please confirm",
                        json!({"ok": {"type": "boolean"}}), json!(["ok"]))});
                    let state = self.seal(json!({"kind": "tamper-test", "nonce": Self::nonce()}));
                    Ok(input_required(ask, state)?.into())
                }
                "test_input_required_result_capabilities" => {
                    if let Some(responses) = responses
                        && !responses.is_empty()
                    {
                        let keys: Vec<&str> = responses.keys().map(String::as_str).collect();
                        return text_result(format!(
                            "capabilities-ok: received {}",
                            keys.join(",")
                        ));
                    }
                    let caps = ctx.client_capabilities().unwrap_or_default();
                    let mut ask = Map::new();
                    if caps.elicitation.is_some() {
                        ask.insert(
                            "elicit_input".into(),
                            elicit(
                                "Elicitation input",
                                json!({"value": {"type": "string"}}),
                                json!(["value"]),
                            ),
                        );
                    }
                    if caps.sampling.is_some() {
                        ask.insert("sample_input".into(), sample("Sample request", 50));
                    }
                    if ask.is_empty() {
                        return text_result("No supported capabilities declared");
                    }
                    let state =
                        self.seal(json!({"kind": "capabilities-test", "nonce": Self::nonce()}));
                    Ok(input_required(Value::Object(ask), state)?.into())
                }
                _ => Err(ErrorData::method_not_found::<
                    rmcp::model::CallToolRequestMethod,
                >()),
            }
        })();
        match result {
            Err(e) if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND => None,
            other => Some(other),
        }
    }
}
