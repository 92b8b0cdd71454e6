//! `vmcp serve` against a real redis-server that speaks TLS only, with a password on
//! its default user and an ACL user: the credentials come from
//! `VMCP_SESSION_REDIS_PASSWORD` (`password`, or `user:password`), the server's
//! certificate chains to `sessionStorage.caBundlePath` (a private CA, on top of the
//! default roots, of which the platform store is one), a session's record is written as the ACL user, and a wrong
//! password leaves the replica not ready without the password in its log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::redis::{RedisOptions, RedisServer};
use vmcp_tests::tls::TestCa;

use crate::serve::{Serve, Server};

const NEVER_LOGGED: &str = "p4ss-never-logged";

/// `/readyz`: status and reason.
async fn readyz(server: &Server) -> (u16, String) {
    let response = reqwest::get(server.at("/readyz"))
        .await
        .expect("GET /readyz");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["reason"].as_str().unwrap_or("").to_string())
}

/// Wait (bounded) until `/readyz` answers `want`.
async fn until_readyz(server: &Server, want: (u16, &str)) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let got = readyz(server).await;
        if (got.0, got.1.as_str()) == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz is {got:?}, not {want:?}, after 15 s: {}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_an_acl_user_from_the_environment() {
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-storage", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::generate("redis private CA");
    let redis = RedisServer::start_with(RedisOptions {
        tls: Some(ca.server_cert("redis")),
        password: Some("default-secret".into()),
        acl_user: Some(("vmcp".into(), "acl-secret".into())),
    })
    .await;
    let backend = spawn(DemoSpec::new("alpha", &["add"]), 0).await.unwrap();
    // A configuration `name` on this Redis, with `caBundlePath: bundle` if any.
    let write = |name: &str, bundle: Option<PathBuf>| {
        let path = dir.join(name);
        let bundle = bundle.map_or(String::new(), |b| {
            format!("caBundlePath: '{}', ", b.display())
        });
        std::fs::write(
            &path,
            format!(
                "backends: [{{name: alpha, url: '{}'}}]\n\
                 sessionStorage: {{provider: redis, address: '{}', {bundle}keyPrefix: 'ss:'}}\n",
                backend.url(),
                redis.address(),
            ),
        )
        .unwrap();
        path
    };
    // `vmcp serve` of `config` with the Redis password `password`, logging to `log`.
    let serve = |config: &Path, password: &str, log: &str| {
        Serve::new()
            .config(config)
            .env("VMCP_SESSION_REDIS_PASSWORD", password)
            .stderr_to(dir.join(log))
    };
    let config = write("vmcp.yaml", Some(ca.ca_file()));

    // The ACL user: ready, and a session's record is written by that user.
    let acl = serve(&config, "vmcp:acl-secret", "acl.log").start().await;
    until_readyz(&acl, (200, "")).await;
    let response = reqwest::Client::new()
        .post(acl.url())
        .header("Accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "storage-test", "version": "1"}}}),
        )
        .send()
        .await
        .expect("initialize");
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("a Legacy session id")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        redis
            .cli(&["EXISTS", &format!("ss:session:{session}")])
            .await,
        "1",
        "the record is in Redis before the initialize answer left"
    );
    // (redis-cli connects as the ACL user too: its own line is the CLIENT LIST.)
    let clients = redis.cli(&["CLIENT", "LIST"]).await;
    assert!(
        clients
            .lines()
            .any(|l| l.contains(" user=vmcp ") && !l.contains(" cmd=client")),
        "vmcp is connected as the ACL user: {clients}"
    );

    // Without caBundlePath the server's CA must be among the default roots, which
    // include the platform store: through SSL_CERT_FILE it is, and vmcp is ready;
    // with the platform store left alone it is not (a private CA is trusted only
    // where it is configured).
    let no_bundle = write("no-bundle.yaml", None);
    let platform = serve(&no_bundle, "vmcp:acl-secret", "platform.log")
        .env("SSL_CERT_FILE", ca.ca_file())
        .start()
        .await;
    until_readyz(&platform, (200, "")).await;
    let untrusted = serve(&no_bundle, "vmcp:acl-secret", "untrusted.log")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .start()
        .await;
    until_readyz(&untrusted, (503, "session_storage_unavailable")).await;

    // caBundlePath adds to the defaults, it does not replace them: a bundle of
    // another CA, with the server's CA in the platform store, is ready too.
    let other = TestCa::generate("an unrelated CA");
    let added = write("added.yaml", Some(other.ca_file()));
    let both = serve(&added, "vmcp:acl-secret", "both.log")
        .env("SSL_CERT_FILE", ca.ca_file())
        .start()
        .await;
    until_readyz(&both, (200, "")).await;

    // A bare password is the default user's.
    let default_user = serve(&config, "default-secret", "default.log")
        .start()
        .await;
    until_readyz(&default_user, (200, "")).await;

    // A wrong password: not ready, and the password is not in the log.
    let wrong = serve(&config, &format!("vmcp:{NEVER_LOGGED}"), "wrong.log")
        .start()
        .await;
    until_readyz(&wrong, (503, "session_storage_unavailable")).await;
    let status = reqwest::get(wrong.at("/status"))
        .await
        .expect("GET /status")
        .text()
        .await
        .unwrap();
    for (what, text) in [
        ("the wrong replica's log", wrong.logs()),
        ("its /status", status),
        ("the ACL replica's log", acl.logs()),
    ] {
        assert!(!text.contains(NEVER_LOGGED), "{what}: {text}");
        assert!(!text.contains("acl-secret"), "{what}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
