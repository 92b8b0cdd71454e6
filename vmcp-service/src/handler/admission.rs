//! List filtering per caller: each list answer keeps only what the caller's
//! [`AdmissionHandle`] admits, the same decision the gate enforces on calls.

use std::borrow::Cow;

use rmcp::RoleServer;
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use rmcp::service::RequestContext;
use std::sync::Arc;
use vmcp_layers::context::{AdmissionHandle, Identity, ListKind};

use crate::catalog::Catalog;
use crate::visibility::{self, Visibility};

/// An extension the layers put on the HTTP request, as rmcp hands it to the handler.
pub(super) fn extension<T: Send + Sync + 'static>(ctx: &RequestContext<RoleServer>) -> Option<&T> {
    from_parts(&ctx.extensions)
}

fn from_parts<T: Send + Sync + 'static>(extensions: &rmcp::model::Extensions) -> Option<&T> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<T>())
}

/// The caller of a request (`initialize`d session, listen stream) and what it may
/// see, for filtering its notifications (everything without authorization).
pub(super) fn visibility(extensions: &rmcp::model::Extensions, catalog: &Catalog) -> Visibility {
    Visibility::new(
        from_parts::<Arc<Identity>>(extensions).cloned(),
        from_parts::<AdmissionHandle>(extensions).map(|h| h.0.clone()),
        catalog,
    )
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
        visibility::tool(&*h.0, catalog, tool)
    })
}

/// The prompts the caller may get.
pub(super) fn admitted_prompts<'a>(
    ctx: &RequestContext<RoleServer>,
    catalog: &'a Catalog,
) -> Cow<'a, [Prompt]> {
    admitted(ctx, ListKind::Prompts, catalog.prompts(), |h, prompt| {
        visibility::prompt(&*h.0, catalog, prompt)
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
        |h, resource| visibility::resource(&*h.0, catalog, resource),
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
        |h, template| visibility::template(&*h.0, catalog, template),
    )
}
