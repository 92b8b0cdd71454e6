//! The service side of the `vmcp-layers` pipeline.
//!
//! - [`Catalog`] is a [`CatalogView`] and [`CatalogProvider`] a
//!   [`CapabilityProvider`]: the discovery layer hands every request the aggregator's
//!   current catalog (kept current from backend notifications, so no request waits on
//!   a backend fan-out).
//! - The handler filters each list with the caller's [`AdmissionHandle`], the same
//!   decision the gate enforces on calls ([`admitted_tools`] and its siblings).
//! - Each backend call is observed through [`BackendCalls`] (a telemetry span, metrics,
//!   and the span's `traceparent` in the backend request's `_meta`).

use std::borrow::Cow;
use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{Prompt, RequestMetaObject, Resource, ResourceTemplate, Tool};
use rmcp::service::RequestContext;
use vmcp_layers::context::{
    AdmissionHandle, BackendCallScope, BackendCalls, CapabilityProvider, CatalogView,
    DiscoveryError, Identity, ListKind, ToolAnnotations, ToolInfo,
};

use crate::aggregator::Aggregator;
use crate::backend::BackendError;
use crate::catalog::Catalog;

fn annotations(tool: &Tool) -> ToolAnnotations {
    tool.annotations
        .as_ref()
        .map(|a| ToolAnnotations {
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
            open_world: a.open_world_hint,
        })
        .unwrap_or_default()
}

impl CatalogView for Catalog {
    fn tool(&self, name: &str) -> Option<ToolInfo> {
        Catalog::tool(self, name).map(|entry| ToolInfo {
            backend: entry.route.backend.clone(),
            annotations: annotations(&entry.tool),
        })
    }

    fn prompt_backend(&self, name: &str) -> Option<Arc<str>> {
        self.prompt(name).map(|entry| entry.route.backend.clone())
    }

    fn resource_backend(&self, uri: &str) -> Option<Arc<str>> {
        self.resource_owner(uri).cloned()
    }
}

/// Hands out the aggregator's current catalog as every caller's view.
#[derive(Debug, Clone)]
pub struct CatalogProvider(pub Arc<Aggregator>);

impl CapabilityProvider for CatalogProvider {
    fn view(
        &self,
        _identity: &Identity,
    ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>> {
        let catalog: Arc<dyn CatalogView> = self.0.catalog();
        Box::pin(futures::future::ready(Ok(catalog)))
    }
}

fn extension<T: Send + Sync + 'static>(ctx: &RequestContext<RoleServer>) -> Option<&T> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<T>())
}

/// Filter `items` with the caller's admission handle; all of them without one.
fn admitted<'a, T: Clone>(
    ctx: &RequestContext<RoleServer>,
    kind: ListKind,
    items: &'a [T],
    allow: impl Fn(&AdmissionHandle, &T) -> bool,
) -> Cow<'a, [T]> {
    match extension::<AdmissionHandle>(ctx) {
        None => Cow::Borrowed(items),
        Some(handle) if handle.0.list_hidden(kind) => Cow::Owned(Vec::new()),
        Some(handle) => Cow::Owned(
            items
                .iter()
                .filter(|item| allow(handle, item))
                .cloned()
                .collect(),
        ),
    }
}

/// The advertised tools the caller may call.
pub fn admitted_tools<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [Tool]> {
    admitted(ctx, ListKind::Tools, catalog.tools(), |h, tool| {
        let backend = catalog.tool(&tool.name).map(|e| e.route.backend.clone());
        h.0.tool(&tool.name, backend.as_deref(), &annotations(tool))
    })
}

/// The prompts the caller may get.
pub fn admitted_prompts<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [Prompt]> {
    admitted(ctx, ListKind::Prompts, catalog.prompts(), |h, prompt| {
        let backend = catalog
            .prompt(&prompt.name)
            .map(|e| e.route.backend.clone());
        h.0.prompt(&prompt.name, backend.as_deref())
    })
}

/// The resources the caller may read.
pub fn admitted_resources<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [Resource]> {
    admitted(
        ctx,
        ListKind::Resources,
        catalog.resources(),
        |h, resource| {
            h.0.resource(
                &resource.uri,
                catalog.resource_owner(&resource.uri).map(|b| &**b),
            )
        },
    )
}

/// The resource templates the caller may read (decided on the template string).
pub fn admitted_templates<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [ResourceTemplate]> {
    admitted(
        ctx,
        ListKind::Resources,
        catalog.templates(),
        |h, template| {
            let backend = catalog.completion_owner_for_resource(&template.uri_template);
            h.0.resource(&template.uri_template, backend.map(|b| &**b))
        },
    )
}

/// One backend call, observed when telemetry is on.
pub struct ObservedCall(Option<Box<dyn BackendCallScope>>);

impl ObservedCall {
    /// A backend call starts: open its span and put the span's `traceparent` into the
    /// backend request's `_meta`.
    pub fn start(
        ctx: &RequestContext<RoleServer>,
        backend: &str,
        method: &str,
        name: Option<&str>,
        meta: &mut Option<RequestMetaObject>,
    ) -> Self {
        let Some(calls) = extension::<BackendCalls>(ctx) else {
            return Self(None);
        };
        let scope = calls.0.start(backend, method, name);
        if let Some(traceparent) = scope.traceparent() {
            meta.get_or_insert_with(RequestMetaObject::default)
                .0
                .set_traceparent(traceparent);
        }
        Self(Some(scope))
    }

    /// The call ended with `result`.
    pub fn end<T>(self, result: &Result<T, BackendError>) {
        if let Some(scope) = self.0 {
            let error = result.as_ref().err().map(ToString::to_string);
            scope.end(error.as_deref());
        }
    }
}
