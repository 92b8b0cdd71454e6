//! `execute_tool_script` as a gateway-local call: the authorization layer admits it
//! (the feature flag is the grant; each call the script makes is decided by its real
//! name), and the parse layer applies the optimizer's rewrite, if any, too.

use std::sync::Arc;

use vmcp_layers::context::ParsedMcpRequest;
use vmcp_layers::rewrite::{RequestRewrite, Rewrite};

use super::EXECUTE_TOOL_SCRIPT;

/// Code mode's [`RequestRewrite`], in front of another one (the optimizer's).
pub(crate) struct CodeModeRewrite {
    pub(crate) next: Option<Arc<dyn RequestRewrite>>,
}

impl RequestRewrite for CodeModeRewrite {
    fn rewrite(&self, parsed: &ParsedMcpRequest, body: &[u8]) -> Option<Rewrite> {
        if parsed.method == "tools/call" && parsed.name.as_deref() == Some(EXECUTE_TOOL_SCRIPT) {
            return Some(Rewrite::Local);
        }
        self.next.as_ref()?.rewrite(parsed, body)
    }
}
