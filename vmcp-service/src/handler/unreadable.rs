//! A request rmcp could not read as its method's type. rmcp's request enum is
//! untagged: a `tools/call` whose params do not fit (`requestState: 5`, `name: []`)
//! falls through to its custom request, which it answers `-32601 tools/call`, as if
//! the method did not exist. The method does exist; its params are wrong: `-32602`.

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestMethod, CompleteRequestMethod, ConstString, CustomRequest,
    DiscoverRequestMethod, GetPromptRequestMethod, InitializeResultMethod,
    ListPromptsRequestMethod, ListResourceTemplatesRequestMethod, ListResourcesRequestMethod,
    ListToolsRequestMethod, PingRequestMethod, ReadResourceRequestMethod, SetLevelRequestMethod,
    SubscribeRequestMethod, SubscriptionsListenRequestMethod, UnsubscribeRequestMethod,
};

/// The client requests rmcp reads into a type of their own.
const TYPED: &[&str] = &[
    CallToolRequestMethod::VALUE,
    GetPromptRequestMethod::VALUE,
    ReadResourceRequestMethod::VALUE,
    CompleteRequestMethod::VALUE,
    ListToolsRequestMethod::VALUE,
    ListPromptsRequestMethod::VALUE,
    ListResourcesRequestMethod::VALUE,
    ListResourceTemplatesRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
    SubscriptionsListenRequestMethod::VALUE,
    SetLevelRequestMethod::VALUE,
    InitializeResultMethod::VALUE,
    DiscoverRequestMethod::VALUE,
    PingRequestMethod::VALUE,
];

/// The answer to a request rmcp handed over as custom: `-32602` for a method it
/// knows (its params did not fit), `-32601` naming the method otherwise.
/// `crate::params` says why where it has the method's type; the rest of rmcp's
/// typed methods get the same message without the reason.
pub(super) fn answer(request: &CustomRequest) -> ErrorData {
    let method = request.method.as_str();
    if let Some(invalid) = crate::params::invalid(method, request.params.as_ref()) {
        invalid
    } else if TYPED.contains(&method) {
        ErrorData::invalid_params(format!("invalid params for {method}"), None)
    } else {
        ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            method.to_owned(),
            None,
        )
    }
}
