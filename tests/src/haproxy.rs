//! A real HAProxy for the tests: Debian's `haproxy` (installed by
//! `scripts/install-peers.sh`), round-robin with no stickiness in front of
//! replicas, on an ephemeral loopback port, its configuration written to a temp
//! dir, killed on drop. The configuration is [`config`], the one docs/scaling.md
//! shows (a test compares them).

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{Child, Command};

/// The balancer's configuration: `listen` for clients, one `server` line per
/// replica address, and a stats page at `stats` (`/stats;csv`). Round-robin per
/// request, no affinity; a replica failing its `/health` check twice (0.5 s
/// apart) is taken out, and a request whose connection is refused is sent to
/// another replica (`retries`, `redispatch`). The client and server timeouts
/// exceed the gateway's SSE keep-alive, so an idle GET stream stays open.
pub fn config(listen: &str, stats: &str, replicas: &[String]) -> String {
    let mut text = format!(
        "global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 5m
    timeout server 5m
    retries 3
    option redispatch 1

frontend mcp
    bind {listen}
    default_backend vmcp

backend vmcp
    balance roundrobin
    option httpchk GET /health
"
    );
    for (i, address) in replicas.iter().enumerate() {
        text.push_str(&format!(
            "    server vmcp{} {address} check inter 500ms fall 2 rise 2\n",
            i + 1
        ));
    }
    text.push_str(&format!(
        "
listen stats
    bind {stats}
    stats enable
    stats uri /stats
"
    ));
    text
}

/// One replica as HAProxy sees it.
#[derive(Debug, Clone)]
pub struct Server {
    /// `UP`, `DOWN`, …
    pub status: String,
    /// Requests and streams it serves now (`scur`).
    pub current: u64,
    /// Requests it was given so far (`stot`).
    pub total: u64,
}

/// A running `haproxy` (killed on drop).
pub struct HaProxy {
    port: u16,
    stats_port: u16,
    dir: PathBuf,
    child: Child,
}

impl HaProxy {
    /// Balance over the replicas on `ports` (127.0.0.1); returns once it accepts
    /// connections.
    pub async fn start(ports: &[u16]) -> Self {
        let (port, stats_port) = (crate::free_port(), crate::free_port());
        let dir = std::env::temp_dir().join(format!("vmcp-haproxy-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("haproxy work dir");
        let replicas: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let file = dir.join("haproxy.cfg");
        std::fs::write(
            &file,
            config(
                &format!("127.0.0.1:{port}"),
                &format!("127.0.0.1:{stats_port}"),
                &replicas,
            ),
        )
        .expect("write haproxy.cfg");
        let binary = if std::path::Path::new("/usr/sbin/haproxy").exists() {
            "/usr/sbin/haproxy"
        } else {
            "haproxy"
        };
        // `-db`: foreground, no daemon; `-W` off: one process to kill.
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start haproxy ({e}); run scripts/install-peers.sh (it installs Debian's haproxy)")
            });
        crate::wait_for_port(port).await;
        let proxy = Self {
            port,
            stats_port,
            dir,
            child,
        };
        proxy.until_up(ports.len()).await;
        proxy
    }

    /// The balanced MCP endpoint.
    pub fn url(&self) -> String {
        self.at("/mcp")
    }

    /// `path` through the balancer.
    pub fn at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Each replica's state (`UP`, `DOWN`, …), current sessions (requests and
    /// streams in flight) and total sessions (requests it was given), from the
    /// stats CSV, in `server` order.
    pub async fn servers(&self) -> Vec<Server> {
        let url = format!("http://127.0.0.1:{}/stats;csv", self.stats_port);
        let text = reqwest::get(url)
            .await
            .expect("haproxy stats")
            .text()
            .await
            .expect("stats body");
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let column = |name: &str| header.iter().position(|h| *h == name).expect("a column");
        let (px, sv, scur, stot, status) = (
            column("pxname"),
            column("svname"),
            column("scur"),
            column("stot"),
            column("status"),
        );
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() > status && f[px] == "vmcp" && f[sv].starts_with("vmcp"))
            .map(|f| Server {
                status: f[status].to_owned(),
                current: f[scur].parse().unwrap_or(0),
                total: f[stot].parse().unwrap_or(0),
            })
            .collect()
    }

    /// Wait (≤ 10 s) until `count` replicas pass their health check.
    pub async fn until_up(&self, count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let up = self
                .servers()
                .await
                .iter()
                .filter(|s| s.status.starts_with("UP"))
                .count();
            if up >= count {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} replicas UP in haproxy within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
