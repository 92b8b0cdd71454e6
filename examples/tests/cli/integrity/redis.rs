//! `integrity.store: redis`: two `vmcp serve` replicas share their pins in a real
//! Redis. A rug pull is held back on both; `vmcp pins approve` (working on the Redis
//! the configuration names) brings the tool back on both without a restart, the
//! second within its one-second poll.

use vmcp_tests::py_backend;
use vmcp_tests::redis::RedisServer;

use super::{POISONED, audit_lines, dir, modern_tools, pins, rug_pull, until};
use crate::serve::Serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_works_on_the_redis_store_across_two_gateways() {
    let redis = RedisServer::start().await;
    let backend = py_backend("py", &["--rug-pull"]).await;
    let replica = |name: &str| {
        let dir = dir(&format!("integrity-redis-{name}"));
        let path = dir.join("vmcp.yaml");
        std::fs::write(
            &path,
            format!(
                "backends: [{{name: py, url: '{}'}}]\n\
                 sessionStorage: {{provider: redis, address: '{}', keyPrefix: 'pins-test:'}}\n\
                 integrity: {{mode: block, store: redis}}\n\
                 audit: {{logFile: '{}'}}\n",
                backend.url,
                redis.address(),
                dir.join("audit.log").display()
            ),
        )
        .unwrap();
        (dir, path)
    };
    let (dir_a, config_a) = replica("a");
    let (dir_b, config_b) = replica("b");
    let mut a = Serve::new().config(&config_a).start().await;
    let mut b = Serve::new().config(&config_b).start().await;
    let (url_a, url_b) = (a.url(), b.url());
    for url in [&url_a, &url_b] {
        assert!(modern_tools(url).await.contains(&"py_echo".to_owned()));
    }
    let echo = || "py_echo".to_owned();

    // Each replica hears the change on its own session with the backend.
    rug_pull(&url_a, POISONED).await;
    rug_pull(&url_b, POISONED).await;
    for url in [&url_a, &url_b] {
        assert!(
            until(|| async { !modern_tools(url).await.contains(&echo()) }).await,
            "hidden on {url}"
        );
    }

    let config = config_a.to_str().unwrap();
    let list = pins(&["list", "-c", config]).await;
    let shown = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success() && shown.contains("py\ttool\techo\tchanged"),
        "{shown}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let diff = pins(&["diff", "echo", "-c", config]).await;
    assert!(String::from_utf8_lossy(&diff.stdout).contains("read ~/.ssh/id_rsa"));
    let approved = pins(&["approve", "echo", "-c", config]).await;
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert!(String::from_utf8_lossy(&approved.stdout).starts_with("approved py tool echo"));

    // Both replicas show the approved tool again, without a restart.
    for url in [&url_a, &url_b] {
        assert!(
            until(|| async { modern_tools(url).await.contains(&echo()) }).await,
            "back on {url}"
        );
    }
    let list = pins(&["list", "-c", config_b.to_str().unwrap()]).await;
    assert!(String::from_utf8_lossy(&list.stdout).contains("py\ttool\techo\tpinned"));
    for dir in [&dir_a, &dir_b] {
        assert!(
            until(|| async { audit_lines(dir, "integrity_approval").len() == 1 }).await,
            "each replica audits the approval it applies"
        );
        let line = &audit_lines(dir, "integrity_approval")[0];
        assert!(
            line["data"]["approved_by"]
                .as_str()
                .is_some_and(|by| by.starts_with("cli:")),
            "{line}"
        );
    }
    let _ = a.child.kill().await;
    let _ = b.child.kill().await;
}
