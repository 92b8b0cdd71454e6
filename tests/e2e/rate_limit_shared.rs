//! Rate-limit buckets in Redis (`sessionStorage.provider: redis`): two gateways
//! sharing one real Redis take from one budget; keys expire; a dead Redis fails
//! open (one WARN, counted) or closed as `failMode` says.

use serde_json::json;
use vmcp_tests::redis::RedisServer;
use vmcp_tests::stacked::{Reply, StackedGateway, modern_as, stacked_gateway};
use vmcp_tests::{config, eventually, py_backend};

async fn replica(backend: &str, redis: &str, extra: &str) -> StackedGateway {
    stacked_gateway(config(&format!(
        r#"
backends: [{{name: py, url: '{backend}'}}]
sessionStorage: {{provider: redis, address: '{redis}', keyPrefix: 'rl-test:'}}
telemetry: {{enablePrometheusMetricsPath: true}}
rateLimiting:
  shared: {{maxTokens: 3, refillPeriod: 1h}}
{extra}
"#
    )))
    .await
}

async fn echo(gw: &StackedGateway) -> Reply {
    modern_as(
        &gw.url(),
        None,
        "tools/call",
        json!({"name": "py_echo", "arguments": {"text": "hi"}}),
    )
    .await
}

fn limited(reply: &Reply) -> bool {
    assert_eq!(reply.status, 200, "{}", reply.raw);
    match reply.body["error"]["code"].as_i64() {
        Some(429) => {
            assert!(
                reply.body["error"]["data"]["retryAfterSeconds"].is_u64(),
                "{}",
                reply.raw
            );
            true
        }
        None => {
            assert!(reply.body.get("result").is_some(), "{}", reply.raw);
            false
        }
        Some(_) => panic!("unexpected error: {}", reply.raw),
    }
}

/// This test process's log, as the gateway's WARN lines reach it.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    /// Capture WARN and above for the rest of this process (nextest runs each test
    /// in a process of its own).
    fn install() -> Self {
        use tracing_subscriber::util::SubscriberInitExt as _;
        let logs = Self::default();
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_ansi(false)
            .finish()
            .try_init()
            .expect("no other subscriber in this process");
        logs
    }

    fn lines_with(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }
}

async fn metrics(gw: &StackedGateway) -> String {
    reqwest::get(gw.at("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Two replicas, one budget of 3: six calls alternating between them are served
/// three times in all, and the bucket's key expires at twice the refill period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_budget_through_redis() {
    let py = py_backend("py", &[]).await;
    let redis = RedisServer::start().await;
    let a = replica(&py.url, &redis.address(), "").await;
    let b = replica(&py.url, &redis.address(), "").await;
    let mut served = 0;
    for i in 0..6 {
        let reply = echo(if i % 2 == 0 { &a } else { &b }).await;
        if !limited(&reply) {
            served += 1;
        }
    }
    assert_eq!(served, 3, "one budget of 3 for both replicas");
    // Each replica refused what the other had spent: both saw refusals.
    for gw in [&a, &b] {
        let text = metrics(gw).await;
        assert!(
            text.contains(
                r#"vmcp_rate_limit_decisions_total{tool="*",bucket="shared",decision="limited"}"#
            ),
            "{text}"
        );
    }
    let (addr, _stop) = vmcp_tests::serve_on_loopback(a.vmcp.status_router()).await;
    let status: serde_json::Value = reqwest::get(format!("http://{addr}/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["rate_limiting"]["store"], "redis", "{status}");
    // One bucket key, hashed (no tool or subject in clear), expiring within 2 h.
    let keys = redis.cli(&["--scan", "--pattern", "rl-test:rl:*"]).await;
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis.cli(&["PTTL", keys[0]]).await.parse().unwrap();
    assert!((1..=7_200_000).contains(&ttl), "PTTL {ttl}");
}

/// Redis dies: `failMode: open` (default) serves and counts the store error;
/// `failMode: closed` refuses with 429 and its `/readyz` says not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_fails_open_or_closed_as_configured() {
    let logs = Captured::install();
    let py = py_backend("py", &[]).await;
    let mut redis = RedisServer::start().await;
    let open = replica(&py.url, &redis.address(), "").await;
    let closed = replica(&py.url, &redis.address(), "  failMode: closed").await;
    assert!(!limited(&echo(&open).await));
    assert!(!limited(&echo(&closed).await));
    redis.kill().await;
    let store = open.vmcp.shared_store().unwrap().clone();
    let closed_store = closed.vmcp.shared_store().unwrap().clone();
    assert!(
        eventually(|| !store.is_up() && !closed_store.is_up()).await,
        "both probes see Redis die"
    );
    // Not ready only where requests need Redis (closed); the open replica serves.
    for (gw, code) in [(&open, 200), (&closed, 503)] {
        let (addr, _stop) = vmcp_tests::serve_on_loopback(gw.vmcp.status_router()).await;
        let answer = reqwest::get(format!("http://{addr}/readyz")).await.unwrap();
        assert_eq!(answer.status().as_u16(), code);
    }
    for _ in 0..3 {
        assert!(!limited(&echo(&open).await), "fail open: served");
        assert!(limited(&echo(&closed).await), "fail closed: refused");
    }
    let text = metrics(&open).await;
    assert!(
        text.contains(
            r#"vmcp_rate_limit_decisions_total{tool="*",bucket="store",decision="error"} 3"#
        ),
        "{text}"
    );
    // One WARN per outage and replica, however many requests it served.
    assert_eq!(logs.lines_with("failing Open"), 1, "fail open: one WARN");
    assert_eq!(
        logs.lines_with("failing Closed"),
        1,
        "fail closed: one WARN"
    );
    // Redis back: the budget is kept in Redis again (2 of 3 tokens are spent by
    // the two calls served before the kill, which Redis lost with its memory:
    // a fresh bucket).
    redis.restart().await;
    assert!(eventually(|| store.is_up()).await);
    let mut served = 0;
    for _ in 0..4 {
        if !limited(&echo(&open).await) {
            served += 1;
        }
    }
    assert_eq!(served, 3, "a fresh shared budget after the restart");
}
