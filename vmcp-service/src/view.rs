//! [`Vmcp::stack`]: the layers from the configuration around the service.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_layers::stack::{Stack, StackBuilder, StackError};

use crate::aggregator::CatalogProvider;
use crate::service::Vmcp;

impl Vmcp {
    /// The full pipeline from the configuration (`incomingAuth`, `audit`,
    /// `telemetry`) around [`Vmcp::service_with`]`(http)`, at `/mcp`, with the
    /// catalog as every caller's capability view. `headers` sets the Host/Origin
    /// allow-lists and body limit.
    pub fn stack(
        &self,
        http: StreamableHttpServerConfig,
        headers: HeaderValidationLayer,
    ) -> Result<Stack, StackError> {
        let config = self.aggregator().config();
        let builder = StackBuilder::from_config(
            config.incoming_auth.as_ref(),
            config.audit.as_ref(),
            config.telemetry.as_ref(),
            config.name.as_deref(),
        )?
        .headers(headers)
        .provider(Arc::new(CatalogProvider(self.aggregator().clone())));
        Ok(builder.build(self.service_with(http)))
    }
}
