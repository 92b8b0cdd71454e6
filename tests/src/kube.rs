//! A real Kubernetes control plane for the tests: Debian's `etcd` and a `kube-apiserver`
//! 1.20 built from Debian's source package by `scripts/install-kube.sh` (which
//! `scripts/install-peers.sh` runs), both on ephemeral loopback ports, one pair per test.
//!
//! The API server runs with RBAC authorization, so a ServiceAccount token is held to the
//! Role bound to it exactly as in a cluster; an admin token (`system:masters`) sets things
//! up. Its serving certificate comes from a [`TestCa`] generated at test time, and it signs
//! ServiceAccount tokens with a key generated at test time.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::tls::{ServerCert, TestCa, client_trusting};

/// The version `scripts/install-kube.sh` builds.
pub const KUBE_VERSION: &str = "1.20.2";

/// Where the built `kube-apiserver` is: `VMCP_KUBE_APISERVER`, else the install script's
/// per-machine cache. Panics with the fix when it is missing.
pub fn kube_apiserver_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("VMCP_KUBE_APISERVER") {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("VMCP_KUBE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("vmcp-peers")))
        .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/vmcp-peers")))
        .expect("HOME is set");
    let path = cache.join(format!("kube-apiserver-{KUBE_VERSION}"));
    assert!(
        path.exists(),
        "kube-apiserver {KUBE_VERSION} is not built at {}: run scripts/install-peers.sh (it runs scripts/install-kube.sh)",
        path.display()
    );
    path
}

/// A running etcd + kube-apiserver (both killed on drop).
pub struct KubeCluster {
    dir: PathBuf,
    ca: TestCa,
    serving: ServerCert,
    sa_key: PathBuf,
    etcd_port: u16,
    port: u16,
    admin_token: String,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    http: reqwest::Client,
}

impl KubeCluster {
    /// etcd and the API server, ready (its `/readyz` answers 200, RBAC roles bootstrapped)
    /// when this returns.
    pub async fn start() -> Self {
        let etcd_port = crate::free_port();
        let port = crate::free_port();
        let dir = std::env::temp_dir().join(format!("vmcp-kube-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("kube work dir");
        let ca = TestCa::generate("vmcp test kube CA");
        let serving = ca.server_cert("kube-apiserver");
        let sa_key = dir.join("sa.key");
        let key = rcgen::KeyPair::generate().expect("a ServiceAccount signing key");
        std::fs::write(&sa_key, key.serialize_pem()).expect("write the signing key");
        // 1.20 reads verification keys only as public keys (`PUBLIC KEY`), not from the
        // PKCS#8 private key the signing flag takes.
        std::fs::write(dir.join("sa.pub"), key.public_key_pem()).expect("write the public key");
        let admin_token = format!("admin-{}", uuid_like());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},vmcp-test-admin,vmcp-test-admin,\"system:masters\"\n"),
        )
        .expect("write the token file");
        let http = client_trusting(&ca);
        let mut cluster = Self {
            dir,
            ca,
            serving,
            sa_key,
            etcd_port,
            port,
            admin_token,
            etcd: None,
            apiserver: None,
            http,
        };
        cluster.start_etcd().await;
        cluster.start_apiserver().await;
        cluster
    }

    async fn start_etcd(&mut self) {
        let peer_port = crate::free_port();
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("vmcp-test")
            .arg("--data-dir")
            .arg(self.dir.join("etcd"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("vmcp-test={peer}"))
            .arg("--logger")
            .arg("zap")
            .arg("--log-level")
            .arg("error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::from(log_file(&self.dir, "etcd.log")))
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start etcd ({e}); run scripts/install-peers.sh (it installs Debian's etcd-server)")
        });
        self.etcd = Some(child);
        crate::wait_for_port(self.etcd_port).await;
    }

    /// Start the API server (again, on the same port and storage); returns when ready.
    pub async fn start_apiserver(&mut self) {
        let issuer = "https://kubernetes.default.svc.cluster.local";
        let mut cmd = Command::new(kube_apiserver_binary());
        cmd.arg(format!(
            "--etcd-servers=http://127.0.0.1:{}",
            self.etcd_port
        ))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={}", self.port))
        // 1.20 still opens an unauthenticated port 8080 unless told not to.
        .arg("--insecure-port=0")
        .arg(format!("--cert-dir={}", self.dir.join("certs").display()))
        .arg(format!(
            "--tls-cert-file={}",
            self.serving.cert_file.display()
        ))
        .arg(format!(
            "--tls-private-key-file={}",
            self.serving.key_file.display()
        ))
        .arg(format!(
            "--token-auth-file={}",
            self.dir.join("tokens.csv").display()
        ))
        .arg("--authorization-mode=RBAC")
        .arg(format!("--service-account-issuer={issuer}"))
        .arg(format!(
            "--service-account-key-file={}",
            self.sa_key.with_extension("pub").display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            self.sa_key.display()
        ))
        .arg("--service-cluster-ip-range=10.96.0.0/24")
        // No controller manager runs: nothing reconciles the `kubernetes` endpoints.
        .arg("--endpoint-reconciler-type=none")
        .arg("--profiling=false")
        .arg("--logtostderr=true")
        .arg("--v=0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log_file(
            &self.dir,
            "kube-apiserver.log",
        )))
        .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start kube-apiserver ({e}); run scripts/install-peers.sh")
        });
        self.apiserver = Some(child);
        self.wait_ready().await;
    }

    /// SIGKILL the API server (etcd keeps the state) and wait until it is gone.
    pub async fn kill_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    async fn wait_ready(&mut self) {
        // A cold start on two busy cores takes seconds; its hooks (RBAC bootstrap, CRD
        // informers) must all have run before /readyz answers 200.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(child) = self.apiserver.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "kube-apiserver exited at start: {status}; its log:\n{}",
                    self.log_tail("kube-apiserver.log")
                );
            }
            let ready = self
                .http
                .get(format!("{}/readyz", self.url()))
                .bearer_auth(&self.admin_token)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kube-apiserver was not ready within 120 s; its log:\n{}",
                self.log_tail("kube-apiserver.log")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of one of the control plane's logs (for failure messages).
    pub fn log_tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        // A Go crash ends in every goroutine's stack: its cause is where it starts.
        if let Some(start) = lines
            .iter()
            .position(|l| l.starts_with("panic:") || l.starts_with("fatal error:"))
        {
            return lines[start..lines.len().min(start + 30)].join("\n");
        }
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The CA that signed the API server's certificate, as a PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.ca.ca_file()
    }

    /// The admin's bearer token (`system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A kubeconfig that reaches this API server as the holder of `token`, in `namespace`.
    pub fn kubeconfig(&self, token: &str, namespace: &str) -> PathBuf {
        let path = self
            .dir
            .join(format!("kubeconfig-{}", crate::sha256_hex(token)));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: user\n    namespace: {namespace}\ncurrent-context: test\n",
            url = self.url(),
            ca = self.ca_file().display(),
        );
        std::fs::write(&path, text).expect("write a kubeconfig");
        path
    }

    /// Run `kubectl` as the admin (the real Debian kubectl 1.20).
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        let kubeconfig = self.kubeconfig(&self.admin_token, "default");
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .await
            .unwrap_or_else(|e| {
                panic!("cannot run kubectl ({e}); run scripts/install-peers.sh (it installs Debian's kubernetes-client)")
            })
    }

    /// Run `kubectl` as the admin and require success; returns stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One API request as the holder of `token`: the status code and the JSON body
    /// (`Value::Null` when the body is not JSON).
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<(&str, Value)>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(token)
            .timeout(Duration::from_secs(10));
        if let Some((content_type, body)) = body {
            request = request
                .header("content-type", content_type)
                .body(body.to_string());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => panic!(
                "the API server did not answer {path}: {e}; its log:\n{}",
                self.log_tail("kube-apiserver.log")
            ),
        };
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// A token of ServiceAccount `namespace/name` from the TokenRequest API (what the
    /// kubelet mounts into a pod), valid for an hour.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
                &self.admin_token,
                Some((
                    "application/json",
                    json!({
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 3600}
                    }),
                )),
            )
            .await;
        assert_eq!(status, 201, "TokenRequest for {namespace}/{name}: {body}");
        body["status"]["token"]
            .as_str()
            .expect("a token in the TokenRequest status")
            .to_owned()
    }
}

/// The API path of the toolhive resources.
pub const TOOLHIVE_API: &str = "/apis/toolhive.stacklok.dev/v1alpha1";

impl KubeCluster {
    /// A cluster with `namespace` (the one deploy/rbac.yaml names), the shipped CRDs and
    /// Role, and the MCPGroup `group` in it; and a token of the ServiceAccount `vmcp` the Role is bound to.
    pub async fn with_toolhive_group(namespace: &str, group: &str) -> (Self, String) {
        let cluster = Self::start().await;
        cluster
            .kubectl_ok(&["create", "namespace", namespace])
            .await;
        let deploy = crate::repo_root().join("deploy");
        for file in ["crds.yaml", "rbac.yaml"] {
            let path = deploy.join(file).display().to_string();
            cluster.kubectl_ok(&["apply", "-f", &path]).await;
        }
        cluster
            .kubectl_ok(&[
                "wait",
                "--for=condition=established",
                "--timeout=60s",
                "crd/mcpgroups.toolhive.stacklok.dev",
                "crd/mcpservers.toolhive.stacklok.dev",
                "crd/mcpremoteproxies.toolhive.stacklok.dev",
                "crd/mcpserverentries.toolhive.stacklok.dev",
                "crd/mcpexternalauthconfigs.toolhive.stacklok.dev",
                "crd/mcptoolconfigs.toolhive.stacklok.dev",
            ])
            .await;
        cluster
            .create(
                namespace,
                "mcpgroups",
                json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPGroup",
                       "metadata": {"name": group}, "spec": {}}),
            )
            .await;
        let token = cluster.service_account_token(namespace, "vmcp").await;
        (cluster, token)
    }

    /// POST (create) `object` into `plural` of `namespace` as the admin.
    pub async fn create(&self, namespace: &str, plural: &str, object: Value) {
        let path = match plural {
            "configmaps" | "secrets" => format!("/api/v1/namespaces/{namespace}/{plural}"),
            _ => format!("{TOOLHIVE_API}/namespaces/{namespace}/{plural}"),
        };
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                &path,
                &self.admin_token,
                Some(("application/json", object)),
            )
            .await;
        assert_eq!(status, 201, "create {plural}: {body}");
    }

    /// Merge-patch the toolhive object (or status) at `path` in `namespace` as the admin.
    pub async fn patch(&self, namespace: &str, path: &str, patch: Value) {
        let (status, body) = self
            .request(
                reqwest::Method::PATCH,
                &format!("{TOOLHIVE_API}/namespaces/{namespace}/{path}"),
                &self.admin_token,
                Some(("application/merge-patch+json", patch)),
            )
            .await;
        assert_eq!(status, 200, "patch {path}: {body}");
    }

    /// An MCPServer of `group` whose operator-written URL (`status.url`) is `url`;
    /// `spec` is merged into its spec.
    pub async fn mcp_server(
        &self,
        namespace: &str,
        group: &str,
        name: &str,
        url: &str,
        spec: Value,
    ) {
        let mut full = json!({"groupRef": group, "transport": "streamable-http"});
        if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            full.extend(extra.clone());
        }
        self.create(
            namespace,
            "mcpservers",
            json!({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                   "metadata": {"name": name}, "spec": full}),
        )
        .await;
        self.patch(
            namespace,
            &format!("mcpservers/{name}/status"),
            json!({"status": {"url": url}}),
        )
        .await;
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for child in [self.apiserver.as_mut(), self.etcd.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::File::create(dir.join(name)).expect("a log file for the control plane")
}

/// A random-enough token suffix (not a secret outside the test).
fn uuid_like() -> String {
    crate::sha256_hex(&format!(
        "{:?}-{}",
        std::time::SystemTime::now(),
        std::process::id()
    ))[..32]
        .to_owned()
}
