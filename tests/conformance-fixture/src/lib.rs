//! The backend the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! expects, written on rmcp and served on both MCP revisions from one endpoint.
//!
//! The suite calls fixed-name fixtures; this crate serves them with the content the
//! suite's reference server (`examples/servers/typescript/everything-server.ts`)
//! returns:
//!
//! - tools `test_simple_text`, `test_image_content`, `test_audio_content`,
//!   `test_embedded_resource`, `test_multiple_content_types`, `test_error_handling`,
//!   `test_tool_with_progress`, `test_tool_with_logging`, `json_schema_2020_12_tool`,
//!   `test_reconnection` (answers on the open stream: rmcp cannot close it mid-call);
//! - 2025-11-25 server-to-client requests: `test_sampling`, `test_elicitation`,
//!   `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums`;
//! - 2026-07-28 diagnostics: `test_custom_headers` (a parameter mirrored in the
//!   `Mcp-Param-Region` header, SEP-2243), `test_missing_capability` (`-32021` without the
//!   `sampling` capability), `test_streaming_elicitation`, `test_logging_tool` (logs
//!   only when the request carries `logLevel`), `test_trigger_tool_change` and
//!   `test_trigger_prompt_change` (notify open `subscriptions/listen` streams);
//! - the input-required (MRTR) tools `test_input_required_result_{elicitation,
//!   sampling, list_roots, request_state, multiple_inputs, multi_round,
//!   tampered_state, capabilities}` and the prompt `test_input_required_result_prompt`,
//!   with HMAC-sealed `requestState` ([`StateCodec`]);
//! - resources `test://static-text`, `test://static-binary`, `test://watched-resource`,
//!   the template `test://template/{id}/data`, `resources/subscribe` (2025-11-25) and
//!   `subscriptions/listen` (2026-07-28);
//! - prompts `test_simple_prompt`, `test_prompt_with_arguments(arg1, arg2)`,
//!   `test_prompt_with_embedded_resource(resourceUri)`, `test_prompt_with_image`;
//! - `completion/complete` and `logging/setLevel`.
//!
//! It is test tooling: it exists so the suite can be run against a backend directly
//! and through the gateway, and the two results compared.

// Logging, sampling and roots are deprecated by SEP-2577, yet both revisions this
// fixture serves still define them, and the suite exercises them.
#![allow(deprecated)]

mod state;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, InputRequests, InputRequiredResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, ReadResourceRequestParams, ReadResourceResponse, Reference,
    Resource, ResourceTemplate, ServerCapabilities, ServerConfig, ServerRequest,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

pub use state::StateCodec;

/// A 1×1 red PNG, as in the reference server.
pub const TEST_IMAGE_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file, as in the reference server.
pub const TEST_AUDIO_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// Convert fixture JSON into an rmcp model type. The JSON is written here, so a
/// mismatch is a bug in this crate, reported as an internal error.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value)
        .map_err(|e| ErrorData::internal_error(format!("fixture JSON does not fit: {e}"), None))
}

/// Like [`typed`] for a result, stamped `resultType: "complete"`: 2026-07-28 requires
/// it on every result and rmcp does not add it; rmcp strips it for 2025-11-25 peers.
fn complete<T: DeserializeOwned>(mut value: Value) -> Result<T, ErrorData> {
    if let Value::Object(map) = &mut value {
        map.insert("resultType".into(), json!("complete"));
    }
    typed(value)
}

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
fn tool_table() -> Vec<(&'static str, &'static str, Value)> {
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

fn prompt_table() -> Value {
    json!([
        {"name": "test_simple_prompt", "title": "Simple Test Prompt", "description": "A simple prompt without arguments"},
        {"name": "test_prompt_with_arguments", "title": "Prompt With Arguments", "description": "A prompt with required arguments",
         "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource", "description": "A prompt that includes an embedded resource",
         "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "title": "Prompt With Image", "description": "A prompt that includes image content"},
        {"name": "test_input_required_result_prompt", "description": "MRTR: prompt that requires elicitation input"}
    ])
}

fn resource_table() -> Value {
    json!([
        {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
         "description": "A static text resource for testing", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
         "description": "A static binary resource (image) for testing", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource",
         "description": "A resource clients can subscribe to", "mimeType": "text/plain"}
    ])
}

const TEMPLATE: &str = "test://template/{id}/data";

/// State shared by every session and stateless request of one fixture.
#[derive(Debug)]
struct Shared {
    tools: Vec<Tool>,
    prompts: Vec<Prompt>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    codec: StateCodec,
    /// Open `subscriptions/listen` streams, by a fixture-local key.
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
    next_listener: AtomicU64,
    /// Flipped by the trigger tools: the lists really change, so a gateway that only
    /// forwards actual changes passes the same checks as a direct connection.
    extra_tool: std::sync::atomic::AtomicBool,
    extra_prompt: std::sync::atomic::AtomicBool,
}

/// The conformance fixture's rmcp `ServerHandler`. Clones share one state.
#[derive(Debug, Clone)]
pub struct Fixture {
    shared: Arc<Shared>,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    /// A fixture with a fresh `requestState` key.
    pub fn new() -> Self {
        let tools = tool_table()
            .into_iter()
            .map(|(name, description, schema)| {
                let schema = match schema {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                Tool::new(name, description, Arc::new(schema))
            })
            .collect();
        let shared = Shared {
            tools,
            prompts: typed(prompt_table()).expect("prompt table fits the model"),
            resources: typed(resource_table()).expect("resource table fits the model"),
            templates: typed(json!([{
                "uriTemplate": TEMPLATE, "name": "template", "title": "Resource Template",
                "description": "A resource template with parameter substitution",
                "mimeType": "application/json"}]))
            .expect("template table fits the model"),
            codec: StateCodec::random(),
            listeners: Mutex::new(Vec::new()),
            next_listener: AtomicU64::new(0),
            extra_tool: std::sync::atomic::AtomicBool::new(false),
            extra_prompt: std::sync::atomic::AtomicBool::new(false),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Send a list change to every open listen stream that accepted it.
    async fn notify_listeners(&self, tools: bool) {
        let sinks: Vec<SubscriptionSink> = self
            .shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect();
        for sink in sinks {
            // A stream that did not ask for this kind refuses it; that is the filter.
            let _ = if tools {
                sink.notify_tool_list_changed().await
            } else {
                sink.notify_prompt_list_changed().await
            };
        }
    }
}

fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta.protocol_version().is_some()
}

fn text_result(text: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(complete::<rmcp::model::CallToolResult>(
        json!({"content": [{"type": "text", "text": text.into()}]}),
    )?
    .into())
}

fn elicit(message: &str, properties: Value, required: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}})
}

fn sample(text: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens}})
}

fn input_required(
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
fn elicit_answer<'a>(
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

fn string_field(content: &Map<String, Value>, field: &str) -> String {
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
    fn mrtr_tool(
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

    /// A 2025-11-25 server-to-client request on the caller's stream.
    async fn ask_client(ctx: &RequestContext<RoleServer>, request: Value) -> Result<Value, String> {
        let request: ServerRequest = serde_json::from_value(request).map_err(|e| e.to_string())?;
        let result = ctx
            .peer
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(result).map_err(|e| e.to_string())
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
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = typed(json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "logging": {},
            "completions": {}
        }))
        .expect("capabilities fit the model");
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "vmcp-conformance-fixture",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("The fixtures of the MCP conformance suite (test tooling).")
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn list_tools(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
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
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(response) = self.mrtr_tool(&params, &ctx) {
            return response;
        }
        let args = params.arguments.clone().unwrap_or_default();
        let arg = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
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
                if Self::may_log_info(&ctx) {
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
                        Self::log(&ctx, line).await;
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
                let answer = Self::ask_client(&ctx, sample(&arg("prompt"), 100)).await;
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
                let text = match Self::ask_client(&ctx, request).await {
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

    async fn list_prompts(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut prompts = self.shared.prompts.clone();
        if self.shared.extra_prompt.load(Ordering::Relaxed) {
            prompts.push(Prompt::new(
                "test_trigger_added_prompt",
                Some("Present while test_trigger_prompt_change has been called an odd number of times"),
                None,
            ));
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = params.arguments.clone().unwrap_or_default();
        let arg = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let messages = match params.name.as_str() {
            "test_simple_prompt" => json!([{"role": "user",
                "content": {"type": "text", "text": "This is a simple prompt for testing."}}]),
            "test_prompt_with_arguments" => json!([{"role": "user", "content": {"type": "text",
                "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))}}]),
            "test_prompt_with_embedded_resource" => json!([
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arg("resourceUri"), "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]),
            "test_prompt_with_image" => json!([
                {"role": "user", "content": {"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]),
            "test_input_required_result_prompt" => {
                match elicit_answer(&params.input_responses, "user_context")? {
                    Some(content) => json!([{"role": "user", "content": {"type": "text",
                        "text": format!("Prompt with context: {}", string_field(content, "context"))}}]),
                    None => {
                        let ask = json!({"user_context": elicit("What context should the prompt use?",
                            json!({"context": {"type": "string"}}), json!(["context"]))});
                        return Ok(input_required(ask, None)?.into());
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt: {other}"),
                    None,
                ));
            }
        };
        Ok(complete::<rmcp::model::GetPromptResult>(json!({"messages": messages}))?.into())
    }

    async fn list_resources(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            self.shared.resources.clone(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            self.shared.templates.clone(),
        ))
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = params.uri.as_str();
        let content = match uri {
            "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."}),
            "test://static-binary" => {
                json!({"uri": uri, "mimeType": "image/png", "blob": TEST_IMAGE_BASE64})
            }
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => json!({"uri": uri, "mimeType": "application/json",
                    "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
                None => {
                    // SEP-2164: rmcp turns -32002 into -32602 for 2026-07-28 requests.
                    return Err(ErrorData::resource_not_found(
                        format!("Resource not found: {uri}"),
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        Ok(complete::<rmcp::model::ReadResourceResult>(json!({"contents": [content]}))?.into())
    }

    async fn subscribe(
        &self,
        _params: SubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _params: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn set_level(
        &self,
        _params: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let candidates: &[&str] = match &params.r#ref {
            Reference::Prompt(p) if p.name == "test_prompt_with_arguments" => {
                &["paris", "park", "party"]
            }
            Reference::Resource(r) if r.uri == TEMPLATE => &["1", "2", "123"],
            _ => &[],
        };
        let values: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|v| v.starts_with(params.argument.value.as_str()))
            .collect();
        complete(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Everything is honoured; rmcp intersects this with what was requested.
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let key = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, context.sink().clone()));
        context.cancelled().await;
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(k, _)| *k != key);
        Ok(())
    }
}

/// A fixture serving on loopback; stopped on drop.
#[derive(Debug)]
pub struct RunningFixture {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl RunningFixture {
    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A token that stops the server when cancelled.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }
}

impl Drop for RunningFixture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve the fixture at `/mcp` on `addr` (port 0 picks a free one).
pub async fn serve(addr: SocketAddr) -> std::io::Result<RunningFixture> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let fixture = Fixture::new();
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    Ok(RunningFixture { addr, stop })
}
