//! The integrity section of the status page (`/ui`): each finding with its diff.
//! Everything shown comes from backends, so every string is escaped.

use std::fmt::Write;

use super::IntegrityStatus;

/// Append the section to the page's `<main>` (`escape`: the page's HTML escaping).
pub(crate) fn render(out: &mut String, status: &IntegrityStatus, escape: fn(&str) -> String) {
    let _ = write!(
        out,
        "<h2>Integrity</h2><p class=\"note\">mode <code>{}</code>; approve with <code>vmcp pins approve NAME</code></p>",
        escape(
            &serde_json::to_value(status.mode)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        )
    );
    if let Some(error) = &status.store_error {
        let _ = write!(out, "<p class=\"conflict\">{}</p>", escape(error));
    }
    out.push_str("<table id=\"integrity\"><thead><tr><th>Backend</th><th>Kind</th><th>Backend's own name</th><th>State</th><th>Changed fields (pinned → seen)</th></tr></thead><tbody>");
    for f in &status.findings {
        let state = match (f.state, f.blocked) {
            (super::FindingState::Changed, true) => "changed, hidden",
            (super::FindingState::Changed, false) => "changed, advertised",
            (super::FindingState::New, _) => "new, hidden",
            (super::FindingState::Unverified, true) => "unverified, hidden",
            (super::FindingState::Unverified, false) => "unverified, advertised",
            (super::FindingState::Unpinned, true) => "unpinned (over the cap), hidden",
            (super::FindingState::Unpinned, false) => "unpinned (over the cap), advertised",
        };
        let _ = write!(
            out,
            "<tr data-backend=\"{b}\"><td><code>{b}</code></td><td>{}</td><td><code>{}</code></td><td>{}</td><td>",
            f.kind,
            escape(&f.name),
            state,
            b = escape(&f.backend),
        );
        for (field, change) in &f.diff {
            let shown = |v: &Option<serde_json::Value>| {
                v.as_ref()
                    .map_or_else(|| "—".to_owned(), |v| escape(&v.to_string()))
            };
            let _ = write!(
                out,
                "<div><code>{}</code>: <del>{}</del> → <ins>{}</ins></div>",
                escape(field),
                shown(&change.old),
                shown(&change.new)
            );
        }
        out.push_str("</td></tr>");
    }
    if status.findings.is_empty() {
        out.push_str(
            "<tr><td colspan=\"5\" class=\"note\">every definition matches its pin</td></tr>",
        );
    }
    out.push_str("</tbody></table>");
}
