//! A real Redis for the tests: Debian's `redis-server` (installed by
//! `scripts/install-peers.sh`), one per test, on an ephemeral loopback port, with no
//! persistence. It can be killed and started again on the same port, with TLS
//! (certificates from [`crate::tls::TestCa`]) and with a password.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::tls::ServerCert;

/// How a [`RedisServer`] listens.
#[derive(Clone, Default)]
pub struct RedisOptions {
    /// `requirepass` (the default user's password).
    pub password: Option<String>,
    /// An ACL user (`name`, `password`) allowed every command, key and channel.
    pub acl_user: Option<(String, String)>,
    /// Serve TLS only (`--tls-port`), with this certificate.
    pub tls: Option<ServerCert>,
}

/// A running `redis-server` (killed on drop).
pub struct RedisServer {
    port: u16,
    options: RedisOptions,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// A plain Redis on a free loopback port, answering `PING` when this returns.
    pub async fn start() -> Self {
        Self::start_with(RedisOptions::default()).await
    }

    /// A Redis with `options`.
    pub async fn start_with(options: RedisOptions) -> Self {
        let port = crate::free_port();
        let dir = std::env::temp_dir().join(format!("vmcp-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("redis work dir");
        let mut server = Self {
            port,
            options,
            dir,
            child: None,
        };
        server.restart().await;
        server
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port` as `sessionStorage.address` takes it (`rediss://…` with TLS).
    pub fn address(&self) -> String {
        if self.options.tls.is_some() {
            format!("rediss://localhost:{}", self.port)
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// SIGKILL the server (no shutdown, no save) and wait until it is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Start (again) on the same port; returns once it answers `PING`.
    pub async fn restart(&mut self) {
        self.kill().await;
        let mut cmd = Command::new("redis-server");
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir);
        match &self.options.tls {
            Some(cert) => {
                cmd.arg("--port")
                    .arg("0")
                    .arg("--tls-port")
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(&cert.cert_file)
                    .arg("--tls-key-file")
                    .arg(&cert.key_file)
                    .arg("--tls-auth-clients")
                    .arg("no");
            }
            None => {
                cmd.arg("--port").arg(self.port.to_string());
            }
        }
        if let Some(password) = &self.options.password {
            cmd.arg("--requirepass").arg(password);
        }
        if let Some((name, password)) = &self.options.acl_user {
            cmd.arg("--user")
                .arg(name)
                .args(["on", &format!(">{password}"), "~*", "&*", "+@all"]);
        }
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); run scripts/install-peers.sh (it installs Debian's redis-server)")
        });
        self.child = Some(child);
        self.wait_listening().await;
    }

    /// Wait (bounded) until the port accepts connections; a plain server must also
    /// answer `PING` (a password-protected one answers `-NOAUTH`, which is as good).
    async fn wait_listening(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("redis-server exited at start: {status}");
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)).await {
                if self.options.tls.is_some() {
                    return;
                }
                if stream.write_all(b"PING\r\n").await.is_ok() {
                    let mut buf = [0u8; 64];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await
                        && n > 0
                    {
                        return;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server did not listen on {} within 10 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Run one command with `redis-cli` against this server and return its output
    /// (for assertions on what vmcp wrote).
    pub async fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("-p")
            .arg(self.port.to_string())
            .arg("-h")
            .arg("127.0.0.1");
        if let Some((name, password)) = &self.options.acl_user {
            cmd.arg("--no-auth-warning")
                .args(["--user", name, "--pass", password]);
        } else if let Some(password) = &self.options.password {
            cmd.arg("--no-auth-warning").arg("-a").arg(password);
        }
        if let Some(cert) = &self.options.tls {
            cmd.arg("--tls")
                .arg("--insecure")
                .arg("--sni")
                .arg("localhost");
            let _ = cert;
        }
        let out = cmd.args(args).output().await.expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
