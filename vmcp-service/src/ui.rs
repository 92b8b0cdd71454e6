//! The read-only status page at `/ui` (opt-in: `ui.enabled`, or `vmcp serve --ui`).
//!
//! One server-rendered page (the template `ui.html`, embedded in the binary): every
//! backend with its health, MCP revision, transport, circuit and last error, and the
//! merged catalog with each tool's owner and own name, the filters and overrides
//! applied, and the conflicts. `/ui/events` is a server-sent event stream that sends
//! the re-rendered `<main>` whenever health, the catalog or the set of backends
//! changes; the page's one inline script swaps it in. The script and the style carry
//! a per-response nonce and the CSP allows nothing else. Everything from backends or
//! the configuration is HTML-escaped; URLs, commands and environments are never
//! shown, and userinfo in resource URIs is masked.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

mod limits;

use crate::aggregator::Aggregator;
use crate::status::Status;
use crate::status_view::{View, Viewer};

const TEMPLATE: &str = include_str!("ui.html");
/// Re-render at least this often (last-check times), sending only on a difference.
const REFRESH: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Ui {
    aggregator: Arc<Aggregator>,
    shutdown: CancellationToken,
}

/// The `/ui` and `/ui/events` routes. `shutdown` ends open event streams (graceful
/// shutdown waits for every open response).
pub fn router(aggregator: Arc<Aggregator>, shutdown: CancellationToken) -> axum::Router {
    axum::Router::new()
        .route("/ui", get(page))
        .route("/ui/events", get(events))
        .with_state(Ui {
            aggregator,
            shutdown,
        })
}

fn secure(mut response: Response, csp: &str) -> Response {
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The caller's view: the guard puts a [`Viewer`] on every request it lets through;
/// mounted without one (an embedder's own router) the page shows everything.
fn view_of(viewer: Option<&Viewer>) -> View {
    viewer.map_or(View::Full, Viewer::view)
}

async fn page(State(ui): State<Ui>, viewer: Option<axum::Extension<Viewer>>) -> Response {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    // The nonce goes in before the rendered content, so nothing a backend sends can
    // carry it.
    let html = TEMPLATE.replace("{{nonce}}", &nonce).replacen(
        "{{main}}",
        &render_for(&ui.aggregator, &view_of(viewer.as_deref())),
        1,
    );
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    );
    secure(Html(html).into_response(), &csp)
}

async fn events(State(ui): State<Ui>, viewer: Option<axum::Extension<Viewer>>) -> Response {
    let viewer = viewer.map(|v| v.0);
    let stream = Sse::new(updates(ui, viewer)).keep_alive(KeepAlive::default());
    secure(stream.into_response(), "default-src 'none'")
}

/// The rendered `<main>` now, then again whenever it changed.
fn updates(ui: Ui, viewer: Option<Viewer>) -> impl Stream<Item = Result<Event, Infallible>> {
    struct Watch {
        ui: Ui,
        viewer: Option<Viewer>,
        events: tokio::sync::broadcast::Receiver<crate::backend::BackendEvent>,
        catalog: tokio::sync::broadcast::Receiver<crate::aggregator::CatalogChange>,
        backends: tokio::sync::watch::Receiver<u64>,
        tick: tokio::time::Interval,
        last: Option<String>,
    }
    let registry = ui.aggregator.registry();
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watch = Watch {
        events: registry.events(),
        catalog: ui.aggregator.changes(),
        backends: registry.changes(),
        ui,
        viewer,
        tick,
        last: None,
    };
    futures::stream::unfold(watch, |mut w| async move {
        loop {
            if w.last.is_some() {
                let open = tokio::select! {
                    _ = w.ui.shutdown.cancelled() => false,
                    event = w.events.recv() => !matches!(event, Err(RecvError::Closed)),
                    change = w.catalog.recv() => !matches!(change, Err(RecvError::Closed)),
                    changed = w.backends.changed() => changed.is_ok(),
                    _ = w.tick.tick() => true,
                };
                if !open {
                    return None;
                }
            }
            // The view is decided again each time: a reload may change the policies.
            let html = render_for(&w.ui.aggregator, &view_of(w.viewer.as_ref()));
            if w.last.as_deref() != Some(html.as_str()) {
                w.last = Some(html.clone());
                return Some((Ok(Event::default().data(html)), w));
            }
        }
    })
}

/// HTML-escape text for element content and quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `scheme://user:pass@host/…` → `scheme://***@host/…`: a backend's resource URI may
/// carry credentials.
fn mask_userinfo(uri: &str) -> String {
    if let Some((scheme, rest)) = uri.split_once("://") {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            return format!("{scheme}://***{}", &rest[at..]);
        }
    }
    uri.to_owned()
}

/// A serde enum's wire name (`healthy`, `half-open`, …).
fn wire_name(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn badge(out: &mut String, value: &str) {
    let value = escape(value);
    let _ = write!(out, "<span class=\"badge {value}\">{value}</span>");
}

/// The page's `<main>` as an operator sees it: summary, backends, conflicts, tools
/// (composite tools too), prompts, resources.
pub fn render(aggregator: &Aggregator) -> String {
    render_for(aggregator, &View::Full)
}

/// The page's `<main>` as `view` shows it: a caller who is not an operator sees
/// only what its own lists show, and the backends serving that.
pub(crate) fn render_for(aggregator: &Aggregator, view: &View) -> String {
    let status = Status::seen_by(aggregator, view);
    let catalog = aggregator.catalog();
    let config = aggregator.config();
    let mut out = String::with_capacity(8 * 1024);

    let up = status
        .backends
        .iter()
        .filter(|b| b.health.advertisable())
        .count();
    let entries: Vec<_> = catalog
        .tool_entries()
        .iter()
        .filter(|e| view.tool(&catalog, &e.tool, e.advertised))
        .collect();
    let composites: Vec<_> = catalog
        .tools()
        .iter()
        .filter(|t| catalog.local_tool(&t.name).is_some() && view.tool(&catalog, t, true))
        .collect();
    let prompts: Vec<_> = catalog
        .prompts()
        .iter()
        .filter(|p| view.prompt(&catalog, p))
        .collect();
    let resources: Vec<_> = catalog
        .resources()
        .iter()
        .filter(|r| view.resource(&catalog, r))
        .collect();
    let templates: Vec<_> = catalog
        .templates()
        .iter()
        .filter(|t| view.template(&catalog, t))
        .collect();
    let hidden = entries.iter().filter(|t| !t.advertised).count();
    let advertised = entries.iter().filter(|t| t.advertised).count() + composites.len();
    out.push_str("<section class=\"summary\">");
    let phase = wire_name(status.phase).to_lowercase();
    let _ = write!(out, "<div>phase <b>");
    badge(&mut out, &phase);
    let _ = write!(
        out,
        "</b></div><div>backends up <b id=\"up\">{up} / {}</b></div><div>tools advertised <b id=\"advertised\">{advertised}</b></div><div>prompts <b>{}</b></div><div>resources <b>{}</b></div><div>version <b>{}</b></div>",
        status.backends.len(),
        prompts.len(),
        resources.len() + templates.len(),
        escape(status.version),
    );
    if !view.is_full() {
        out.push_str("<div id=\"view\" class=\"note\">your view: what your token may list</div>");
    }
    if let Some(name) = config.name.as_deref().or(status.group_ref.as_deref()) {
        let _ = write!(out, "<div>server <b>{}</b></div>", escape(name));
    }
    out.push_str("</section>");

    out.push_str("<h2>Backends</h2><table id=\"backends\"><thead><tr><th>Backend</th><th>Health</th><th>MCP revision</th><th>Transport</th><th>Circuit</th><th>Failures</th><th>Last check</th><th>Last error</th></tr></thead><tbody>");
    for b in &status.backends {
        let _ = write!(
            out,
            "<tr data-backend=\"{name}\" data-health=\"{health}\"><td><code>{name}</code></td><td>",
            name = escape(&b.name),
            health = wire_name(b.health),
        );
        badge(&mut out, &wire_name(b.health));
        let _ = write!(
            out,
            "</td><td>{}</td><td>{}",
            b.mcp_revision.unwrap_or("—"),
            escape(b.transport)
        );
        if let Some(process) = &b.process {
            match process.pid {
                Some(pid) => {
                    let _ = write!(out, " <span class=\"note\">pid {pid}");
                }
                None => out.push_str(" <span class=\"note\">not running"),
            }
            if process.restarts > 0 {
                let _ = write!(out, ", {} restart(s)", process.restarts);
            }
            out.push_str("</span>");
        }
        out.push_str("</td><td>");
        badge(&mut out, &wire_name(b.circuit));
        let _ = write!(
            out,
            "</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            b.consecutive_failures,
            escape(b.last_check.as_deref().unwrap_or("—")),
            escape(
                &[
                    b.last_error.as_deref(),
                    // How the process ended, while none runs.
                    b.process
                        .as_ref()
                        .filter(|p| p.pid.is_none())
                        .and_then(|p| p.last_exit.as_deref()),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; ")
            ),
        );
    }
    out.push_str("</tbody></table>");

    // Conflicts: claims dropped unresolved, and own names several backends offer
    // (resolved by the strategy; each row below says how it was named).
    let mut offered: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for entry in &entries {
        offered
            .entry(entry.route.name.as_str())
            .or_default()
            .push(&entry.route.backend);
    }
    // What `manual` dropped names tools no caller may list: for operators only.
    let unresolved = if view.is_full() {
        aggregator.unresolved()
    } else {
        Vec::new()
    };
    let shared: Vec<_> = offered
        .iter()
        .filter(|(_, owners)| owners.len() > 1)
        .collect();
    let _ = write!(
        out,
        "<h2>Conflicts</h2><p class=\"note\">strategy <code>{}</code></p><ul id=\"conflicts\">",
        wire_strategy(&config)
    );
    for collision in &unresolved {
        let _ = write!(
            out,
            "<li class=\"conflict\">unresolved, dropped: {}</li>",
            escape(collision)
        );
    }
    for missing in &aggregator.missing_step_tools() {
        let _ = write!(out, "<li class=\"conflict\">{}</li>", escape(missing));
    }
    for (name, owners) in &shared {
        let _ = write!(
            out,
            "<li>tool <code>{}</code> is offered by {}</li>",
            escape(name),
            owners
                .iter()
                .map(|o| format!("<code>{}</code>", escape(o)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if unresolved.is_empty() && shared.is_empty() {
        out.push_str("<li class=\"note\">none</li>");
    }
    out.push_str("</ul>");
    if let Some(integrity) = &status.integrity {
        crate::integrity::page::render(&mut out, integrity, escape);
    }
    limits::render(&mut out, status.rate_limiting.as_ref(), escape);

    let _ = write!(
        out,
        "<h2>Tools</h2><table id=\"tools\"><thead><tr><th>Advertised name</th><th>Backend</th><th>Backend's own name</th><th>Applied</th><th>Description</th></tr></thead><tbody>"
    );
    for entry in &entries {
        let backend = &*entry.route.backend;
        let own = entry.route.name.as_str();
        let mut notes = Vec::new();
        if !entry.advertised {
            notes.push("hidden by filter".to_owned());
        }
        if let Some(o) = config.tools_for(backend).and_then(|t| t.overrides.get(own)) {
            for (set, what) in [
                (o.name.is_some(), "renamed by override"),
                (o.description.is_some(), "description overridden"),
                (o.annotations.is_some(), "annotations overridden"),
            ] {
                if set {
                    notes.push(what.to_owned());
                }
            }
        }
        if offered.get(own).is_some_and(|owners| owners.len() > 1) {
            notes.push("name shared with another backend".to_owned());
        }
        let _ = write!(
            out,
            "<tr data-tool=\"{name}\"><td><code>{name}</code></td><td><code>{backend}</code></td><td><code>{own}</code></td><td class=\"note\">{notes}</td><td>{description}</td></tr>",
            name = escape(&entry.tool.name),
            backend = escape(backend),
            own = escape(own),
            notes = escape(&notes.join("; ")),
            description = escape(entry.tool.description.as_deref().unwrap_or("")),
        );
    }
    for tool in &composites {
        // The steps name backend tools: shown to operators only.
        let steps = match view {
            View::Full => config
                .composite_tools
                .iter()
                .find(|c| *c.name == *tool.name)
                .map(|c| {
                    c.steps
                        .iter()
                        .map(|s| s.tool.as_deref().unwrap_or(s.id.as_str()))
                        .collect::<Vec<_>>()
                        .join(" → ")
                })
                .unwrap_or_default(),
            View::Caller(_) => String::new(),
        };
        let _ = write!(
            out,
            "<tr data-tool=\"{name}\" data-composite=\"true\"><td><code>{name}</code></td><td class=\"note\">composite</td><td class=\"note\">{steps}</td><td class=\"note\">composite tool (served by the gateway)</td><td>{description}</td></tr>",
            name = escape(&tool.name),
            steps = escape(&steps),
            description = escape(tool.description.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    if view.is_full() {
        let _ = write!(
            out,
            "<p class=\"note\">{hidden} hidden tool(s) stay routable internally but are not listed to clients.</p>"
        );
    }

    out.push_str("<h2>Prompts</h2><table id=\"prompts\"><thead><tr><th>Advertised name</th><th>Backend</th><th>Backend's own name</th></tr></thead><tbody>");
    for prompt in &prompts {
        if let Some(entry) = catalog.prompt(&prompt.name) {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td></tr>",
                escape(&prompt.name),
                escape(&entry.route.backend),
                escape(&entry.route.name)
            );
        }
    }
    out.push_str("</tbody></table>");

    out.push_str("<h2>Resources and templates</h2><table id=\"resources\"><thead><tr><th>URI or template</th><th>Backend</th></tr></thead><tbody>");
    for resource in &resources {
        let owner = catalog
            .resource_owner(&resource.uri)
            .map(|o| &**o)
            .unwrap_or("");
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>",
            escape(&mask_userinfo(&resource.uri)),
            escape(owner)
        );
    }
    for template in &templates {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td class=\"note\">template</td></tr>",
            escape(&mask_userinfo(&template.uri_template))
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn wire_strategy(config: &crate::config::VmcpConfig) -> &'static str {
    match config.strategy() {
        crate::config::Strategy::Prefix => "prefix",
        crate::config::Strategy::Priority => "priority",
        crate::config::Strategy::Manual => "manual",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_masks_credentials() {
        assert_eq!(
            escape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        assert_eq!(
            mask_userinfo("https://user:secret@host/x?a=b@c"),
            "https://***@host/x?a=b@c"
        );
        assert_eq!(mask_userinfo("file:///tmp/a@b"), "file:///tmp/a@b");
        assert_eq!(mask_userinfo("mem://notes"), "mem://notes");
    }

    #[test]
    fn the_template_has_one_slot_for_the_page_and_nonces_for_script_and_style() {
        assert_eq!(TEMPLATE.matches("{{main}}").count(), 1);
        assert_eq!(TEMPLATE.matches("<script").count(), 1);
        assert!(TEMPLATE.contains("<script nonce=\"{{nonce}}\">"));
        assert!(TEMPLATE.contains("<style nonce=\"{{nonce}}\">"));
        // No inline handlers: the CSP would refuse them.
        let handler = regex::Regex::new(r"\son[a-z]+\s*=").unwrap();
        assert!(
            !handler.is_match(TEMPLATE),
            "inline event handler in ui.html"
        );
    }
}
