//! Discovered mode against a real kube-apiserver (with etcd and RBAC): vmcp, holding the
//! ServiceAccount token bound to the shipped Role, serves the group's backends as they
//! are created, changed and deleted, without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use vmcp_service::Vmcp;
use vmcp_service::discovery::{Discovery, StatusSink};
use vmcp_service::status::{LoggingReporter, StatusReporter};
use vmcp_tests::kube::KubeCluster;
use vmcp_tests::tls::TestCa;
use vmcp_tests::{Listener, config, modern, py_backend, serve_on_loopback, sha256_hex};

const NS: &str = "toolhive-system";
const GROUP: &str = "engineering-tools";
const API: &str = "/apis/toolhive.stacklok.dev/v1alpha1";

/// A cluster with the shipped CRDs and Role and the MCPGroup, and a kubeconfig holding
/// the Role's token.
async fn cluster() -> (KubeCluster, std::path::PathBuf) {
    let (cluster, token) = KubeCluster::with_toolhive_group(NS, GROUP).await;
    let kubeconfig = cluster.kubeconfig(&token, NS);
    (cluster, kubeconfig)
}

/// vmcp in discovered mode, served on loopback: (MCP URL, the gateway, discovery, stop).
/// `extra` is appended to its configuration; `status` feeds the VirtualMCPServer status.
async fn discovered_gateway(
    kubeconfig: &std::path::Path,
    extra: &str,
    status: bool,
) -> (
    String,
    Arc<Vmcp>,
    Discovery,
    tokio_util::sync::CancellationToken,
) {
    let config = config(&format!(
        "name: engineering-vmcp\ngroupRef: {GROUP}\noutgoingAuth: {{source: discovered}}\nkubernetes: {{namespace: {NS}, kubeconfig: '{}', statusInterval: 200ms}}\nbackends: []\n{extra}",
        kubeconfig.display()
    ));
    let sink = status.then(StatusSink::new);
    let mut reporters: Vec<Arc<dyn StatusReporter>> = vec![Arc::new(LoggingReporter)];
    reporters.extend(sink.clone().map(|s| s as _));
    let vmcp = Arc::new(
        Vmcp::start_with_reporters(config.clone(), reporters)
            .await
            .expect("gateway starts"),
    );
    let app = axum::Router::new()
        .nest_service("/mcp", vmcp.service())
        .merge(vmcp.status_router());
    let (addr, stop) = serve_on_loopback(app).await;
    let discovery = Discovery::start(vmcp.clone(), config, sink.as_deref())
        .await
        .expect("discovery starts");
    (format!("http://{addr}/mcp"), vmcp, discovery, stop)
}

/// POST (create) `object` into `plural` as the admin.
async fn create(cluster: &KubeCluster, plural: &str, object: Value) {
    cluster.create(NS, plural, object).await;
}

/// Merge-patch `plural/name` (or its status) as the admin.
async fn patch(cluster: &KubeCluster, path: &str, patch: Value) {
    cluster.patch(NS, path, patch).await;
}

/// An MCPServer in the group whose operator-written URL is `url`.
async fn mcp_server(cluster: &KubeCluster, name: &str, url: &str, spec: Value) {
    cluster.mcp_server(NS, GROUP, name, url, spec).await;
}

/// `/readyz` next to the MCP endpoint `url`: its status code, and `status` with
/// `reason` when there is one.
async fn readyz(url: &str) -> (u16, String) {
    let response = reqwest::get(url.replace("/mcp", "/readyz")).await.unwrap();
    let code = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let words = [&body["status"], &body["reason"]]
        .into_iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    (code, words)
}

/// The VirtualMCPServer `engineering-vmcp`'s status, read as the admin.
async fn vmcp_status(cluster: &KubeCluster) -> Value {
    let path = format!("{API}/namespaces/{NS}/virtualmcpservers/engineering-vmcp");
    let (code, body) = cluster
        .request(Method::GET, &path, cluster.admin_token(), None)
        .await;
    assert_eq!(code, 200, "{body}");
    body["status"].clone()
}

async fn tools(url: &str) -> Vec<String> {
    let (status, body) = modern(url, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let mut names: Vec<String> = body["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The text a `tools/call` answers, or the whole answer when it has none.
async fn try_call_text(url: &str, tool: &str, arguments: &Value) -> Result<String, Value> {
    let (status, body) = modern(
        url,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    match body["result"]["content"][0]["text"].as_str() {
        Some(text) if status == 200 => Ok(text.to_owned()),
        _ => Err(body),
    }
}

async fn call_text(url: &str, tool: &str, arguments: Value) -> String {
    try_call_text(url, tool, &arguments)
        .await
        .unwrap_or_else(|body| panic!("{tool}: no text in {body}"))
}

/// Call `tool` until its text satisfies `check`, at most 5 s. A changed backend is
/// reconnected, so its tools may be unknown for a moment: errors are retried too.
async fn until_call(url: &str, tool: &str, arguments: Value, check: impl Fn(&str) -> bool) {
    let start = Instant::now();
    loop {
        let answer = try_call_text(url, tool, &arguments).await;
        if answer.as_deref().is_ok_and(&check) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{tool} never answered as expected; last: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll `tools/list` until `check` holds on it, at most `limit`; returns the time taken.
async fn until_tools(url: &str, limit: Duration, check: impl Fn(&[String]) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        let names = tools(url).await;
        if check(&names) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "tools/list did not reach the expected state within {limit:?}: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_created_changed_and_deleted_in_the_group_are_served_live() {
    let (cluster, kubeconfig) = cluster().await;
    let alpha = py_backend("alpha", &[]).await;
    let beta = py_backend("beta", &[]).await;
    let (url, _vmcp, discovery, _stop) = discovered_gateway(&kubeconfig, "", false).await;
    let mut listener = Listener::legacy(&url).await;
    assert!(!discovery.unreachable());

    // Created: listed and callable within 2 s, no restart.
    mcp_server(&cluster, "fetch", &alpha.url, json!({})).await;
    let took = until_tools(&url, Duration::from_secs(2), |t| {
        t.contains(&"fetch_echo".to_owned())
    })
    .await;
    eprintln!("MCPServer created -> listed in {took:?}");
    assert_eq!(
        call_text(&url, "fetch_echo", json!({"text": "hi"})).await,
        "alpha: hi"
    );
    listener.expect("tools").await;

    // A server of another group is not served.
    create(
        &cluster,
        "mcpservers",
        json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
               "metadata": {"name": "elsewhere"}, "spec": {"groupRef": "other"}}),
    )
    .await;

    // Changed URL: the same tool now answers from the other backend.
    patch(
        &cluster,
        "mcpservers/fetch/status",
        json!({"status": {"url": beta.url}}),
    )
    .await;
    until_call(&url, "fetch_echo", json!({"text": "hi"}), |t| {
        t == "beta: hi"
    })
    .await;

    // A tool config: renamed, and the filter keeps only that tool.
    create(
        &cluster,
        "mcptoolconfigs",
        json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPToolConfig",
               "metadata": {"name": "fetch-tools"},
               "spec": {"toolsFilter": ["echo"], "toolsOverride": {"echo": {"name": "say"}}}}),
    )
    .await;
    patch(
        &cluster,
        "mcpservers/fetch",
        json!({"spec": {"toolConfigRef": {"name": "fetch-tools"}}}),
    )
    .await;
    until_tools(&url, Duration::from_secs(5), |t| t == ["fetch_say"]).await;
    assert_eq!(
        call_text(&url, "fetch_say", json!({"text": "yo"})).await,
        "beta: yo"
    );
    assert!(
        !tools(&url).await.iter().any(|t| t.starts_with("elsewhere")),
        "another group's server is not served"
    );

    // Deleted: gone, and the subscribed client is told.
    listener.drain();
    let (status, body) = cluster
        .request(
            Method::DELETE,
            &format!("{API}/namespaces/{NS}/mcpservers/fetch"),
            cluster.admin_token(),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    listener.expect("tools").await;
    until_tools(&url, Duration::from_secs(2), |t| t.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_reaches_a_tls_backend_with_its_ca_configmap_and_secret_header() {
    let (cluster, kubeconfig) = cluster().await;
    let ca = TestCa::generate("vmcp discovered CA");
    let cert = ca.server_cert("docs");
    let docs = py_backend(
        "docs",
        &[
            "--echo-headers",
            "--ssl-certfile",
            cert.cert_file.to_str().unwrap(),
            "--ssl-keyfile",
            cert.key_file.to_str().unwrap(),
        ],
    )
    .await;
    let (url, _vmcp, _discovery, _stop) = discovered_gateway(&kubeconfig, "", false).await;
    // The entry first, what it references after: it is served once all have arrived.
    create(
        &cluster,
        "mcpserverentries",
        json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServerEntry",
               "metadata": {"name": "docs"},
               "spec": {"groupRef": {"name": GROUP}, "remoteUrl": docs.url, "transport": "streamable-http",
                        "externalAuthConfigRef": {"name": "docs-key"},
                        "caBundleRef": {"configMapRef": {"name": "docs-ca", "key": "ca.crt"}}}}),
    )
    .await;
    create(
        &cluster,
        "mcpexternalauthconfigs",
        json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPExternalAuthConfig",
               "metadata": {"name": "docs-key"},
               "spec": {"type": "headerInjection",
                        "headerInjection": {"headerName": "X-Api-Key",
                                            "valueSecretRef": {"name": "docs-secret", "key": "api-key"}}}}),
    )
    .await;
    create(
        &cluster,
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "docs-secret"},
               "stringData": {"api-key": "s3cret-value"}}),
    )
    .await;
    create(
        &cluster,
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "docs-ca"},
               "data": {"ca.crt": ca.pem}}),
    )
    .await;
    until_tools(&url, Duration::from_secs(5), |t| {
        t.contains(&"docs_headers".to_owned())
    })
    .await;
    let headers: Value =
        serde_json::from_str(&call_text(&url, "docs_headers", json!({})).await).expect("JSON");
    assert_eq!(
        headers["x-api-key"],
        sha256_hex("s3cret-value"),
        "{headers}"
    );

    // A changed Secret takes effect without a restart.
    let (status, body) = cluster
        .request(
            Method::PATCH,
            &format!("/api/v1/namespaces/{NS}/secrets/docs-secret"),
            cluster.admin_token(),
            Some((
                "application/merge-patch+json",
                json!({"stringData": {"api-key": "rotated"}}),
            )),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    until_call(&url, "docs_headers", json!({}), |text| {
        serde_json::from_str::<Value>(text)
            .is_ok_and(|headers| headers["x-api-key"] == sha256_hex("rotated"))
    })
    .await;

    // A changed CA ConfigMap too: another CA, and the backend's certificate is no
    // longer trusted; the right one again, and it is.
    let set_ca = |pem: String| {
        let cluster = &cluster;
        async move {
            let (status, body) = cluster
                .request(
                    Method::PATCH,
                    &format!("/api/v1/namespaces/{NS}/configmaps/docs-ca"),
                    cluster.admin_token(),
                    Some((
                        "application/merge-patch+json",
                        json!({"data": {"ca.crt": pem}}),
                    )),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        }
    };
    set_ca(TestCa::generate("another CA").pem.clone()).await;
    // Not a reconnection's blip: the gateway names the refused certificate.
    let start = Instant::now();
    loop {
        let status: Value = reqwest::get(url.replace("/mcp", "/status"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let error = status["backends"][0]["last_error"].as_str().unwrap_or("");
        if error.contains("certificate not trusted") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the backend is still trusted under another CA: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        try_call_text(&url, "docs_headers", &json!({}))
            .await
            .is_err(),
        "an untrusted backend is not called"
    );
    set_ca(ca.pem.clone()).await;
    until_call(&url, "docs_headers", json!({}), |text| {
        text.contains("x-api-key")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_goes_on_while_the_api_server_is_down_and_the_watch_resumes() {
    let (mut cluster, kubeconfig) = cluster().await;
    let alpha = py_backend("alpha", &[]).await;
    let beta = py_backend("beta", &[]).await;
    mcp_server(&cluster, "one", &alpha.url, json!({})).await;
    let (url, _vmcp, discovery, _stop) = discovered_gateway(&kubeconfig, "", false).await;
    until_tools(&url, Duration::from_secs(10), |t| {
        t.contains(&"one_echo".to_owned())
    })
    .await;

    assert_eq!(readyz(&url).await, (200, "ready".to_owned()));

    cluster.kill_apiserver().await;
    let start = Instant::now();
    while !discovery.unreachable() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the outage was not noticed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Degraded, not unready: the last known backends serve on.
    assert_eq!(
        readyz(&url).await,
        (200, "degraded cluster_unreachable".to_owned())
    );
    assert_eq!(
        call_text(&url, "one_echo", json!({"text": "still"})).await,
        "alpha: still"
    );

    cluster.start_apiserver().await;
    mcp_server(&cluster, "two", &beta.url, json!({})).await;
    until_tools(&url, Duration::from_secs(30), |t| {
        t.contains(&"two_echo".to_owned())
    })
    .await;
    // Each kind's watch resumes on its own backoff (at most 4 s): the servers' watch
    // delivered `two`, another kind's may still be waiting to retry.
    assert!(
        vmcp_tests::eventually(|| !discovery.unreachable()).await,
        "every watch resumed"
    );
    assert_eq!(readyz(&url).await, (200, "ready".to_owned()));
    assert_eq!(
        call_text(&url, "two_echo", json!({"text": "back"})).await,
        "beta: back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_virtual_mcp_server_status_shows_each_backend_and_flips_when_one_dies() {
    let (cluster, kubeconfig) = cluster().await;
    let mut alpha = py_backend("alpha", &[]).await;
    create(
        &cluster,
        "virtualmcpservers",
        json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "VirtualMCPServer",
               "metadata": {"name": "engineering-vmcp"}, "spec": {"config": {"groupRef": GROUP}}}),
    )
    .await;
    mcp_server(&cluster, "fetch", &alpha.url, json!({})).await;
    let (url, _vmcp, _discovery, _stop) = discovered_gateway(
        &kubeconfig,
        "operational:\n  failureHandling: {healthCheckInterval: 200ms, unhealthyThreshold: 1, statusReportingInterval: 200ms}\n",
        true,
    )
    .await;
    until_tools(&url, Duration::from_secs(10), |t| {
        t.contains(&"fetch_echo".to_owned())
    })
    .await;
    let start = Instant::now();
    let ready = loop {
        let s = vmcp_status(&cluster).await;
        if s["phase"] == "Ready" && s["discoveredBackends"][0]["status"] == "healthy" {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never Ready: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let backend = &ready["discoveredBackends"][0];
    assert_eq!(backend["name"], "fetch", "{ready}");
    assert_eq!(backend["url"], alpha.url.as_str(), "{ready}");
    assert_eq!(backend["authType"], "unauthenticated", "{ready}");
    assert_eq!(ready["backendCount"], 1, "{ready}");
    assert_eq!(ready["conditions"][0]["type"], "Ready", "{ready}");
    assert_eq!(ready["conditions"][0]["status"], "True", "{ready}");

    alpha.kill().await;
    let start = Instant::now();
    loop {
        let s = vmcp_status(&cluster).await;
        if s["discoveredBackends"][0]["status"] == "unhealthy" {
            assert_ne!(s["phase"], "Ready", "{s}");
            assert_eq!(s["conditions"][0]["status"], "False", "{s}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never flipped: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
