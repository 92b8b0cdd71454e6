//! Client connections over raw TCP (`operational.connections`): a connection that
//! sends no request head, or sends it too slowly, is closed after the header-read
//! timeout however it trickles; a kept-alive connection after the idle timeout; and
//! at the connection cap the connections waiting for a head are closed before a
//! client with a request is refused.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::{config, served_gateway};

/// Within this a closed connection must be seen closed (a sweep is at most 1 s).
const LIMIT: Duration = Duration::from_secs(10);

/// Read until the peer closes (`true`) or `within` passes (`false`); what was read
/// is discarded.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

async fn gateway(connections: &str) -> (vmcp_examples::demo::RunningDemo, vmcp_tests::Gateway) {
    let demo = spawn(DemoSpec::new("gh", &["echo"]), 0).await.unwrap();
    let gw = served_gateway(config(&format!(
        "backends: [{{name: gh, url: '{}'}}]\noperational:\n  connections: {connections}\n",
        demo.url()
    )))
    .await;
    (demo, gw)
}

async fn health(addr: SocketAddr) -> u16 {
    reqwest::get(format!("http://{addr}/health"))
        .await
        .map_or(0, |r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_slow_header_and_idle_connections_are_closed_after_their_timeouts() {
    let (_demo, gw) = gateway("{headerReadTimeout: 1s, idleTimeout: 3s}").await;
    let addr = gw.addr;
    let started = Instant::now();

    // Connected, sends nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Half a request head.
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A head that keeps trickling: one header line every 200 ms.
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    trickle.write_all(b"POST /mcp HTTP/1.1\r\n").await.unwrap();
    let trickling = tokio::spawn(async move {
        let mut n = 0u32;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let line = format!("x-slow-{n}: {n}\r\n");
            if trickle.write_all(line.as_bytes()).await.is_err() {
                return (trickle, n);
            }
            let mut probe = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(1), trickle.read(&mut probe)).await
            {
                return (trickle, n);
            }
            n += 1;
            if n > 200 {
                return (trickle, n);
            }
        }
    });
    // A kept-alive connection after one answered request.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "answered");
    let kept_idle_from = Instant::now();

    assert!(
        closed_within(&mut silent, LIMIT).await,
        "a silent connection is closed"
    );
    assert!(
        closed_within(&mut partial, LIMIT).await,
        "a partial head is closed"
    );
    let (_, lines) = tokio::time::timeout(LIMIT, trickling)
        .await
        .expect("a trickling head is closed")
        .unwrap();
    assert!(lines < 200, "closed while it trickled ({lines} lines)");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "not before the header-read timeout"
    );
    // The idle connection outlives the header-read timeout (it waits for no head)...
    assert!(
        kept_idle_from.elapsed() < Duration::from_millis(2500),
        "the machine is too slow for the timing below"
    );
    assert!(
        !closed_within(
            &mut kept,
            Duration::from_millis(2500) - kept_idle_from.elapsed()
        )
        .await,
        "an idle kept-alive connection is kept past the header-read timeout"
    );
    // ...and is closed after the idle timeout.
    assert!(
        closed_within(&mut kept, LIMIT).await,
        "an idle kept-alive connection is closed after the idle timeout"
    );
    assert_eq!(health(addr).await, 200, "and the server still serves");
}

/// At the cap, connections waiting for a request head are closed to make room for
/// new ones; a client whose requests come promptly is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_waiting_connections_make_room_for_a_client_with_requests() {
    let (_demo, gw) = gateway("{maxConnections: 50, headerReadTimeout: 1h, idleTimeout: 1h}").await;
    let url = gw.url();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let call = || async {
        let (status, body) = vmcp_tests::modern_with(
            &client,
            &url,
            "tools/call",
            json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body["result"].is_object(), "{body}");
    };
    call().await;
    let mut held = Vec::new();
    for i in 0..200 {
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        if i % 2 == 1 {
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
                .await
                .unwrap();
        }
        held.push(stream);
        if i % 20 == 0 {
            call().await;
        }
    }
    // Four times the cap held open by the client: the oldest were closed...
    assert!(
        closed_within(&mut held[0], LIMIT).await,
        "the longest-waiting connection was closed at the cap"
    );
    // ...and a new client is served too.
    let fresh = reqwest::Client::new();
    let (status, _) = vmcp_tests::modern_with(&fresh, &url, "tools/list", json!({})).await;
    assert_eq!(status, 200);
    call().await;
}
