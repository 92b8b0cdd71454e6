//! The bundled server with a stdio backend and the status page: no child outlives
//! its SIGTERM, and an open `/ui/events` stream does not hold the shutdown up.

use std::time::Duration;

use vmcp_tests::everything_command;

use super::serve::Serve;

fn alive(pid: u64) -> bool {
    // A zombie (killed, not yet reaped by whoever inherited it) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The pids of `parent`'s children.
fn children(parent: u64) -> Vec<u64> {
    let out = std::process::Command::new("ps")
        .args(["-o", "pid=", "--ppid", &parent.to_string()])
        .output()
        .expect("run ps");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stdio_child_survives_the_gateways_sigterm() {
    let (node, entry) = everything_command();
    let dir = std::env::temp_dir().join(format!("vmcp-stdio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vmcp.yaml");
    // The shell leaves a grandchild (`sleep`) in the child's process group before it
    // becomes server-everything: the whole group must go.
    std::fs::write(
        &path,
        format!(
            "backends:\n  - name: ev\n    transport: stdio\n    command: sh\n    args: ['-c', 'sleep 600 & exec \"$0\" \"$1\" stdio', '{}', '{}']\n    cwd: '{}'\n",
            node.display(),
            entry.display(),
            dir.display()
        ),
    )
    .unwrap();
    let mut server = Serve::new().args(["--ui"]).config(&path).start().await;
    let status: serde_json::Value = reqwest::get(server.at("/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ev = &status["backends"][0];
    assert_eq!(ev["health"], "healthy", "{status}");
    let child = ev["process"]["pid"].as_u64().expect("the child's pid");
    let grandchildren = children(child);
    assert!(!grandchildren.is_empty(), "the shell's sleep is running");
    assert!(alive(child));

    // A browser's live stream stays open across the SIGTERM.
    let mut live = reqwest::get(server.at("/ui/events")).await.unwrap();
    assert_eq!(live.status(), 200);
    let first = live.chunk().await.unwrap().unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&first).contains("data-backend=\"ev\""),
        "the stream starts with the rendered page"
    );

    let exit = server.terminate(Duration::from_secs(20)).await;
    assert!(exit.success(), "graceful exit, got {exit}");
    // SIGKILL is delivered at once but acted on when the victim is next scheduled: on a
    // loaded machine, give the kernel a bounded moment to finish the kill.
    for pid in std::iter::once(child).chain(grandchildren) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await; // polling, not synchronising
        }
        assert!(!alive(pid), "process {pid} survived the gateway's SIGTERM");
    }
}
