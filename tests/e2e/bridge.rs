//! A Legacy (2025-11-25) backend's requests to the client during a call
//! (`elicitation/create`, `sampling/createMessage`) reach the caller that made the
//! call, on both client revisions: a Legacy caller over its session, a Modern caller
//! as `input_required` with a sealed `requestState` (the backend call is parked). Real
//! Python SDK clients through the gateway to server-everything; raw HTTP for the
//! sealed state; an in-process rmcp Legacy backend that records the cancellation of a
//! reaped parked call.
#![allow(deprecated)] // Elicitation types travel with deprecated siblings in rmcp.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, ContentBlock,
    ElicitRequest, ElicitRequestParams, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, ServerRequest, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use vmcp_tests::{
    EverythingMode, config, eventually, everything, gateway, parse_jsonrpc_body, serve_on_loopback,
};

/// Run `tests/peers/py_forwarding.py` against `url` with `plan`.
async fn clients(url: &str, plan: Value) -> Value {
    vmcp_tests::run_py_plan("py_forwarding.py", url, &plan).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_backends_requests_reach_only_the_caller_that_made_the_call() {
    let ev = everything(EverythingMode::StreamableHttp).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: ev, url: '{}'}}\n",
        ev.url
    )))
    .await;
    // Two callers per revision, all at once on one backend; each answers with its
    // own tag and asks with its own prompt.
    let client = |mode: &str, tag: &str| {
        json!({"mode": mode, "elicit": {"name": format!("name-{tag}")},
        "sample": format!("sampled-{tag}"), "roots": [format!("file:///{tag}")],
        "calls": [
            {"tool": "ev_trigger-elicitation-request", "arguments": {}},
            {"tool": "ev_trigger-sampling-request",
             "arguments": {"prompt": format!("prompt-{tag}"), "maxTokens": 5}},
            // server-everything asks for roots outside the call's stream: the
            // gateway's policy answers (no roots), not the caller.
            {"tool": "ev_get-roots-list", "arguments": {}}
        ]})
    };
    let tags = ["leg1", "mod1", "leg2", "mod2"];
    let report = clients(
        &gw.url(),
        json!({"clients": [
            client("legacy", tags[0]), client("2026-07-28", tags[1]),
            client("legacy", tags[2]), client("2026-07-28", tags[3])
        ]}),
    )
    .await;
    for (i, tag) in tags.iter().enumerate() {
        let c = &report["clients"][i];
        let expected = if tag.starts_with("leg") {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(c["protocol"], expected, "{report}");
        // The client's answers reached the backend: it reports them in its result.
        let elicited = c["calls"][0]["text"].as_str().unwrap_or_default();
        assert!(
            elicited.contains(&format!("- Name: name-{tag}")),
            "{tag}: {report}"
        );
        let sampled = c["calls"][1]["text"].as_str().unwrap_or_default();
        assert!(
            sampled.contains(&format!("sampled-{tag}")),
            "{tag}: {report}"
        );
        let roots = c["calls"][2]["text"].as_str().unwrap_or_default();
        assert!(
            roots.contains("no roots are currently configured"),
            "{tag}: {report}"
        );
        // Exactly its own two requests, and no one else's.
        let asked = c["asked"].as_array().expect("asked");
        let kinds: Vec<&str> = asked.iter().filter_map(|a| a["kind"].as_str()).collect();
        assert_eq!(kinds.len(), 2, "{tag}: {report}");
        assert!(kinds.contains(&"elicitation") && kinds.contains(&"sampling"));
        let sampling_text = asked
            .iter()
            .find(|a| a["kind"] == "sampling")
            .and_then(|a| a["text"].as_str())
            .unwrap_or_default();
        assert!(
            sampling_text.contains(&format!("prompt-{tag}")),
            "{tag}: {report}"
        );
        for other in tags.iter().filter(|t| *t != tag) {
            assert!(
                !c.to_string().contains(&format!("-{other}")),
                "{tag} saw {other}'s traffic: {report}"
            );
        }
    }
}

/// What the asking backend saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The answer to its elicitation (`Ok` result or the error message).
    answers: Vec<Result<String, String>>,
    /// Its call was cancelled.
    cancelled: bool,
}

/// A 2025-11-25-only rmcp backend with one tool, `ask`, that elicits and then waits
/// for its cancellation (or answers what it was told).
#[derive(Clone)]
pub(crate) struct Asking(pub(crate) Arc<Mutex<Seen>>);

impl ServerHandler for Asking {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("asking", "1.0.0"))
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Owned(vec![rmcp::model::ProtocolVersion::V_2025_11_25])
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema: rmcp::model::JsonObject =
            serde_json::from_value(json!({"type": "object"})).expect("schema");
        let schema = Arc::new(schema);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("ask", "elicit, then wait", schema.clone()),
            Tool::new("roots", "list the client's roots", schema),
        ]))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if params.name == "roots" {
            let request = serde_json::from_value(json!({"method": "roots/list"}))
                .expect("a roots/list request");
            let uris = match ctx
                .peer
                .send_request(ServerRequest::ListRootsRequest(request))
                .await
            {
                Ok(ClientResult::ListRootsResult(r)) => r
                    .roots
                    .iter()
                    .map(|root| root.uri.clone())
                    .collect::<Vec<_>>()
                    .join(","),
                other => format!("{other:?}"),
            };
            return Ok(CallToolResponse::Complete(CallToolResult::success(vec![
                ContentBlock::text(format!("roots: {uris}")),
            ])));
        }
        let params: ElicitRequestParams = serde_json::from_value(json!({
            "message": "who are you?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }))
        .expect("elicitation params");
        let asked = ctx
            .peer
            .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params)));
        let answer = tokio::select! {
            answer = asked => answer,
            () = ctx.ct.cancelled() => {
                self.0.lock().unwrap().cancelled = true;
                return Err(ErrorData::internal_error("cancelled", None));
            }
        };
        let text = match answer {
            Ok(ClientResult::ElicitResult(r)) => Ok(json!(r.content).to_string()),
            Ok(other) => Ok(format!("{other:?}")),
            Err(e) => Err(e.to_string()),
        };
        self.0.lock().unwrap().answers.push(text.clone());
        if text.is_err() {
            // Like a tool that keeps working without the answer: only a cancellation
            // ends it.
            ctx.ct.cancelled().await;
            self.0.lock().unwrap().cancelled = true;
            return Err(ErrorData::internal_error("cancelled", None));
        }
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(format!("answer: {}", text.unwrap_or_default())),
        ])))
    }
}

/// One raw 2026-07-28 `tools/call` declaring elicitation, with `extra` params.
async fn call_as_modern(url: &str, tool: &str, extra: Value) -> Value {
    call_as_modern_from(&reqwest::Client::new(), url, tool, extra).await
}

/// [`call_as_modern`] from `client`.
pub(crate) async fn call_as_modern_from(
    client: &reqwest::Client,
    url: &str,
    tool: &str,
    extra: Value,
) -> Value {
    let mut params = json!({"name": tool, "arguments": {},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp-tests", "version": "0"}
    }});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let response = client
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        .send()
        .await
        .expect("POST to the gateway");
    parse_jsonrpc_body(&response.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_resume_with_the_answer_refuse_bad_state_and_are_reaped() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = Asking(seen.clone());
    let service: StreamableHttpService<Asking, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(backend.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let (addr, _stop) = serve_on_loopback(axum::Router::new().nest_service("/mcp", service)).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: asking, url: 'http://{addr}/mcp'}}\n\
         operational:\n  parkedCalls: {{ttl: 2s}}\n"
    )))
    .await;

    // A call whose backend asks is parked: the caller gets the backend's request.
    let first = call_as_modern(&gw.url(), "asking_ask", json!({})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let request = &result["inputRequests"]["vmcp"];
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["message"], "who are you?", "{first}");
    let state = result["requestState"].as_str().expect("requestState");

    // The retry with the answer resumes it, and the backend gets the answer.
    let done = call_as_modern(
        &gw.url(),
        "asking_ask",
        json!({"requestState": state,
               "inputResponses": {"vmcp": {"action": "accept", "content": {"name": "carol"}}}}),
    )
    .await;
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text, r#"answer: {"name":"carol"}"#, "{done}");
    // Its state is spent: a second retry is refused like a forged one.
    let replayed = call_as_modern(
        &gw.url(),
        "asking_ask",
        json!({"requestState": state, "inputResponses": {"vmcp": {"action": "decline"}}}),
    )
    .await;

    // Forged and altered states: -32602, one body for all.
    let forged = call_as_modern(
        &gw.url(),
        "asking_ask",
        json!({"requestState": "forged", "inputResponses": {}}),
    )
    .await;
    let second = call_as_modern(&gw.url(), "asking_ask", json!({})).await;
    let state = second["result"]["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let mut altered = state.clone().into_bytes();
    altered[10] = if altered[10] == b'A' { b'B' } else { b'A' };
    let altered = call_as_modern(
        &gw.url(),
        "asking_ask",
        json!({"requestState": String::from_utf8(altered).unwrap(), "inputResponses": {}}),
    )
    .await;
    for refused in [&replayed, &forged, &altered] {
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["error"], forged["error"], "{refused}");
    }

    // Nobody answers the second call: after the TTL it is reaped. The backend's
    // request gets an error answer and the backend sees the call cancelled.
    assert!(
        eventually(|| seen.lock().unwrap().cancelled).await,
        "{:?}",
        seen.lock().unwrap()
    );
    // The first call's answer arrived; the reaped call's error answer and its
    // cancellation travel at the same time, so the cancellation may end the tool
    // before the answer is read.
    let answers = seen.lock().unwrap().answers.clone();
    assert!(
        matches!(answers.as_slice(), [Ok(_)] | [Ok(_), Err(_)]),
        "{answers:?}"
    );
    // The expired state is refused like a forged one.
    let expired = call_as_modern(
        &gw.url(),
        "asking_ask",
        json!({"requestState": state, "inputResponses": {"vmcp": {"action": "decline"}}}),
    )
    .await;
    assert_eq!(expired["error"], forged["error"], "{expired}");
}

/// One anonymous caller (by address) at its `parkedCalls.maxPerAddress` gets a
/// clean error for its next call that would park, while another caller's call
/// still parks, and none of the first caller's parked calls is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_at_its_parked_cap_is_refused_while_others_still_park() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = Asking(seen.clone());
    let service: StreamableHttpService<Asking, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(backend.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let (addr, _stop) = serve_on_loopback(axum::Router::new().nest_service("/mcp", service)).await;
    let gw = vmcp_tests::served_gateway(config(&format!(
        "backends:\n  - {{name: asking, url: 'http://{addr}/mcp'}}\n\
         operational:\n  parkedCalls: {{max: 10, maxPerAddress: 2}}\n"
    )))
    .await;
    let url = gw.url();
    let at = |ip: &str| {
        reqwest::Client::builder()
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let (flood, other) = (at("127.0.0.2"), at("127.0.0.3"));
    let mut states = Vec::new();
    for n in 0..2 {
        let parked = call_as_modern_from(&flood, &url, "asking_ask", json!({})).await;
        assert_eq!(
            parked["result"]["resultType"], "input_required",
            "call {n}: {parked}"
        );
        states.push(
            parked["result"]["requestState"]
                .as_str()
                .expect("requestState")
                .to_owned(),
        );
    }
    let refused = call_as_modern_from(&flood, &url, "asking_ask", json!({})).await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "too many of your calls are waiting for input; answer one first",
        "{refused}"
    );
    let theirs = call_as_modern_from(&other, &url, "asking_ask", json!({})).await;
    assert_eq!(theirs["result"]["resultType"], "input_required", "{theirs}");
    // The flood's parked calls are all still there: each resumes with its answer.
    for state in &states {
        let done = call_as_modern_from(
            &flood,
            &url,
            "asking_ask",
            json!({"requestState": state,
                   "inputResponses": {"vmcp": {"action": "accept", "content": {"name": "dave"}}}}),
        )
        .await;
        let text = done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(text, r#"answer: {"name":"dave"}"#, "{done}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_asked_during_a_call_come_from_its_caller_or_from_policy() {
    let backend = Asking(Arc::default());
    let service: StreamableHttpService<Asking, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(backend.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let (addr, _stop) = serve_on_loopback(axum::Router::new().nest_service("/mcp", service)).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: asking, url: 'http://{addr}/mcp'}}\n"
    )))
    .await;
    let call = json!([{"tool": "asking_roots", "arguments": {}}]);
    let report = clients(
        &gw.url(),
        json!({"clients": [
            {"mode": "legacy", "roots": ["file:///legacy-root"], "calls": call},
            {"mode": "2026-07-28", "roots": ["file:///modern-root"], "calls": call},
            {"mode": "legacy", "calls": call}
        ]}),
    )
    .await;
    let text = |i: usize| report["clients"][i]["calls"][0]["text"].clone();
    assert_eq!(text(0), "roots: file:///legacy-root", "{report}");
    assert_eq!(text(1), "roots: file:///modern-root", "{report}");
    // A caller without the roots capability is never asked: its connection declares
    // none, and what the backend asks anyway gets the gateway's empty list.
    assert_eq!(text(2), "roots: ", "{report}");
    assert_eq!(report["clients"][2]["asked"], json!([]), "{report}");
}
