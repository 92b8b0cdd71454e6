//! Small in-process MCP backends: the embedded default's demo servers, and the fast
//! backends of the test suite.
//!
//! A [`DemoBackend`] serves whatever its [`DemoSpec`] lists on both MCP revisions
//! (rmcp's streamable HTTP server). Tools behave predictably so callers can tell
//! which backend answered: `echo {text}` returns `"<backend>: <text>"`, `add {a,b}`
//! the sum, `upper {text}` the upper-cased text, `whoami` the backend name, `traceparent` the W3C
//! `traceparent` it received in `_meta` (or `none`), `fail`
//! an error result, and any other tool `"<backend>/<tool>"`.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
    ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// What a demo backend offers.
#[derive(Debug, Clone, Default)]
pub struct DemoSpec {
    /// Server name (also what `whoami` answers).
    pub name: String,
    /// Tool names.
    pub tools: Vec<String>,
    /// Resource URIs.
    pub resources: Vec<String>,
    /// Resource template strings.
    pub templates: Vec<String>,
    /// Prompt names (each takes an optional `topic` argument).
    pub prompts: Vec<String>,
    /// Page size of this backend's own lists (`None`: one page).
    pub page_size: Option<usize>,
    /// Serve only MCP 2025-11-25 (no `server/discover`), like an older server.
    pub legacy_only: bool,
}

impl DemoSpec {
    /// A spec with `name` and the given tools.
    pub fn new(name: &str, tools: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            tools: tools.iter().map(|t| t.to_string()).collect(),
            ..Self::default()
        }
    }
}

/// The handler of a demo backend.
#[derive(Debug, Clone)]
pub struct DemoBackend {
    spec: Arc<std::sync::RwLock<DemoSpec>>,
    hub: Arc<Hub>,
}

/// Who to notify: Legacy sessions and Modern listen streams.
#[derive(Debug, Default)]
struct Hub {
    legacy: std::sync::Mutex<Vec<rmcp::Peer<RoleServer>>>,
    /// Keyed by registration: a sink's own id is only unique within its
    /// connection, and several gateways (replicas) listen at once.
    modern: std::sync::Mutex<Vec<(u64, rmcp::service::SubscriptionSink)>>,
    registered: std::sync::atomic::AtomicU64,
    sent: std::sync::atomic::AtomicU64,
    /// URIs Legacy clients (the gateway) are subscribed to.
    subscribed: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

mod control;
pub use control::{DemoControl, DemoList};

fn schema(tool: &str) -> Arc<Map<String, Value>> {
    let schema = match tool {
        "add" => {
            json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})
        }
        "echo" | "upper" => {
            json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})
        }
        _ => json!({"type":"object","properties":{}}),
    };
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn paginate<T: Clone>(
    items: &[T],
    page_size: Option<usize>,
    params: &Option<PaginatedRequestParams>,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let start = match params.as_ref().and_then(|p| p.cursor.as_deref()) {
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| ErrorData::invalid_params("bad cursor", None))?,
        None => 0,
    };
    let size = page_size.unwrap_or(usize::MAX);
    let end = start.saturating_add(size).min(items.len());
    let start = start.min(end);
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

fn text_arg(args: &Option<Map<String, Value>>, key: &str) -> String {
    args.as_ref()
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl DemoBackend {
    /// A backend serving `spec`.
    pub fn new(spec: DemoSpec) -> Self {
        Self {
            spec: Arc::new(std::sync::RwLock::new(spec)),
            hub: Arc::default(),
        }
    }

    /// A handle that changes this backend at runtime.
    pub fn control(&self) -> DemoControl {
        DemoControl {
            spec: self.spec.clone(),
            hub: self.hub.clone(),
        }
    }

    fn spec(&self) -> DemoSpec {
        self.spec.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn tool_list(&self) -> Vec<Tool> {
        let spec = self.spec();
        spec.tools
            .iter()
            .map(|t| Tool::new(t.clone(), format!("{} on {}", t, spec.name), schema(t)))
            .collect()
    }
}

impl ServerHandler for DemoBackend {
    fn get_info(&self) -> ServerConfig {
        let spec = self.spec();
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .build();
        ServerConfig::new(caps).with_server_info(Implementation::new(spec.name, "1.0.0"))
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        if self.spec().legacy_only {
            std::borrow::Cow::Owned(vec![rmcp::model::ProtocolVersion::V_2025_11_25])
        } else {
            std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn on_initialized(&self, ctx: rmcp::service::NotificationContext<RoleServer>) {
        self.hub
            .legacy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ctx.peer);
    }

    #[allow(deprecated)] // the Legacy subscription mechanism
    async fn subscribe(
        &self,
        params: rmcp::model::SubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.hub
            .subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(params.uri);
        Ok(())
    }

    #[allow(deprecated)] // the Legacy subscription mechanism
    async fn unsubscribe(
        &self,
        params: rmcp::model::UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.hub
            .subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&params.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, ctx: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let sink = ctx.sink().clone();
        let key = self
            .hub
            .registered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.hub
            .modern
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, sink));
        ctx.cancelled().await;
        self.hub
            .modern
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(k, _)| *k != key);
        Ok(())
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (tools, next) = paginate(&self.tool_list(), self.spec().page_size, &params)?;
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next;
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_list().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let spec = self.spec();
        if !spec.tools.iter().any(|t| *t == params.name) {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", params.name),
                None,
            ));
        }
        let args = &params.arguments;
        let text = match params.name.as_ref() {
            "echo" => format!("{}: {}", spec.name, text_arg(args, "text")),
            "upper" => text_arg(args, "text").to_uppercase(),
            "whoami" => spec.name.clone(),
            "traceparent" => ctx.meta.0.get_traceparent().unwrap_or("none").to_owned(),
            "add" => {
                let n = |k: &str| args.as_ref().and_then(|a| a.get(k)).and_then(Value::as_i64);
                match (n("a"), n("b")) {
                    (Some(a), Some(b)) => (a + b).to_string(),
                    _ => {
                        return Ok(CallToolResult::error(vec![ContentBlock::text(
                            "add needs integers a and b",
                        )])
                        .into());
                    }
                }
            }
            "fail" => {
                return Ok(
                    CallToolResult::error(vec![ContentBlock::text("failed on purpose")]).into(),
                );
            }
            // A result carrying `_meta` keys of every kind: reserved ones a backend
            // must not pass to the gateway's caller, an end-to-end one and its own.
            "stamped" => {
                let mut result = CallToolResult::success(vec![ContentBlock::text("stamped")]);
                result.structured_content = Some(json!({"n": 1, "s": "é \"q\""}));
                result.meta = Some(stamped_meta());
                return Ok(result.into());
            }
            // Tool output that is not an object (SEP-2106): a caller before 2026-07-28
            // gets it in the content instead.
            "scalar" => {
                let mut result = CallToolResult::success(vec![ContentBlock::text("scalar")]);
                result.structured_content = Some(json!([1, "two"]));
                return Ok(result.into());
            }
            other => format!("{}/{}", spec.name, other),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let spec = self.spec();
        let all: Vec<Resource> = spec
            .resources
            .iter()
            .map(|u| Resource::new(u.clone(), format!("{u} ({})", spec.name)))
            .collect();
        let (items, next) = paginate(&all, spec.page_size, &params)?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let spec = self.spec();
        let all: Vec<ResourceTemplate> = spec
            .templates
            .iter()
            .map(|t| ResourceTemplate::new(t.clone(), format!("template on {}", spec.name)))
            .collect();
        let (items, next) = paginate(&all, spec.page_size, &params)?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let spec = self.spec();
        let known = spec.resources.contains(&params.uri)
            || spec.templates.iter().any(|t| {
                let prefix = t.split('{').next().unwrap_or_default();
                params.uri.starts_with(prefix)
            });
        if !known {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", params.uri),
                None,
            ));
        }
        let text = format!("{} from {}", params.uri, spec.name);
        let stamped = params.uri.ends_with("/stamped");
        let mut result = ReadResourceResult::new(vec![ResourceContents::text(text, params.uri)]);
        if stamped {
            result.meta = Some(stamped_meta());
        }
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let spec = self.spec();
        let all: Vec<Prompt> = spec
            .prompts
            .iter()
            .map(|p| {
                Prompt::new(
                    p.clone(),
                    Some(format!("prompt on {}", spec.name)),
                    Some(vec![PromptArgument::new("topic")]),
                )
            })
            .collect();
        let (items, next) = paginate(&all, spec.page_size, &params)?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let spec = self.spec();
        if !spec.prompts.contains(&params.name) {
            return Err(ErrorData::invalid_params(
                format!("no prompt {}", params.name),
                None,
            ));
        }
        let topic = text_arg(&params.arguments.map(|a| a.into_iter().collect()), "topic");
        let text = format!("{} from {} about {}", params.name, spec.name, topic);
        let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]);
        if params.name == "stamped" {
            result.meta = Some(stamped_meta());
        }
        Ok(result.into())
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let spec = self.spec();
        let owner = match &params.r#ref {
            Reference::Prompt(p) => spec.prompts.contains(&p.name),
            Reference::Resource(r) => spec.templates.contains(&r.uri),
            _ => false,
        };
        let values: Vec<String> = if owner {
            ["alpha", "beta", "gamma"]
                .iter()
                .map(|v| format!("{v}-{}", spec.name))
                .filter(|v| v.starts_with(&params.argument.value))
                .collect()
        } else {
            Vec::new()
        };
        Ok(CompleteResult::new(
            CompletionInfo::new(values).unwrap_or_default(),
        ))
    }
}

/// The `_meta` of the `stamped` tool's, prompt's and resource's results: keys of
/// every kind, reserved ones a backend must not pass to the gateway's caller (a
/// forged `serverInfo`), an end-to-end one and the backend's own.
fn stamped_meta() -> rmcp::model::MetaObject {
    let meta = json!({
        "io.modelcontextprotocol/serverInfo": {"name": "forged", "version": "0"},
        "io.modelcontextprotocol/related-task": {"taskId": "t-1"},
        "demo/own": [1, 2],
    });
    rmcp::model::MetaObject(meta.as_object().cloned().unwrap_or_default())
}

/// A demo backend listening on loopback.
#[derive(Debug)]
pub struct RunningDemo {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: CancellationToken,
    control: DemoControl,
}

impl RunningDemo {
    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A handle that changes the backend at runtime and announces it.
    pub fn control(&self) -> &DemoControl {
        &self.control
    }

    /// Stop serving (open connections are closed).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for RunningDemo {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `spec` on `127.0.0.1:<port>` (0 picks a free port).
pub async fn spawn(spec: DemoSpec, port: u16) -> std::io::Result<RunningDemo> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    // Without TCP_NODELAY a response's last write waits for the delayed ACK (~40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let stop = CancellationToken::new();
    let backend = DemoBackend::new(spec);
    let control = backend.control();
    let service: StreamableHttpService<DemoBackend, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(backend.clone()),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .with_cancellation_token(stop.child_token()),
        );
    let app = axum::Router::new().nest_service("/mcp", service);
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    Ok(RunningDemo {
        addr,
        stop,
        control,
    })
}
