//! Legacy HTTP+SSE client transport (stub until the real transport lands).
#![allow(missing_docs)]
use rmcp::RoleClient;
use rmcp::transport::Transport;

pub struct SseClientConfig {
    pub url: String,
}
impl SseClientConfig {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
        }
    }
}
#[derive(Debug, thiserror::Error)]
#[error("sse transport not available")]
pub struct SseTransportError;
pub struct SseClientTransport;
impl SseClientTransport {
    pub async fn connect(
        _client: reqwest::Client,
        _config: SseClientConfig,
    ) -> Result<Self, SseTransportError> {
        Err(SseTransportError)
    }
}
impl Transport<RoleClient> for SseClientTransport {
    type Error = SseTransportError;
    fn send(
        &mut self,
        _item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(Err(SseTransportError))
    }
    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        None
    }
    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
