//! A FIFO given as the configuration file: `validate`, `serve` and a SIGHUP each
//! answer within a bound instead of waiting forever for a writer, and reloads after
//! a refused one still work.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use super::commands::{serve_demo_a, temp_file};
use super::serve::VMCP;

/// Replace `path` with a FIFO that nobody writes to.
fn make_fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

fn fifo(stem: &str) -> PathBuf {
    let path = temp_file(stem, "");
    make_fifo(&path);
    path
}

/// `vmcp <command> -c <fifo> …` must exit, with the refusal, within 10 s.
async fn refused_fast(args: &[&str], path: &Path) {
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        Command::new(VMCP)
            .args(args)
            .arg("-c")
            .arg(path)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("vmcp {args:?} on a FIFO did not exit in 10 s"))
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
}

#[tokio::test]
async fn validate_and_serve_refuse_a_fifo_without_waiting() {
    let path = fifo("fifo-start");
    refused_fast(&["validate"], &path).await;
    refused_fast(&["serve", "--port", "0"], &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_onto_a_fifo_is_refused_and_later_reloads_work() {
    use vmcp_examples::demo::{DemoSpec, spawn};
    use vmcp_tests::Listener;

    let (a, path, log, server) = serve_demo_a("fifo-reload").await;
    let b = spawn(DemoSpec::new("b", &["y"]), 0).await.unwrap();
    let mut session = Listener::legacy(&server.url()).await;
    assert_eq!(session.tools().await, ["a_x"]);

    make_fifo(&path);
    server.signal("-HUP");
    let refused = vmcp_tests::eventually(|| {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.contains("configuration reload refused") && l.contains("not a regular file")
        })
    })
    .await;
    assert!(refused, "the FIFO is refused within 10 s");
    assert_eq!(
        session.tools().await,
        ["a_x"],
        "the old configuration stays"
    );

    // The next SIGHUP is still answered.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(
        &path,
        format!(
            "backends:\n  - {{name: a, url: '{}'}}\n  - {{name: b, url: '{}'}}\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    server.signal("-HUP");
    session.expect("tools").await;
    assert_eq!(session.tools().await, ["a_x", "b_y"]);
}
