//! Hot reload of the layer stack: the door (`incomingAuth`, `audit`, `telemetry`)
//! follows a reloaded configuration like the backends do.
//!
//! [`Vmcp::reloadable_stack`](crate::Vmcp::reloadable_stack) serves the stack through
//! a [`StackSwitch`] and remembers how it was built; [`Vmcp::reload`](crate::Vmcp::reload)
//! first builds the new stack (Cedar policies parsed, audit file opened, OIDC client
//! and telemetry pipeline made) and refuses the whole reload if that fails, so a
//! broken file changes nothing; then it applies the backends and swaps the stack
//! around the same MCP service, so sessions and listen streams stay open.

use std::sync::Arc;

use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_layers::stack::{Stack, StackBuilder};
use vmcp_layers::switch::StackSwitch;

use crate::aggregator::{Aggregator, CatalogProvider};
use crate::config::{StackError, VmcpConfig, stack_builder};

/// Why a reload was refused (nothing of it was applied).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new layer stack could not be built (a policy file that does not parse,
    /// an audit file that cannot be opened, …).
    #[error("the new layer stack cannot be built: {0}")]
    Layers(#[from] StackError),
    /// The configuration is invalid: the same errors, naming the same fields, as
    /// [`config::validate`](crate::config::validate) (and `vmcp validate`).
    #[error(transparent)]
    InvalidConfig(#[from] crate::config::ConfigError),
    /// The status routes' authentication cannot be built (the OIDC CA bundle).
    #[error("the status routes' authentication cannot be built: {0}")]
    StatusAuth(vmcp_layers::tls::TlsError),
}

/// Puts the layers around the MCP service (always the same one, so sessions live
/// on); rmcp's HTTP settings (allowed hosts, body limit) are inside it and stay.
pub(crate) type Wrap = Arc<dyn Fn(StackBuilder) -> Stack + Send + Sync>;

/// How the served stack was built, to build it again.
pub(crate) struct LayerSlot {
    pub(crate) switch: StackSwitch,
    pub(crate) headers: HeaderValidationLayer,
    pub(crate) wrap: Wrap,
}

impl std::fmt::Debug for LayerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerSlot")
            .field("switch", &self.switch)
            .finish_non_exhaustive()
    }
}

/// The stack `config` asks for around `service`. An unchanged telemetry section
/// keeps its pipeline (and its metrics) from `previous`.
pub(crate) fn build(
    config: &VmcpConfig,
    aggregator: &Arc<Aggregator>,
    headers: HeaderValidationLayer,
    wrap: &Wrap,
    previous: Option<(&VmcpConfig, &Stack)>,
) -> Result<Stack, StackError> {
    let kept = previous.and_then(|(old, stack)| {
        let same = serde_json::to_value(&old.telemetry).ok()
            == serde_json::to_value(&config.telemetry).ok();
        same.then(|| stack.telemetry().cloned()).flatten()
    });
    let mut builder = stack_builder(
        config.incoming_auth.as_ref(),
        config.audit.as_ref(),
        config.telemetry.as_ref().filter(|_| kept.is_none()),
        config.name.as_deref(),
    )?
    .headers(with_origins(headers, config))
    .metrics_access(config.metrics_access())
    .provider(Arc::new(CatalogProvider(aggregator.clone())));
    builder = crate::optimizer::stacked(builder, aggregator);
    builder = crate::code_mode::stacked(
        builder,
        config,
        crate::optimizer::request_rewrite(aggregator),
    );
    if let Some(telemetry) = kept {
        builder = builder.telemetry(telemetry);
    }
    Ok(wrap(builder))
}

/// `headers` also accepting the configuration's `allowedOrigins`.
pub(crate) fn with_origins(
    mut headers: HeaderValidationLayer,
    config: &VmcpConfig,
) -> HeaderValidationLayer {
    for origin in &config.allowed_origins {
        headers = headers.allow_origin(origin.clone());
    }
    headers
}

/// The first stack of a slot.
pub(crate) fn slot(
    config: &VmcpConfig,
    aggregator: &Arc<Aggregator>,
    wrap: Wrap,
    headers: HeaderValidationLayer,
) -> Result<LayerSlot, StackError> {
    let stack = build(config, aggregator, headers.clone(), &wrap, None)?;
    Ok(LayerSlot {
        switch: StackSwitch::new(stack),
        headers,
        wrap,
    })
}
