//! The status routes under OIDC, over real HTTP with real JWTs: `/status`, `/ui`
//! and `/ui/events` want the `/mcp` bearer token (401 without; `/health` and
//! `/readyz` stay open; `status.requireAuth: false` opens them again), the
//! protected-resource metadata takes its `resource` from a valid Host only, and
//! `notifications/initialized` is audited as a success. A reload moves the status
//! routes to the reloaded OIDC settings, and an invalid configuration given to
//! `Vmcp::reload` is refused.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey};

struct Served {
    base: String,
    _stop: tokio_util::sync::CancellationToken,
    vmcp: vmcp_service::Vmcp,
}

/// The bundled server's routes: the layer stack at `/mcp` plus the status routes.
async fn serve(yaml: &str) -> Served {
    let vmcp = vmcp_service::Vmcp::start(config(yaml))
        .await
        .expect("gateway starts");
    let stack = vmcp
        .stack(Default::default(), HeaderValidationLayer::new())
        .expect("stack builds");
    let app = stack.router().merge(vmcp.status_router());
    let (addr, stop) = vmcp_tests::serve_on_loopback(app).await;
    Served {
        base: format!("http://{addr}"),
        _stop: stop,
        vmcp,
    }
}

async fn get(url: &str, token: Option<&str>, host: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .get(url)
        .header("Accept", "text/event-stream, application/json, text/html");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(host) = host {
        request = request.header("Host", host);
    }
    let response = request.send().await.expect("GET");
    let status = response.status().as_u16();
    // `/ui/events` streams: take what arrives at once.
    let body = tokio::time::timeout(std::time::Duration::from_secs(2), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (status, body)
}

/// The first server-sent event of a stream (bounded).
async fn first_event(url: &str, token: &str) -> String {
    let mut response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 200, "{url}");
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), response.chunk())
            .await
            .expect("an event within 10s")
            .expect("read the stream")
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

fn yaml(backend: &str, issuer: &str, extra: &str) -> String {
    format!(
        "backends: [{{name: gh, url: '{backend}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{issuer}', audience: vmcp}}\nui: {{enabled: true}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_routes_want_the_mcp_token_under_oidc() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let served = serve(&yaml(&gh.url(), &idp.issuer, "")).await;
    let token = key.sign(&idp.claims("alice", json!({})));
    let forged = SigningKey::generate("k1").sign(&idp.claims("alice", json!({})));

    for path in ["/status", "/ui", "/ui/events"] {
        let url = format!("{}{path}", served.base);
        let (status, body) = get(&url, None, None).await;
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(
            !body.contains("gh"),
            "{path} names no backend to a stranger: {body}"
        );
        assert_eq!(
            get(&url, Some(&forged), None).await.0,
            401,
            "{path} with a forged token"
        );
        let (status, body) = get(&url, Some(&token), None).await;
        assert_eq!(status, 200, "{path} with the /mcp token: {body}");
        // The Host check still comes first.
        assert_eq!(
            get(&url, Some(&token), Some("evil.example")).await.0,
            403,
            "{path} for a foreign Host"
        );
    }
    let (status, body) = get(&format!("{}/status", served.base), Some(&token), None).await;
    assert_eq!(status, 200);
    assert!(body.contains("\"gh\""), "{body}");
    for path in ["/health", "/readyz", "/ping"] {
        let (status, _) = get(&format!("{}{path}", served.base), None, None).await;
        assert!(
            status == 200 || status == 503,
            "{path} stays open: {status}"
        );
    }

    // The metadata's resource: from the (valid) Host, and no foreign Host at all.
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", served.base);
    let (status, body) = get(&metadata, None, None).await;
    assert_eq!(status, 200, "{body}");
    let document: serde_json::Value = serde_json::from_str(&body).expect("metadata JSON");
    let expected = format!("{}/mcp", served.base);
    assert_eq!(document["resource"], expected.as_str(), "{document}");
    let (status, body) = get(&metadata, None, Some("evil.example")).await;
    assert_eq!(status, 403, "metadata for a foreign Host: {body}");
    assert!(!body.contains("evil.example"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_auth_false_opens_the_status_routes_again() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let served = serve(&yaml(
        &gh.url(),
        &idp.issuer,
        "status: {requireAuth: false}\n",
    ))
    .await;
    for path in ["/status", "/ui"] {
        let (status, body) = get(&format!("{}{path}", served.base), None, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    // Without OIDC there is no token to ask for: the setting is refused.
    let refused = vmcp_service::config::load_str(&format!(
        "backends: [{{name: gh, url: '{}'}}]\nstatus: {{requireAuth: true}}\n",
        gh.url()
    ));
    let error = refused
        .expect_err("requireAuth without oidc is invalid")
        .to_string();
    assert!(error.contains("status.requireAuth"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_initialized_is_audited_as_a_success() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-audit-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let served = serve(&yaml(
        &gh.url(),
        &idp.issuer,
        &format!("audit: {{logFile: '{}'}}\n", log.display()),
    ))
    .await;
    let token = key.sign(&idp.claims("alice", json!({})));
    let mut session =
        vmcp_tests::stacked::LegacySession::open(&format!("{}/mcp", served.base), Some(&token))
            .await;
    let reply = session.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200);
    let text = std::fs::read_to_string(&log).expect("audit log");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit JSON line"))
        .collect();
    let initialized: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "mcp_notification")
        .collect();
    assert!(
        !initialized.is_empty(),
        "notifications/initialized audited: {text}"
    );
    for line in initialized {
        assert_eq!(line["outcome"], "success", "{line}");
    }
}

/// Two backends, `gh` (echo, add, and a prompt) and `vault` (read_secret and a
/// resource); alice may call `gh_echo` only, an operator (`roles: [ops]`) anything.
async fn two_backends_under_cedar(
    idp: &Idp,
    extra: &str,
) -> (
    Served,
    vmcp_examples::demo::RunningDemo,
    vmcp_examples::demo::RunningDemo,
) {
    let mut gh_spec = DemoSpec::new("gh", &["echo", "add"]);
    gh_spec.prompts = vec!["triage".into()];
    let gh = spawn(gh_spec, 0).await.unwrap();
    let mut vault_spec = DemoSpec::new("vault", &["read_secret"]);
    vault_spec.resources = vec!["vault://keys/root".into()];
    let vault = spawn(vault_spec, 0).await.unwrap();
    let served = serve(&format!(
        r#"
name: eng
backends: [{{name: gh, url: '{}'}}, {{name: vault, url: '{}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{}', audience: vmcp}}
  authz:
    type: cedar
    policies:
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");'
      - 'permit(principal in THVGroup::"ops", action, resource);'
ui: {{enabled: true}}
status:
  operators: {{claim: roles, values: [ops]}}
{extra}"#,
        gh.url(),
        vault.url(),
        idp.issuer
    ))
    .await;
    (served, gh, vault)
}

/// Issue 31 item 8: `/status`, `/ui` and `/ui/events` show a caller who is not an
/// operator only what its own lists show; an operator sees the whole gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_ui_show_a_caller_only_its_own_view() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let (served, _gh, _vault) = two_backends_under_cedar(&idp, "").await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let operator = key.sign(&idp.claims(
        "olga",
        json!({"roles": ["viewer", "ops"], "groups": ["ops"]}),
    ));

    // What alice's own list shows: one tool of gh, nothing of vault.
    let mcp = format!("{}/mcp", served.base);
    let list = vmcp_tests::stacked::modern_as(&mcp, Some(&alice), "tools/list", json!({})).await;
    assert_eq!(vmcp_tests::stacked::tool_names(&list), ["gh_echo"]);

    let (status, body) = get(&format!("{}/status", served.base), Some(&alice), None).await;
    assert_eq!(status, 200, "{body}");
    let document: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    let names: Vec<&str> = document["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["gh"], "alice sees the backend serving her: {body}");
    let page = get(&format!("{}/ui", served.base), Some(&alice), None).await;
    let event = first_event(&format!("{}/ui/events", served.base), &alice).await;
    for (path, (status, body)) in [("/ui", page), ("/ui/events", (200, event))] {
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains("data-tool=\"gh_echo\""), "{path}: {body}");
        for hidden in ["vault", "gh_add", "read_secret", "triage", "keys/root"] {
            assert!(
                !body.contains(hidden),
                "{path} shows {hidden:?} to alice, whose lists do not: {body}"
            );
        }
        assert!(
            body.contains("id=\"view\""),
            "{path} says it is a filtered view"
        );
    }

    // The operator: everything.
    let (status, body) = get(&format!("{}/status", served.base), Some(&operator), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"vault\""), "{body}");
    let (status, body) = get(&format!("{}/ui", served.base), Some(&operator), None).await;
    assert_eq!(status, 200, "{body}");
    for shown in [
        "data-tool=\"gh_add\"",
        "data-tool=\"vault_read_secret\"",
        "data-backend=\"vault\"",
        "vault://keys/root",
        "triage",
    ] {
        assert!(body.contains(shown), "the operator sees {shown:?}: {body}");
    }
    assert!(!body.contains("id=\"view\""), "{body}");
}

/// Issue 31 item 7: `/metrics` is guarded like `/status` (Host, token, operators)
/// and its method label takes known MCP methods only, so a client sending
/// thousands of invented method names adds one series, not thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_guarded_and_their_labels_bounded() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let (served, _gh, _vault) =
        two_backends_under_cedar(&idp, "telemetry: {enablePrometheusMetricsPath: true}\n").await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let operator = key.sign(&idp.claims("olga", json!({"roles": ["ops"], "groups": ["ops"]})));
    let metrics = format!("{}/metrics", served.base);

    let mcp = format!("{}/mcp", served.base);
    let padding = "m".repeat(2048);
    for i in 0..300 {
        let method = format!("junk/{i}/{padding}");
        let reply = vmcp_tests::stacked::modern_as(&mcp, Some(&alice), &method, json!({})).await;
        assert_ne!(reply.status, 500, "{method}: {}", reply.raw);
    }
    // A tool that does not exist: its name is no label either.
    let reply = vmcp_tests::stacked::modern_as(
        &mcp,
        Some(&operator),
        "tools/call",
        json!({"name": "gh_no_such_tool_4711", "arguments": {}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);

    let (status, body) = get(&metrics, None, None).await;
    assert_eq!(status, 401, "/metrics without a token: {body}");
    let (status, body) = get(&metrics, Some(&alice), None).await;
    assert_eq!(
        status, 403,
        "/metrics for a caller who is no operator: {body}"
    );
    assert!(!body.contains("vault"), "{body}");
    assert_eq!(
        get(&metrics, Some(&operator), Some("evil.example")).await.0,
        403,
        "/metrics for a foreign Host"
    );
    let (status, body) = get(&metrics, Some(&operator), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("vmcp_requests_total{mcp_method=\"other\"} 300"),
        "the invented methods share one series: {body}"
    );
    assert!(
        body.contains("vmcp_requests_total{mcp_method=\"tools/call\"}"),
        "{body}"
    );
    for leaked in ["junk/", "gh_no_such_tool_4711"] {
        assert!(!body.contains(leaked), "{leaked:?} in /metrics");
    }
    assert!(
        body.len() < 64 * 1024,
        "/metrics stays small: {} bytes",
        body.len()
    );
}

/// `status.requireAuth: false` opens `/metrics` as it opens `/status` (the Host
/// check stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_require_auth() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let served = serve(&yaml(
        &gh.url(),
        &idp.issuer,
        "status: {requireAuth: false}\ntelemetry: {enablePrometheusMetricsPath: true}\n",
    ))
    .await;
    let metrics = format!("{}/metrics", served.base);
    assert_eq!(get(&metrics, None, None).await.0, 200);
    assert_eq!(get(&metrics, None, Some("evil.example")).await.0, 403);
    // Operators without the token to read them from are refused.
    let refused = vmcp_service::config::load_str(&format!(
        "backends: [{{name: gh, url: '{}'}}]\nstatus: {{operators: {{claim: roles, values: [ops]}}}}\n",
        gh.url()
    ));
    let error = refused.expect_err("operators without oidc").to_string();
    assert!(error.contains("status.operators"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_the_status_routes_to_the_new_issuer_and_refuses_invalid_configs() {
    let (key_a, key_b) = (SigningKey::generate("a1"), SigningKey::generate("b1"));
    let (idp_a, idp_b) = (Idp::start(&[&key_a]).await, Idp::start(&[&key_b]).await);
    let gh = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let served = serve(&yaml(&gh.url(), &idp_a.issuer, "")).await;
    let status = format!("{}/status", served.base);
    let token_a = key_a.sign(&idp_a.claims("alice", json!({})));
    let token_b = key_b.sign(&idp_b.claims("alice", json!({})));
    assert_eq!(get(&status, Some(&token_a), None).await.0, 200);
    assert_eq!(get(&status, Some(&token_b), None).await.0, 401);

    let reloaded = config(&yaml(&gh.url(), &idp_b.issuer, ""));
    served.vmcp.reload(reloaded.clone()).await.expect("reload");
    assert_eq!(
        get(&status, Some(&token_a), None).await.0,
        401,
        "the old issuer's token after the reload"
    );
    assert_eq!(get(&status, Some(&token_b), None).await.0, 200);

    // An embedder's invalid configuration is refused as a whole, with the messages
    // `vmcp validate` gives; the running one stays.
    let mut invalid = reloaded.clone();
    invalid.aggregation.page_size = Some(5000);
    let error = served
        .vmcp
        .reload(invalid)
        .await
        .expect_err("an invalid configuration is refused");
    assert!(
        matches!(error, vmcp_service::ReloadError::InvalidConfig(_)),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("aggregation.pageSize must be between 1 and 1000 (got 5000)"),
        "{error}"
    );
    assert_eq!(served.vmcp.aggregator().config().page_size(), 1000);
    assert_eq!(get(&status, Some(&token_a), None).await.0, 401);
    assert_eq!(get(&status, Some(&token_b), None).await.0, 200);

    // `status.requireAuth: false` reloaded opens the routes.
    let open = config(&yaml(
        &gh.url(),
        &idp_b.issuer,
        "status: {requireAuth: false}\n",
    ));
    served.vmcp.reload(open).await.expect("reload");
    assert_eq!(get(&status, None, None).await.0, 200);
}

/// Issue 29: integrity findings name definitions nobody may list (held back until
/// approved): `/status` and `/ui` show them to operators only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integrity_findings_are_shown_to_operators_only() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let pins = std::env::temp_dir().join(format!(
        "vmcp-e2e-{}-status-auth-pins.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pins);
    let (served, _gh, _vault) = two_backends_under_cedar(
        &idp,
        &format!(
            "integrity: {{mode: warn, newTools: block, path: '{}'}}",
            pins.display()
        ),
    )
    .await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let operator = key.sign(&idp.claims("olga", json!({"roles": ["ops"]})));

    let (status, body) = get(&format!("{}/status", served.base), Some(&alice), None).await;
    assert_eq!(status, 200, "{body}");
    let document: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    assert!(document.get("integrity").is_none(), "{body}");
    assert!(!body.contains("read_secret"), "{body}");
    let (status, page) = get(&format!("{}/ui", served.base), Some(&alice), None).await;
    assert_eq!(status, 200);
    assert!(!page.contains("id=\"integrity\""), "{page}");

    let (status, body) = get(&format!("{}/status", served.base), Some(&operator), None).await;
    assert_eq!(status, 200, "{body}");
    let document: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    let findings = document["integrity"]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("the operator sees the findings: {body}"));
    let secret = findings
        .iter()
        .find(|f| f["name"] == "read_secret")
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(
        (&secret["state"], &secret["blocked"]),
        (&json!("new"), &json!(true))
    );
    let (status, page) = get(&format!("{}/ui", served.base), Some(&operator), None).await;
    assert_eq!(status, 200);
    assert!(page.contains("id=\"integrity\""), "{page}");
}

/// Issue 25: `/status` and `/ui` show the configured rate limits; an operator all of
/// them, another caller the global budgets and only the tools and backends its own
/// lists show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_shown_per_caller_on_status_and_ui() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let limits = r#"rateLimiting:
  shared: {maxTokens: 100, refillPeriod: 1m}
  tools:
    - {name: gh_echo, perUser: {maxTokens: 5, refillPeriod: 1m}}
    - {name: gh_add, shared: {maxTokens: 7, refillPeriod: 1m}}
    - {name: vault_read_secret, shared: {maxTokens: 9, refillPeriod: 1h}}
  backends: [{name: gh, rate: {maxTokens: 50, refillPeriod: 1m}}, {name: vault, maxConcurrent: 2}]
"#;
    let (served, _gh, _vault) = two_backends_under_cedar(&idp, limits).await;
    let alice = key.sign(&idp.claims("alice", json!({})));
    let operator = key.sign(&idp.claims(
        "olga",
        json!({"roles": ["viewer", "ops"], "groups": ["ops"]}),
    ));
    let status_of = |token: String| {
        let url = format!("{}/status", served.base);
        async move {
            let (code, body) = get(&url, Some(&token), None).await;
            assert_eq!(code, 200, "{body}");
            let document: serde_json::Value = serde_json::from_str(&body).unwrap();
            document["rate_limiting"].clone()
        }
    };
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mine = status_of(alice.clone()).await;
    assert_eq!(mine["limits"]["shared"]["maxTokens"], 100, "{mine}");
    assert_eq!(names(&mine["limits"]["tools"]), ["gh_echo"], "{mine}");
    assert_eq!(names(&mine["limits"]["backends"]), ["gh"], "{mine}");
    let all = status_of(operator.clone()).await;
    assert_eq!(
        names(&all["limits"]["tools"]),
        ["gh_echo", "gh_add", "vault_read_secret"],
        "{all}"
    );
    assert_eq!(names(&all["limits"]["backends"]), ["gh", "vault"], "{all}");

    let (_, page) = get(&format!("{}/ui", served.base), Some(&alice), None).await;
    assert!(page.contains("<h2>Rate limits</h2>"), "{page}");
    assert!(
        page.contains(
            "<tr data-limit=\"tool gh_echo\"><td><code>tool gh_echo</code></td><td>—</td><td>5 / 1m</td></tr>"
        ),
        "{page}"
    );
    assert!(page.contains("data-limit=\"tools/call\""), "{page}");
    for hidden in ["gh_add", "vault"] {
        assert!(!page.contains(hidden), "alice sees {hidden:?}: {page}");
    }
    let (_, page) = get(&format!("{}/ui", served.base), Some(&operator), None).await;
    for shown in [
        "data-limit=\"tool gh_add\"",
        "data-limit=\"tool vault_read_secret\"",
        "data-limit=\"backend vault\"",
        "0 of 2 in flight",
    ] {
        assert!(page.contains(shown), "the operator sees {shown:?}: {page}");
    }
}
