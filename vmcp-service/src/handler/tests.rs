//! The handler's unit tests (moved from handler.rs verbatim).

use super::*;
use rmcp::model::{ClientRequest, CompleteRequestParams, InitializeRequestParams};
use rmcp::service::Service;

/// The size of the futures `f` returns.
fn size<F: std::future::Future>(_: impl Fn(VmcpHandler, RequestContext<RoleServer>) -> F) -> usize {
    std::mem::size_of::<F>()
}

/// rmcp awaits the `initialize` request's `handle_request` inside each Legacy
/// session's task, so that task is as large as this future for the session's
/// whole life, idle or not, and every request's task is too. The forwarding
/// bodies are boxed to keep it small (11,376 bytes in a test build before,
/// the bench's idle session 63.9 KiB against a 64 KiB target).
#[test]
fn handler_futures_stay_small() {
    let dispatch = size(|h, c| async move {
        h.handle_request(ClientRequest::PingRequest(Default::default()), c)
            .await
    });
    let methods = [
        (
            "tools/call",
            size(|h, c| async move { h.call_tool(CallToolRequestParams::new("t"), c).await }),
        ),
        (
            "prompts/get",
            size(|h, c| async move { h.get_prompt(GetPromptRequestParams::new("p"), c).await }),
        ),
        (
            "resources/read",
            size(|h, c| async move {
                h.read_resource(ReadResourceRequestParams::new("u"), c)
                    .await
            }),
        ),
        (
            "completion/complete",
            size(|h, c| async move {
                let params: CompleteRequestParams = serde_json::from_str("{}").unwrap();
                h.complete(params, c).await
            }),
        ),
        (
            "initialize",
            size(|h, c| async move {
                let params: InitializeRequestParams = serde_json::from_str("{}").unwrap();
                h.initialize(params, c).await
            }),
        ),
    ];
    for (method, bytes) in methods {
        assert!(bytes <= 2048, "{method}: a {bytes}-byte future");
    }
    assert!(dispatch <= 6144, "handle_request: a {dispatch}-byte future");
}
