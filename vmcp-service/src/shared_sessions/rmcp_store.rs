//! rmcp's external session store hook, served from what the endpoint decided.
//!
//! rmcp calls `load` for a session it does not hold: only a session the endpoint
//! adopted (its caller checked against the record) is found, so rmcp can never
//! rebuild a session for a stranger. `store` hands over a new session's
//! `initialize` params; the endpoint writes the record, with the caller rmcp does
//! not know.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

use super::SharedSessions;

/// [`SharedSessions`] as rmcp's `session_store`.
pub(crate) struct RmcpStore(pub(crate) Arc<SharedSessions>);

/// What `async_trait` (which rmcp declares the trait with) expands an `async fn`
/// to; written out so the crate needs no macro dependency for three methods.
type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, SessionStoreError>> + Send + 'a>>;

impl SessionStore for RmcpStore {
    fn load<'s, 'i, 'a>(&'s self, session_id: &'i str) -> Answer<'a, Option<SessionState>>
    where
        's: 'a,
        'i: 'a,
        Self: 'a,
    {
        Box::pin(async move { Ok(self.0.restore_params(session_id).map(SessionState::new)) })
    }

    fn store<'s, 'i, 't, 'a>(
        &'s self,
        session_id: &'i str,
        state: &'t SessionState,
    ) -> Answer<'a, ()>
    where
        's: 'a,
        'i: 'a,
        't: 'a,
        Self: 'a,
    {
        Box::pin(async move {
            self.0
                .initialized(session_id, state.initialize_params.clone());
            Ok(())
        })
    }

    fn delete<'s, 'i, 'a>(&'s self, session_id: &'i str) -> Answer<'a, ()>
    where
        's: 'a,
        'i: 'a,
        Self: 'a,
    {
        Box::pin(async move {
            self.0.deleted(session_id).await;
            Ok(())
        })
    }
}
