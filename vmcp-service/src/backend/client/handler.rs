//! The rmcp client handler of a backend connection: the backend's notifications
//! become [`BackendEvent`]s, and its requests outside a relayed call get the
//! gateway's policy answer.

use std::sync::Arc;

use rmcp::model::ClientConfig;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::broadcast;

use crate::backend::bridge::sampling_declined;
use crate::backend::event::{BackendEvent, BackendEventKind};

/// The rmcp client handler of a backend connection: turns notifications into events.
#[derive(Clone)]
pub(super) struct EventForwarder {
    pub(super) backend: Arc<str>,
    pub(super) events: broadcast::Sender<BackendEvent>,
    pub(super) info: ClientConfig,
}

impl EventForwarder {
    pub(super) fn emit(&self, kind: BackendEventKind) {
        // No receiver is fine: nobody keeps derived state yet.
        let _ = self.events.send(BackendEvent {
            backend: self.backend.clone(),
            kind,
        });
    }
}

#[allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but still served.
impl ClientHandler for EventForwarder {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.emit(BackendEventKind::ToolsChanged);
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.emit(BackendEventKind::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.emit(BackendEventKind::PromptsChanged);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.emit(BackendEventKind::ResourceUpdated(params.uri));
    }

    // Requests outside any relayed call (the session's GET stream, `roots/list` at
    // connect time, a call without a relay) have no caller to ask: the gateway's
    // policy answers them (`bridge::policy_answer`).

    async fn create_message(
        &self,
        _: rmcp::model::CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        Err(sampling_declined())
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListRootsResult::default())
    }

    async fn create_elicitation(
        &self,
        _: rmcp::model::ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Decline,
        ))
    }
}
