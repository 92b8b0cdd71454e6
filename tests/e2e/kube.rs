//! The shipped Kubernetes manifests (`deploy/`) against a real kube-apiserver with a real
//! etcd and RBAC: they apply, and the Role gives vmcp's ServiceAccount exactly what
//! discovered mode reads and writes, nothing more.

use reqwest::Method;
use serde_json::json;
use vmcp_tests::kube::KubeCluster;

const NS: &str = "toolhive-system";

fn deploy_dir() -> String {
    vmcp_tests::repo_root().join("deploy").display().to_string()
}

fn deploy_file(name: &str) -> String {
    vmcp_tests::repo_root()
        .join("deploy")
        .join(name)
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_manifests_apply_on_a_real_api_server() {
    let cluster = KubeCluster::start().await;
    cluster.kubectl_ok(&["create", "namespace", NS]).await;

    let out = cluster
        .kubectl_ok(&["apply", "--dry-run=server", "-f", &deploy_dir()])
        .await;
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/mcpgroups.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/mcpservers.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/mcpremoteproxies.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/mcpserverentries.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/mcpexternalauthconfigs.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/mcptoolconfigs.toolhive.stacklok.dev",
        "customresourcedefinition.apiextensions.k8s.io/virtualmcpservers.toolhive.stacklok.dev",
        "serviceaccount/vmcp",
        "role.rbac.authorization.k8s.io/vmcp",
        "rolebinding.rbac.authorization.k8s.io/vmcp",
        "configmap/vmcp-config",
        "deployment.apps/vmcp",
        "service/vmcp",
    ] {
        assert!(
            out.lines()
                .any(|line| line.starts_with(object) && line.ends_with("(server dry run)")),
            "{object} was not applied in a server dry run; kubectl said:\n{out}"
        );
    }
    // A server dry run stores nothing: the API server really checked, and kept none.
    let crd = cluster
        .kubectl(&["get", "crd", "mcpservers.toolhive.stacklok.dev"])
        .await;
    assert!(
        !crd.status.success(),
        "a dry run must not create the CRD: {crd:?}"
    );

    // And the CRDs really install and take the reference's resource shapes.
    cluster
        .kubectl_ok(&["apply", "-f", &deploy_file("crds.yaml")])
        .await;
    cluster
        .kubectl_ok(&[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/mcpserverentries.toolhive.stacklok.dev",
            "crd/virtualmcpservers.toolhive.stacklok.dev",
        ])
        .await;
    let entry = json!({
        "apiVersion": "toolhive.stacklok.dev/v1alpha1",
        "kind": "MCPServerEntry",
        "metadata": {"name": "docs", "namespace": NS},
        "spec": {
            "groupRef": {"name": "engineering-tools"},
            "remoteUrl": "https://docs.example/mcp",
            "transport": "streamable-http",
            "caBundleRef": {"configMapRef": {"name": "docs-ca", "key": "ca.crt"}},
            "image": "a field of the reference that vmcp does not read"
        }
    });
    let (status, body) = cluster
        .request(
            Method::POST,
            &format!("/apis/toolhive.stacklok.dev/v1alpha1/namespaces/{NS}/mcpserverentries"),
            cluster.admin_token(),
            Some(("application/json", entry)),
        )
        .await;
    assert_eq!(status, 201, "an MCPServerEntry is accepted: {body}");
    // The schema is enforced, not just stored: a non-URL is refused by the API server.
    let bad = json!({
        "apiVersion": "toolhive.stacklok.dev/v1alpha1",
        "kind": "MCPServerEntry",
        "metadata": {"name": "bad", "namespace": NS},
        "spec": {"groupRef": {"name": "g"}, "remoteUrl": "ftp://x", "transport": "streamable-http"}
    });
    let (status, body) = cluster
        .request(
            Method::POST,
            &format!("/apis/toolhive.stacklok.dev/v1alpha1/namespaces/{NS}/mcpserverentries"),
            cluster.admin_token(),
            Some(("application/json", bad)),
        )
        .await;
    assert_eq!(status, 422, "an ftp:// remoteUrl is invalid: {body}");
    assert!(
        body["message"].as_str().unwrap_or("").contains("remoteUrl"),
        "the refusal names the field: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_role_grants_what_vmcp_reads_and_writes_and_nothing_else() {
    let cluster = KubeCluster::start().await;
    cluster.kubectl_ok(&["create", "namespace", NS]).await;
    cluster.kubectl_ok(&["create", "namespace", "other"]).await;
    cluster
        .kubectl_ok(&["apply", "-f", &deploy_file("crds.yaml")])
        .await;
    cluster
        .kubectl_ok(&[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/virtualmcpservers.toolhive.stacklok.dev",
            "crd/mcptoolconfigs.toolhive.stacklok.dev",
        ])
        .await;
    cluster
        .kubectl_ok(&["apply", "-f", &deploy_file("rbac.yaml")])
        .await;
    let vmcp = json!({
        "apiVersion": "toolhive.stacklok.dev/v1alpha1",
        "kind": "VirtualMCPServer",
        "metadata": {"name": "engineering-vmcp", "namespace": NS},
        "spec": {"config": {"groupRef": "engineering-tools"}}
    });
    let vmcps = format!("/apis/toolhive.stacklok.dev/v1alpha1/namespaces/{NS}/virtualmcpservers");
    let (status, body) = cluster
        .request(
            Method::POST,
            &vmcps,
            cluster.admin_token(),
            Some(("application/json", vmcp)),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "backend-key",
            "--from-literal=api-key=s3cret",
        ])
        .await;

    let token = cluster.service_account_token(NS, "vmcp").await;
    let group = "/apis/toolhive.stacklok.dev/v1alpha1";

    // What discovered mode does: read (list + watch) the group's resources and what they
    // reference, in its own namespace, and write its VirtualMCPServer's status.
    let mut allowed = vec![
        format!("/api/v1/namespaces/{NS}/configmaps"),
        format!("/api/v1/namespaces/{NS}/secrets"),
        format!("/api/v1/namespaces/{NS}/secrets/backend-key"),
    ];
    for plural in [
        "mcpgroups",
        "mcpservers",
        "mcpremoteproxies",
        "mcpserverentries",
        "mcpexternalauthconfigs",
        "mcptoolconfigs",
    ] {
        allowed.push(format!("{group}/namespaces/{NS}/{plural}"));
        allowed.push(format!(
            "{group}/namespaces/{NS}/{plural}?watch=true&timeoutSeconds=1"
        ));
    }
    for path in &allowed {
        let (status, body) = cluster.request(Method::GET, path, &token, None).await;
        assert_eq!(status, 200, "the Role allows GET {path}: {body}");
    }
    let patch = json!({"status": {"phase": "Ready", "backendCount": 0}});
    let (status, body) = cluster
        .request(
            Method::PATCH,
            &format!("{vmcps}/engineering-vmcp/status"),
            &token,
            Some(("application/merge-patch+json", patch)),
        )
        .await;
    assert_eq!(status, 200, "the Role allows writing the status: {body}");
    assert_eq!(body["status"]["phase"], "Ready", "{body}");

    // Everything else is refused: other resources, other namespaces, cluster scope, and
    // any write but the status.
    let forbidden: Vec<(Method, String, Option<serde_json::Value>)> = vec![
        (Method::GET, format!("/api/v1/namespaces/{NS}/pods"), None),
        (Method::GET, "/api/v1/namespaces/other/secrets".into(), None),
        (
            Method::GET,
            "/api/v1/namespaces/other/configmaps".into(),
            None,
        ),
        (Method::GET, format!("{group}/mcpservers"), None),
        (
            Method::GET,
            format!("{group}/namespaces/other/mcpservers"),
            None,
        ),
        (Method::GET, vmcps.clone(), None),
        (Method::GET, format!("{vmcps}/engineering-vmcp"), None),
        (Method::GET, "/api/v1/namespaces".into(), None),
        (
            Method::DELETE,
            format!("/api/v1/namespaces/{NS}/secrets/backend-key"),
            None,
        ),
        (
            Method::POST,
            format!("{group}/namespaces/{NS}/mcpservers"),
            Some(json!({
                "apiVersion": "toolhive.stacklok.dev/v1alpha1",
                "kind": "MCPServer",
                "metadata": {"name": "sneaky"},
                "spec": {"groupRef": "engineering-tools"}
            })),
        ),
        (
            Method::PATCH,
            format!("{vmcps}/engineering-vmcp"),
            Some(json!({"spec": {"config": {"groupRef": "elsewhere"}}})),
        ),
    ];
    for (method, path, body) in forbidden {
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let (status, answer) = cluster
            .request(
                method.clone(),
                &path,
                &token,
                body.map(|b| (content_type, b)),
            )
            .await;
        assert_eq!(
            status, 403,
            "the Role must refuse {method} {path}: {answer}"
        );
    }

    // The same requests as the admin succeed, so the 403s above are the Role's doing.
    let (status, _) = cluster
        .request(
            Method::GET,
            &format!("/api/v1/namespaces/{NS}/pods"),
            cluster.admin_token(),
            None,
        )
        .await;
    assert_eq!(status, 200);
}

/// deploy/replicas/vmcp.yaml, applied after deploy/ on a real API server: three
/// replicas that roll one at a time without losing one, gated at start by `/readyz`
/// and afterwards by `/health` (a Redis outage must not empty the Service), their
/// Redis password and sealing key from the Secret, and a Service without affinity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_manifest_applies_as_three_replicas_without_affinity() {
    let cluster = KubeCluster::start().await;
    cluster.kubectl_ok(&["create", "namespace", NS]).await;
    for file in ["rbac.yaml", "vmcp.yaml", "replicas/vmcp.yaml"] {
        cluster
            .kubectl_ok(&["apply", "-f", &deploy_file(file)])
            .await;
    }
    let get = async |kind: &str| -> serde_json::Value {
        let text = cluster
            .kubectl_ok(&["-n", NS, "get", kind, "vmcp", "-o", "json"])
            .await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{kind} as JSON: {e}: {text}"))
    };
    let deployment = get("deployment").await;
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 3, "{spec}");
    assert_eq!(
        spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "{spec}"
    );
    let container = &spec["template"]["spec"]["containers"][0];
    assert_eq!(container["startupProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
    let from_secret: Vec<(&str, &str)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|var| {
            let key = &var["valueFrom"]["secretKeyRef"];
            Some((var["name"].as_str()?, key["name"].as_str()?))
        })
        .collect();
    assert_eq!(
        from_secret,
        [
            ("VMCP_SESSION_REDIS_PASSWORD", "vmcp-shared"),
            ("VMCP_SEALING_KEY", "vmcp-shared")
        ]
    );
    let service = get("service").await;
    assert_eq!(service["spec"]["sessionAffinity"], "None", "{service}");
    let config = cluster
        .kubectl_ok(&["-n", NS, "get", "configmap", "vmcp-config", "-o", "json"])
        .await;
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let yaml = config["data"]["vmcp.yaml"].as_str().expect("vmcp.yaml");
    assert!(
        yaml.contains("provider: redis"),
        "replaced by the replicas' config: {yaml}"
    );
    assert!(
        !yaml.to_lowercase().contains("password"),
        "no secret in the ConfigMap: {yaml}"
    );
}
