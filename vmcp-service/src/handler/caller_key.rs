//! Who a backend call is made for, as the health model counts it.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use vmcp_layers::Identity;

use super::admission::extension;
use crate::backend::CallerKey;

/// The caller of `ctx` (see [`CallerKey::of`]).
pub(super) fn caller_key(ctx: &RequestContext<RoleServer>) -> CallerKey {
    CallerKey::of(
        extension::<Arc<Identity>>(ctx).map(|i| &**i),
        super::session_id(&ctx.extensions).as_deref(),
    )
}
