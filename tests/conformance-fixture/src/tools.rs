//! The `tools/*` fixtures: the tool table the suite lists, and `tools/call` for every
//! tool except the input-required (MRTR) ones ([`crate::input_required`]).
//!
//! Kept apart from the other primitives because it is most of the suite: content
//! types, errors, progress, logging, the 2025-11-25 server-to-client requests and the
//! 2026-07-28 diagnostics, each answered with the reference server's content.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use crate::client_requests::{Asked, ask_either, elicit, sample};
use crate::{Fixture, TEST_AUDIO_BASE64, TEST_IMAGE_BASE64, complete, typed};

fn empty_object_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The raw JSON Schema 2020-12 of `json_schema_2020_12_tool` (SEP-1613, SEP-2106).
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

fn string_arg_schema(name: &str, description: &str) -> Value {
    json!({"type": "object", "properties": {name: {"type": "string", "description": description}}, "required": [name]})
}

/// Every tool: name, description, input schema.
pub(crate) fn table() -> Vec<(&'static str, &'static str, Value)> {
    let none = empty_object_schema;
    vec![
        (
            "test_simple_text",
            "Tests simple text content response",
            none(),
        ),
        ("test_image_content", "Tests image content response", none()),
        ("test_audio_content", "Tests audio content response", none()),
        (
            "test_embedded_resource",
            "Tests embedded resource content response",
            none(),
        ),
        (
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            none(),
        ),
        (
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            none(),
        ),
        (
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            none(),
        ),
        (
            "test_error_handling",
            "Tests error response handling",
            none(),
        ),
        (
            "test_reconnection",
            "SEP-1699 polling; answers on the open stream (rmcp cannot close it mid-call)",
            none(),
        ),
        (
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            string_arg_schema("prompt", "The prompt to send to the LLM"),
        ),
        (
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            string_arg_schema("message", "The message to show the user"),
        ),
        (
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            none(),
        ),
        (
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            none(),
        ),
        (
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json_schema_2020_12(),
        ),
        (
            "test_custom_headers",
            "Echoes a parameter clients mirror in the Mcp-Param-Region header (SEP-2243)",
            json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region",
                "description": "Sent in the body and in the Mcp-Param-Region header"}}, "required": ["region"]}),
        ),
        (
            "test_missing_capability",
            "Test tool requiring sampling",
            none(),
        ),
        (
            "test_streaming_elicitation",
            "Diagnostic tool validating response progress streams",
            none(),
        ),
        (
            "test_logging_tool",
            "Diagnostic logging validator tool",
            none(),
        ),
        (
            "test_trigger_tool_change",
            "Notifies open subscriptions/listen streams that the tool list changed",
            none(),
        ),
        (
            "test_trigger_prompt_change",
            "Notifies open subscriptions/listen streams that the prompt list changed",
            none(),
        ),
        (
            "test_input_required_result_elicitation",
            "MRTR: returns InputRequiredResult with elicitation request",
            none(),
        ),
        (
            "test_input_required_result_sampling",
            "MRTR: returns InputRequiredResult with sampling request",
            none(),
        ),
        (
            "test_input_required_result_list_roots",
            "MRTR: returns InputRequiredResult with roots/list request",
            none(),
        ),
        (
            "test_input_required_result_request_state",
            "MRTR: returns InputRequiredResult with requestState",
            none(),
        ),
        (
            "test_input_required_result_multiple_inputs",
            "MRTR: returns InputRequiredResult with multiple input requests",
            none(),
        ),
        (
            "test_input_required_result_multi_round",
            "MRTR: multi-round InputRequiredResult workflow",
            none(),
        ),
        (
            "test_input_required_result_tampered_state",
            "MRTR: HMAC-signed requestState integrity test",
            none(),
        ),
        (
            "test_input_required_result_capabilities",
            "MRTR: respects client capabilities in inputRequests",
            none(),
        ),
    ]
}

impl Fixture {
    /// `tools/list`: the table, plus `test_trigger_added_tool` while toggled on.
    pub(crate) fn tool_list(&self) -> ListToolsResult {
        let mut tools = self.shared.tools.clone();
        if self.shared.extra_tool.load(Ordering::Relaxed) {
            tools.push(Tool::new(
                "test_trigger_added_tool",
                "Present while test_trigger_tool_change has been called an odd number of times",
                Arc::new(
                    json!({"type": "object", "properties": {}})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ),
            ));
        }
        ListToolsResult::with_all_items(tools)
    }

    /// `tools/call`: the input-required tools first, then the rest.
    pub(crate) async fn tool_call(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(response) = self.input_required_tool(&params, &ctx) {
            return response;
        }
        let args = params.arguments.clone().unwrap_or_default();
        let arg = |key: &str| crate::str_arg(&args, key);
        let content = match params.name.as_ref() {
            "test_simple_text" => {
                json!([{"type": "text", "text": "This is a simple text response for testing."}])
            }
            "test_image_content" => {
                json!([{"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"}])
            }
            "test_audio_content" => {
                json!([{"type": "audio", "data": TEST_AUDIO_BASE64, "mimeType": "audio/wav"}])
            }
            "test_embedded_resource" => json!([{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]),
            "test_multiple_content_types" => json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ]),
            "test_error_handling" => {
                return Ok(complete::<rmcp::model::CallToolResult>(json!({"isError": true,
                    "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}]}))?
                .into());
            }
            "test_custom_headers" => {
                json!([{"type": "text", "text": format!("region: {}", arg("region"))}])
            }
            "test_reconnection" => json!([{"type": "text",
                "text": "Reconnection test completed on the original stream."}]),
            "json_schema_2020_12_tool" => json!([{"type": "text",
                "text": format!("JSON Schema 2020-12 tool called with: {}", Value::Object(args.clone()))}]),
            "test_tool_with_progress" | "test_streaming_elicitation" => {
                let steps: &[f64] = if params.name == "test_tool_with_progress" {
                    &[0.0, 50.0, 100.0]
                } else {
                    &[50.0]
                };
                let token = ctx.meta.get_progress_token();
                if let Some(token) = &token {
                    for &step in steps {
                        let note = ProgressNotificationParam::new(token.clone(), step)
                            .with_total(100.0)
                            .with_message(format!("Completed step {step} of 100"));
                        let _ = ctx.peer.notify_progress(note).await;
                    }
                }
                let text = match token {
                    Some(token) => format!("progress reported for token {}", json!(token.0)),
                    None => "completed without a progress token".to_owned(),
                };
                json!([{"type": "text", "text": text}])
            }
            "test_tool_with_logging" | "test_logging_tool" => {
                if may_log_info(&ctx) {
                    let lines: &[&str] = if params.name == "test_tool_with_logging" {
                        &[
                            "Tool execution started",
                            "Tool processing data",
                            "Tool execution completed",
                        ]
                    } else {
                        &["Diagnostic trace logging activated"]
                    };
                    for line in lines {
                        log(&ctx, line).await;
                    }
                }
                json!([{"type": "text", "text": "Tool with logging executed successfully"}])
            }
            "test_missing_capability" => {
                let caps = ctx.client_capabilities().unwrap_or_default();
                if caps.sampling.is_none() {
                    let required: rmcp::model::ClientCapabilities = typed(json!({"sampling": {}}))?;
                    return Err(ErrorData::missing_required_client_capability(required));
                }
                json!([{"type": "text", "text": "Success"}])
            }
            "test_trigger_tool_change" | "test_trigger_prompt_change" => {
                let tools = params.name == "test_trigger_tool_change";
                let flag = if tools {
                    &self.shared.extra_tool
                } else {
                    &self.shared.extra_prompt
                };
                flag.fetch_xor(true, Ordering::Relaxed);
                self.notify_listeners(tools).await;
                json!([{"type": "text", "text": "Mutation triggered"}])
            }
            "test_sampling" => {
                let request = sample(&arg("prompt"), 100);
                let responses = &params.input_responses;
                let sampling = |c: &ClientCapabilities| c.sampling.is_some();
                let answer =
                    match ask_either(&ctx, responses, "sampling", sampling, request).await? {
                        Asked::Answer(answer) => answer,
                        Asked::Pending(input_required) => return Ok(input_required.into()),
                    };
                let text = match answer {
                    Ok(result) => format!(
                        "LLM response: {}",
                        result["content"]["text"].as_str().unwrap_or("No response")
                    ),
                    Err(e) => format!("Sampling not supported or error: {e}"),
                };
                json!([{"type": "text", "text": text}])
            }
            "test_elicitation"
            | "test_elicitation_sep1034_defaults"
            | "test_elicitation_sep1330_enums" => {
                let request = match params.name.as_ref() {
                    "test_elicitation" => elicit(
                        &arg("message"),
                        json!({"response": {"type": "string", "description": "User's response"}}),
                        json!(["response"]),
                    ),
                    "test_elicitation_sep1034_defaults" => elicit(
                        "Please review and update the form fields with defaults",
                        json!({
                            "name": {"type": "string", "description": "User name", "default": "John Doe"},
                            "age": {"type": "integer", "description": "User age", "default": 30},
                            "score": {"type": "number", "description": "User score", "default": 95.5},
                            "status": {"type": "string", "description": "User status",
                                "enum": ["active", "inactive", "pending"], "default": "active"},
                            "verified": {"type": "boolean", "description": "Verification status", "default": true}
                        }),
                        json!([]),
                    ),
                    _ => elicit(
                        "Please select options from the enum fields",
                        json!({
                            "untitledSingle": {"type": "string", "description": "Select one option",
                                "enum": ["option1", "option2", "option3"]},
                            "titledSingle": {"type": "string", "description": "Select one option with titles",
                                "oneOf": [{"const": "value1", "title": "First Option"},
                                          {"const": "value2", "title": "Second Option"},
                                          {"const": "value3", "title": "Third Option"}]},
                            "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                "enum": ["opt1", "opt2", "opt3"],
                                "enumNames": ["Option One", "Option Two", "Option Three"]},
                            "untitledMulti": {"type": "array", "description": "Select multiple options",
                                "minItems": 1, "maxItems": 3,
                                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                            "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                "minItems": 1, "maxItems": 3,
                                "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                    {"const": "value2", "title": "Second Choice"},
                                                    {"const": "value3", "title": "Third Choice"}]}}
                        }),
                        json!([]),
                    ),
                };
                let responses = &params.input_responses;
                let elicitation = |c: &ClientCapabilities| c.elicitation.is_some();
                let answer =
                    match ask_either(&ctx, responses, "elicitation", elicitation, request).await? {
                        Asked::Answer(answer) => answer,
                        Asked::Pending(input_required) => return Ok(input_required.into()),
                    };
                let text = match answer {
                    Ok(result) => format!(
                        "User response: action={}, content={}",
                        result["action"].as_str().unwrap_or("unknown"),
                        result.get("content").cloned().unwrap_or(json!({}))
                    ),
                    Err(e) => format!("Elicitation not supported or error: {e}"),
                };
                json!([{"type": "text", "text": text}])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool: {other}"),
                    None,
                ));
            }
        };
        Ok(complete::<rmcp::model::CallToolResult>(json!({"content": content}))?.into())
    }
}

fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta.protocol_version().is_some()
}

async fn log(ctx: &RequestContext<RoleServer>, message: &str) {
    let note: Result<LoggingMessageNotificationParam, _> =
        typed(json!({"level": "info", "logger": "conformance-fixture", "data": message}));
    if let Ok(note) = note {
        let _ = ctx.peer.notify_logging_message(note).await;
    }
}

/// Whether a request may be sent `notifications/message` at `info`: always in a
/// 2025-11-25 session, and on 2026-07-28 only when `_meta` asks for a level at or
/// below `info`.
fn may_log_info(ctx: &RequestContext<RoleServer>) -> bool {
    if !is_modern(ctx) {
        return true;
    }
    matches!(
        ctx.meta.log_level(),
        Some(LoggingLevel::Debug | LoggingLevel::Info)
    )
}
