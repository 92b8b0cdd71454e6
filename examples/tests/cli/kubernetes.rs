//! `vmcp serve` as the shipped Deployment runs it, against a real kube-apiserver: the
//! shipped configuration (deploy/vmcp.yaml, discovered mode), the in-cluster
//! configuration (the ServiceAccount's token, CA and namespace mounted at
//! /var/run/secrets/kubernetes.io/serviceaccount, `KUBERNETES_SERVICE_HOST`/`PORT`), and
//! `/readyz` following the cluster.
//!
//! The mount is made in a private mount namespace (`unshare -Urm`, which needs no root
//! when unprivileged user namespaces are allowed): `/run` (`/var/run`) is a test
//! directory for the binary only.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use vmcp_tests::kube::KubeCluster;
use vmcp_tests::{modern, py_backend, repo_root};

use crate::serve::{Serve, Server};

const NS: &str = "toolhive-system";
const GROUP: &str = "engineering-tools";

/// The `vmcp.yaml` of the ConfigMap in deploy/vmcp.yaml.
fn shipped_config() -> String {
    let manifests = std::fs::read_to_string(repo_root().join("deploy/vmcp.yaml")).unwrap();
    let config = serde_yaml_ng::Deserializer::from_str(&manifests)
        .map(|document| Value::deserialize(document).expect("deploy/vmcp.yaml parses"))
        .find(|object| object["kind"] == "ConfigMap")
        .expect("deploy/vmcp.yaml has a ConfigMap");
    config["data"]["vmcp.yaml"].as_str().unwrap().to_owned()
}

/// `/readyz`: its status code, and `status` with `reason` when there is one.
async fn readyz(server: &Server) -> (u16, String) {
    let response = reqwest::get(server.at("/readyz")).await.unwrap();
    let code = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let words = [&body["status"], &body["reason"]]
        .into_iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    (code, words)
}

/// Poll `/readyz` until it answers `want`, at most 30 s (a failing watch retries every
/// 4 s at most).
async fn until_readyz(server: &Server, want: (u16, &str)) {
    let start = Instant::now();
    loop {
        let now = readyz(server).await;
        if (now.0, now.1.as_str()) == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "/readyz never answered {want:?}; last {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn call_text(server: &Server, tool: &str, text: &str) -> String {
    let (status, body) = modern(
        &server.url(),
        "tools/call",
        json!({"name": tool, "arguments": {"text": text}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{tool}: no text in {body}"))
        .to_owned()
}

/// What the kubelet mounts: the token, the cluster's CA and the namespace.
fn service_account_mount(run: &Path, token: &str, cluster: &KubeCluster) {
    let mount = run.join("secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&mount).unwrap();
    std::fs::write(mount.join("token"), token).unwrap();
    std::fs::copy(cluster.ca_file(), mount.join("ca.crt")).unwrap();
    std::fs::write(mount.join("namespace"), NS).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_deployment_serves_in_cluster_and_readyz_follows_the_api_server() {
    let (mut cluster, token) = KubeCluster::with_toolhive_group(NS, GROUP).await;
    let alpha = py_backend("alpha", &[]).await;
    cluster
        .mcp_server(NS, GROUP, "one", &alpha.url, json!({}))
        .await;

    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-incluster", std::process::id()));
    let run = dir.join("run");
    service_account_mount(&run, &token, &cluster);
    let config = dir.join("vmcp.yaml");
    std::fs::write(&config, shipped_config()).unwrap();
    let log = dir.join("stderr.log");
    let port = cluster
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();

    // The pod starts while the API server is down: not ready, and not for want of a
    // catalog but of the cluster.
    cluster.kill_apiserver().await;
    let server = Serve::new()
        .config(&config)
        .wrapped([
            "unshare",
            "-Urm",
            "--propagation",
            "private",
            "sh",
            "-c",
            r#"mount --bind "$0" /run && exec "$@""#,
        ])
        .wrapped_arg(&run)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", &port)
        // Nothing to fall back on: no kubeconfig, no ~/.kube.
        .env_remove("KUBECONFIG")
        .env("HOME", &dir)
        .env_remove("VMCP_NAMESPACE")
        .stderr_to(&log)
        .start()
        .await;
    until_readyz(&server, (503, "not_ready cluster_not_synced")).await;

    // The API server comes: the group's server is served, and the replica is ready.
    cluster.start_apiserver().await;
    until_readyz(&server, (200, "ready")).await;
    assert_eq!(call_text(&server, "one_echo", "hi").await, "alpha: hi");

    // An outage afterwards only degrades it: the last known backends serve on.
    cluster.kill_apiserver().await;
    until_readyz(&server, (200, "degraded cluster_unreachable")).await;
    assert_eq!(
        call_text(&server, "one_echo", "still").await,
        "alpha: still"
    );
    cluster.start_apiserver().await;
    until_readyz(&server, (200, "ready")).await;

    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(&format!("namespace={NS}")) || stderr.contains(&format!("namespace: {NS}")),
        "the namespace comes from the mount:\n{stderr}"
    );
    assert!(!stderr.contains(&token), "the token is never logged");
    assert!(!stderr.contains("panicked"), "{stderr}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
