//! List filtering per caller: each list answer keeps only what the caller's
//! [`AdmissionHandle`] admits, the same decision the gate enforces on calls.

use std::borrow::Cow;

use rmcp::RoleServer;
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use rmcp::service::RequestContext;
use vmcp_layers::context::{AdmissionHandle, ListKind};

use crate::catalog::{Catalog, annotations};

/// An extension the layers put on the HTTP request, as rmcp hands it to the handler.
pub(super) fn extension<T: Send + Sync + 'static>(ctx: &RequestContext<RoleServer>) -> Option<&T> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<T>())
}

/// Whether the caller's lists and reads are decided per identity (an admission
/// handle is present), so what it sees is its own view.
pub(super) fn filtered(ctx: &RequestContext<RoleServer>) -> bool {
    extension::<AdmissionHandle>(ctx).is_some()
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
pub(super) fn admitted_tools<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [Tool]> {
    admitted(ctx, ListKind::Tools, catalog.tools(), |h, tool| {
        let backend = catalog.tool(&tool.name).map(|e| e.route.backend.clone());
        h.0.tool(&tool.name, backend.as_deref(), &annotations(tool))
    })
}

/// The prompts the caller may get.
pub(super) fn admitted_prompts<'a>(
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
pub(super) fn admitted_resources<'a>(
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
pub(super) fn admitted_templates<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [ResourceTemplate]> {
    admitted(
        ctx,
        ListKind::ResourceTemplates,
        catalog.templates(),
        |h, template| {
            let backend = catalog.completion_owner_for_resource(&template.uri_template);
            h.0.resource(&template.uri_template, backend.map(|b| &**b))
        },
    )
}
