//! Who a backend call is made for, as the health model counts it.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use vmcp_layers::Identity;

use super::admission::extension;
use crate::backend::CallerKey;

/// A per-process keyed digest of the caller: its issuer and subject, or for an
/// anonymous caller its Legacy session (anonymous stateless callers are one
/// caller). Keyed so the digest says nothing about the identity.
pub(super) fn caller_key(ctx: &RequestContext<RoleServer>) -> CallerKey {
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut hasher = KEY.get_or_init(Default::default).build_hasher();
    match extension::<Arc<Identity>>(ctx).filter(|i| !i.is_anonymous()) {
        Some(identity) => {
            0u8.hash(&mut hasher);
            identity.issuer.hash(&mut hasher);
            identity.subject.hash(&mut hasher);
        }
        None => {
            1u8.hash(&mut hasher);
            super::session_id(&ctx.extensions).hash(&mut hasher);
        }
    }
    CallerKey(hasher.finish())
}
