//! `/ui`'s rate-limit table: the configured budgets (`rateLimiting`) as the viewer's
//! `/status` shows them (operators all of them; another caller the global and verb
//! budgets, and only the tools and backends it can see), and the calls in flight to
//! each backend with a `maxConcurrent` cap.

use std::fmt::Write as _;

use crate::config::BucketConfig;
use crate::status::RateLimitingStatus;

/// `maxTokens / refillPeriod`, as configured.
fn budget(bucket: Option<&BucketConfig>) -> String {
    match bucket.and_then(BucketConfig::limit) {
        Some((tokens, period)) => {
            format!("{tokens} / {}", humantime::format_duration(period))
        }
        None => "—".to_owned(),
    }
}

/// One row: what is metered, its shared and per-caller budgets.
fn row(
    out: &mut String,
    scope: &str,
    shared: Option<&BucketConfig>,
    per_user: Option<&BucketConfig>,
    escape: fn(&str) -> String,
) {
    let _ = write!(
        out,
        "<tr data-limit=\"{scope}\"><td><code>{scope}</code></td><td>{}</td><td>{}</td></tr>",
        budget(shared),
        budget(per_user),
        scope = escape(scope),
    );
}

/// The section, when rate limiting is configured.
pub(super) fn render(
    out: &mut String,
    status: Option<&RateLimitingStatus>,
    escape: fn(&str) -> String,
) {
    let Some(status) = status else {
        return;
    };
    let limits = &status.limits;
    let _ = write!(
        out,
        "<h2>Rate limits</h2><p class=\"note\">buckets in <code>{}</code>; failMode <code>{}</code></p>\
         <table id=\"limits\"><thead><tr><th>Metered</th><th>Shared</th><th>Per caller</th></tr></thead><tbody>",
        status.store,
        match limits.fail_mode() {
            crate::config::FailMode::Open => "open",
            crate::config::FailMode::Closed => "closed",
        },
    );
    if limits.shared.is_some() || limits.per_user.is_some() {
        row(
            out,
            "tools/call",
            limits.shared.as_ref(),
            limits.per_user.as_ref(),
            escape,
        );
    }
    for tool in &limits.tools {
        row(
            out,
            &format!("tool {}", tool.name),
            tool.shared.as_ref(),
            tool.per_user.as_ref(),
            escape,
        );
    }
    for (verb, pair) in limits.verbs.entries() {
        if let Some(pair) = pair {
            row(
                out,
                &format!("verbs.{verb}"),
                pair.shared.as_ref(),
                pair.per_user.as_ref(),
                escape,
            );
        }
    }
    for backend in &limits.backends {
        let in_flight = status
            .in_flight
            .iter()
            .find(|b| b.backend == backend.name)
            .map(|b| format!("; {} of {} in flight", b.in_flight, b.max_concurrent))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr data-limit=\"backend {name}\"><td><code>backend {name}</code></td><td>{}{}</td><td>—</td></tr>",
            budget(backend.rate.as_ref()),
            escape(&in_flight),
            name = escape(&backend.name),
        );
    }
    out.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_budget_escaped() {
        let limits: crate::config::RateLimitingConfig = serde_yaml_ng::from_str(
            "shared: {maxTokens: 100, refillPeriod: 1m}\ntools: [{name: '<x>', perUser: {maxTokens: 2, refillPeriod: 1h}}]\nverbs: {lists: {shared: {maxTokens: 5, refillPeriod: 10s}}}\nbackends: [{name: b, maxConcurrent: 4}]",
        )
        .unwrap();
        let status = RateLimitingStatus {
            limits,
            store: "memory",
            in_flight: vec![crate::status::BackendInFlight {
                backend: "b".into(),
                in_flight: 1,
                max_concurrent: 4,
            }],
        };
        let mut out = String::new();
        render(&mut out, Some(&status), |s| s.replace('<', "&lt;"));
        assert!(
            out.contains("<td><code>tools/call</code></td><td>100 / 1m</td><td>—</td>"),
            "{out}"
        );
        assert!(
            out.contains("<td><code>tool &lt;x></code></td><td>—</td><td>2 / 1h</td>"),
            "{out}"
        );
        assert!(
            out.contains("<td><code>verbs.lists</code></td><td>5 / 10s</td>"),
            "{out}"
        );
        assert!(out.contains("<td>—; 1 of 4 in flight</td>"), "{out}");
        let mut none = String::new();
        render(&mut none, None, |s| s.to_owned());
        assert!(none.is_empty());
    }
}
