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
