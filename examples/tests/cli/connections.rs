//! File-descriptor exhaustion: `vmcp serve` in a process allowed 1024 open files,
//! 2,000 idle and slow-header connections held open against it, and a client whose
//! calls keep succeeding meanwhile, with every backend still healthy afterwards
//! (the connection cap, half the limit by default, leaves descriptors for the
//! backends; at the cap the waiting connections are closed first).

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::serve::Serve;

/// The gateway's open-file limit.
const GATEWAY_NOFILE: u64 = 1024;
/// Connections the attacker holds open: about twice the gateway's limit.
const HELD: usize = 2000;

/// Make sure this process may hold the attacker's sockets and its own.
fn raise_own_nofile(needed: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < needed {
        assert!(
            hard >= needed,
            "this test holds {needed} sockets; the hard open-file limit is {hard}"
        );
        setrlimit(Resource::RLIMIT_NOFILE, needed, hard).expect("raise the soft limit");
    }
}

async fn call(client: &reqwest::Client, url: &str) -> Result<(), String> {
    let (status, body) = vmcp_tests::modern_with(
        client,
        url,
        "tools/call",
        json!({"name": "alpha_echo", "arguments": {"text": "still here"}}),
    )
    .await;
    if status == 200
        && body["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("still here"))
    {
        Ok(())
    } else {
        Err(format!("{status} {body}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_header_connections_exhaust_no_descriptors() {
    raise_own_nofile(HELD as u64 + 1024);
    let server = Serve::new().nofile(GATEWAY_NOFILE).start().await;
    let url = server.url();
    // A bounded wait per call (modern_with has none of its own), and a new
    // connection for every call: a client already connected proves nothing.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    call(&client, &url).await.expect("served before the flood");

    let port = server.port;
    let flood = tokio::spawn(async move {
        let mut held = Vec::with_capacity(HELD);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for i in 0..HELD {
            let connect = TcpStream::connect(("127.0.0.1", port));
            let Ok(Ok(mut stream)) = tokio::time::timeout_at(deadline, connect).await else {
                break;
            };
            if i % 2 == 1 {
                // Half a request head, never finished.
                let _ = stream
                    .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
                    .await;
            }
            held.push(stream);
        }
        held
    });
    let mut calls = 0;
    while !flood.is_finished() || calls < 20 {
        call(&client, &url)
            .await
            .unwrap_or_else(|e| panic!("call {calls} during the flood: {e}"));
        calls += 1;
    }
    let held = flood.await.unwrap();
    assert_eq!(held.len(), HELD, "the whole flood connected");

    // With the flood still held: more calls, each on a new connection...
    for n in 0..5 {
        call(&client, &url)
            .await
            .unwrap_or_else(|e| panic!("a call after the flood {n}: {e}"));
    }
    // ...and no backend was marked unhealthy or charged a failure.
    let status: serde_json::Value = client
        .get(server.at("/status"))
        .send()
        .await
        .expect("/status during the flood")
        .json()
        .await
        .unwrap();
    let backends = status["backends"].as_array().expect("backends");
    assert_eq!(backends.len(), 2, "{status}");
    for backend in backends {
        assert_eq!(backend["health"], "healthy", "{backend}");
        assert_eq!(backend["consecutive_failures"], 0, "{backend}");
    }
    drop(held);
}
