//! `sessionStorage: {provider: redis}` against a real Redis (Debian's redis-server,
//! one per test): `/readyz` is 503 while Redis is unreachable and 200 once it is
//! back, a dead Redis breaks nothing already served, and `rediss://` is verified
//! against `caBundlePath`.

use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::redis::{RedisOptions, RedisServer};
use vmcp_tests::tls::TestCa;
use vmcp_tests::{config, eventually, gateway, modern, status_json};

fn storage_config(backend: &str, storage: &str) -> vmcp_service::config::VmcpConfig {
    config(&format!(
        "backends: [{{name: alpha, url: '{backend}'}}]\nsessionStorage: {storage}\n"
    ))
}

/// `/readyz`: its status code and the reason it gives for not being ready.
async fn readyz(gw: &vmcp_tests::Gateway) -> (u16, String) {
    let (code, body) = status_json(gw, "/readyz").await;
    (code, body["reason"].as_str().unwrap_or("").to_string())
}

const DOWN: (u16, &str) = (503, "session_storage_unavailable");

/// `/readyz` is 503 `session_storage_unavailable` while Redis is down and 200
/// once it is back; calls keep working throughout, and the gateway started
/// although Redis came only later.
#[tokio::test]
async fn readyz_follows_redis_and_calls_do_not_depend_on_it() {
    let backend = spawn(DemoSpec::new("alpha", &["add"]), 0).await.unwrap();
    let mut redis = RedisServer::start().await;
    let address = redis.address();
    redis.kill().await;
    // Redis is down at start: the gateway starts, and says it is not ready.
    let gw = gateway(storage_config(
        &backend.url(),
        &format!("{{provider: redis, address: '{address}', keyPrefix: 'it:'}}"),
    ))
    .await;
    let store = gw.vmcp.shared_store().expect("a redis store").clone();
    assert!(store.ping().await.is_err(), "Redis is down");
    assert_eq!(readyz(&gw).await, (DOWN.0, DOWN.1.into()));
    let (code, answer) = modern(
        &gw.url(),
        "tools/call",
        json!({"name": "alpha_add", "arguments": {"a": 1, "b": 2}}),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    redis.restart().await;
    assert!(
        eventually(|| store.is_up()).await,
        "the probe sees Redis back"
    );
    assert_eq!(readyz(&gw).await, (200, String::new()));
    assert_eq!(store.key("x"), "it:x");

    redis.kill().await;
    assert!(
        eventually(|| !store.is_up()).await,
        "the probe sees Redis die"
    );
    assert_eq!(readyz(&gw).await, (DOWN.0, DOWN.1.into()));
    let (code, answer) = modern(
        &gw.url(),
        "tools/call",
        json!({"name": "alpha_add", "arguments": {"a": 2, "b": 2}}),
    )
    .await;
    assert_eq!(
        (code, answer["result"]["isError"].clone()),
        (200, json!(false)),
        "{answer}"
    );
}

/// `rediss://` is verified: the CA of `caBundlePath` is trusted, another is not.
#[tokio::test]
async fn rediss_is_verified_against_the_ca_bundle() {
    let backend = spawn(DemoSpec::new("alpha", &["add"]), 0).await.unwrap();
    let ca = TestCa::generate("redis test CA");
    let redis = RedisServer::start_with(RedisOptions {
        tls: Some(ca.server_cert("redis")),
        ..Default::default()
    })
    .await;
    let trusted = gateway(storage_config(
        &backend.url(),
        &format!(
            "{{provider: redis, address: '{}', caBundlePath: '{}'}}",
            redis.address(),
            ca.ca_file().display()
        ),
    ))
    .await;
    let store = trusted.vmcp.shared_store().unwrap().clone();
    store.ping().await.expect("PING over TLS with the right CA");
    assert!(eventually(|| store.is_up()).await);
    assert_eq!(readyz(&trusted).await, (200, String::new()));

    let other = TestCa::generate("some other CA");
    let refused = gateway(storage_config(
        &backend.url(),
        &format!(
            "{{provider: redis, address: '{}', caBundlePath: '{}'}}",
            redis.address(),
            other.ca_file().display()
        ),
    ))
    .await;
    let err = refused
        .vmcp
        .shared_store()
        .unwrap()
        .ping()
        .await
        .expect_err("an untrusted server certificate");
    assert!(
        err.is_unavailable() || err.to_string().contains("certificate"),
        "{err}"
    );
    assert_eq!(readyz(&refused).await, (DOWN.0, DOWN.1.into()));
}
