//! Bounded waits on backends, over real sockets and processes: a backend whose
//! socket accepts and never answers delays neither another backend's
//! `resources/updated` nor subscriptions to other URIs; a frozen (SIGSTOPped)
//! backend process lets every concurrent call return within its timeout + 1 s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{Listener, config, gateway, py_backend};

/// A TCP proxy in front of a backend that can be stalled: from then on it accepts
/// connections and reads nothing, and forwards nothing on the open ones (the
/// sockets stay open: a hung server, not a dead one).
struct StallProxy {
    url: String,
    stalled: Arc<AtomicBool>,
}

impl StallProxy {
    async fn start(target: &str) -> Self {
        let upstream = reqwest::Url::parse(target).expect("backend URL");
        let upstream_addr = format!(
            "{}:{}",
            upstream.host_str().expect("host"),
            upstream.port().expect("port")
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "http://{}{}",
            listener.local_addr().expect("addr"),
            upstream.path()
        );
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = stalled.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                if flag.load(Ordering::Acquire) {
                    held.push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream_addr).await else {
                    continue;
                };
                let (client_r, client_w) = client.into_split();
                let (server_r, server_w) = server.into_split();
                tokio::spawn(pump(client_r, server_w, flag.clone()));
                tokio::spawn(pump(server_r, client_w, flag.clone()));
            }
        });
        Self { url, stalled }
    }

    fn stall(&self) {
        self.stalled.store(true, Ordering::Release);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.load(Ordering::Acquire) {
            // Hold both halves open and never forward again.
            let _keep = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn subscribable(name: &str) -> DemoSpec {
    DemoSpec {
        resources: vec![format!("{name}://one")],
        legacy_only: true,
        ..DemoSpec::new(name, &["alpha"])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_backend_delays_neither_other_backends_updates_nor_their_subscriptions() {
    const TIMEOUT: Duration = Duration::from_secs(4);
    let live = spawn(subscribable("live"), 0).await.unwrap();
    let slow = spawn(subscribable("slow"), 0).await.unwrap();
    let proxy = StallProxy::start(&slow.url()).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: live, url: '{}'}}\n  - {{name: slow, url: '{}'}}\noperational:\n  timeouts: {{default: 4s, discovery: 4s}}\n",
        live.url(),
        proxy.url
    )))
    .await;

    // A client subscribed to the slow backend's resource, while it still answers.
    let first = Listener::legacy(&gw.url()).await;
    #[allow(deprecated)]
    first
        .client
        .subscribe(rmcp::model::SubscribeRequestParams::new("slow://one"))
        .await
        .expect("subscribed while the backend answers");
    assert_eq!(slow.control().subscribed(), ["slow://one"]);

    // The slow backend hangs; the client unsubscribes, so vmcp's next
    // `resources/unsubscribe` to it never gets an answer.
    proxy.stall();
    #[allow(deprecated)]
    first
        .client
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new("slow://one"))
        .await
        .expect("unsubscribed at the gateway");

    // Meanwhile another client subscribes to the live backend's resource ...
    let mut second = Listener::legacy(&gw.url()).await;
    let started = Instant::now();
    #[allow(deprecated)]
    second
        .client
        .subscribe(rmcp::model::SubscribeRequestParams::new("live://one"))
        .await
        .expect("subscribed to the live backend");
    let took = started.elapsed();
    assert!(
        took < TIMEOUT,
        "resources/subscribe on another backend's URI waited {took:?} on the stalled one"
    );
    assert_eq!(live.control().subscribed(), ["live://one"]);

    // ... and gets the live backend's update well within the timeout.
    let started = Instant::now();
    live.control().resource_updated("live://one").await;
    second.expect("updated live://one").await;
    let took = started.elapsed();
    assert!(
        took < TIMEOUT,
        "resources/updated from the live backend was held {took:?} behind the stalled one"
    );
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_backend_lets_every_concurrent_call_return_within_its_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(3);
    let mut backend = py_backend("frozen", &[]).await;
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: frozen, url: '{}'}}\noperational:\n  timeouts: {{default: 3s}}\n",
        backend.url
    )))
    .await;
    let url = gw.url();
    let call = json!({"name": "frozen_echo", "arguments": {"text": "hi"}});
    let (status, answer) = vmcp_tests::modern(&url, "tools/call", call.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["result"].is_object(),
        "the backend answers first: {answer}"
    );

    let pid = backend.child.id().expect("backend pid");
    signal(pid, "-STOP");
    // 8 calls at once on the open connection, then 8 more, a quarter second apart,
    // that find it retired and must reconnect to the frozen process: none may wait
    // for another's timeout.
    let at_once = frozen_calls(&url, &call, Duration::ZERO).await;
    let staggered = frozen_calls(&url, &call, Duration::from_millis(250)).await;
    signal(pid, "-CONT");
    for (wave, results) in [("at once", at_once), ("staggered", staggered)] {
        let took: Vec<_> = results.iter().map(|(took, _, _)| *took).collect();
        eprintln!("frozen backend, 8 calls {wave} returned after {took:?}");
        for (i, (took, status, answer)) in results.into_iter().enumerate() {
            // Each call's deadline runs from when the gateway received it, and a
            // timed-out call waits for nobody (before: 7 of 8 took 40 s against a
            // 30 s timeout, then up to 0.1 s more each behind another caller's
            // reconnect).
            assert!(
                took <= TIMEOUT + Duration::from_secs(1),
                "{wave}: call {i} returned after {took:?} (timeout {TIMEOUT:?}): {status} {answer}"
            );
            assert!(
                answer["error"].is_object() || answer["result"]["isError"] == true,
                "{wave}: call {i} is a timeout error: {answer}"
            );
        }
    }
    backend.kill().await;
}

/// 8 concurrent `tools/call`s, the i-th sent `i * gap` after the first: how long
/// each took from when it was sent, its HTTP status and its answer.
async fn frozen_calls(
    url: &str,
    call: &serde_json::Value,
    gap: Duration,
) -> Vec<(Duration, u16, serde_json::Value)> {
    let calls = (0..8u32).map(|i| {
        let (url, call) = (url.to_owned(), call.clone());
        // Built first (loading TLS roots takes a while under load), one per call so
        // each has a connection of its own.
        let client = reqwest::Client::new();
        tokio::spawn(async move {
            tokio::time::sleep(gap * i).await;
            let started = Instant::now();
            let (status, answer) = vmcp_tests::modern_with(&client, &url, "tools/call", call).await;
            (started.elapsed(), status, answer)
        })
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.expect("call task"))
        .collect()
}
