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
//!   `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums` (asked on
//!   2026-07-28 too, as `input_required` when the request declares the capability);
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
//!
//! One module per thing served: `tools`, `input_required` (the MRTR tools), `prompts`,
//! `resources`, `completion`, `subscriptions` (the `subscriptions/listen` streams),
//! `client_requests` (elicitation and sampling requests), `state` (the sealed
//! `requestState`) and `http` (the server). This file holds the shared state and routes
//! each `ServerHandler` method to the module that serves it.

// Logging, sampling and roots are deprecated by SEP-2577, yet both revisions this
// fixture serves still define them, and the suite exercises them.
#![allow(deprecated)]

mod client_requests;
mod completion;
mod http;
mod input_required;
mod prompts;
mod resources;
mod state;
mod subscriptions;
mod tools;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    Prompt, ReadResourceRequestParams, ReadResourceResponse, Resource, ResourceTemplate,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

pub use http::{RunningFixture, serve};
pub use state::StateCodec;

/// A 1×1 red PNG, as in the reference server.
pub const TEST_IMAGE_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file, as in the reference server.
pub const TEST_AUDIO_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// A string argument of a tool or prompt call, empty when absent or not a string.
fn str_arg(args: &Map<String, Value>, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

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
        let tools = tools::table()
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
            prompts: typed(prompts::table()).expect("prompt table fits the model"),
            resources: typed(resources::table()).expect("resource table fits the model"),
            templates: typed(resources::template_table()).expect("template table fits the model"),
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
        Ok(self.tool_list())
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.tool_call(params, ctx).await
    }

    async fn list_prompts(
        &self,
        _params: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(self.prompt_list())
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompts::get(params)
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
        resources::read(params)
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
        completion::complete_argument(params)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Everything is honoured; rmcp intersects this with what was requested.
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listen_until_cancelled(context).await
    }
}
