//! Local stdio servers as backends: server-everything spawned as a child process.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_tests::{Gateway, config, everything_command, gateway, names, py_client, status_json};

/// A gateway with server-everything as stdio backend `ev`; one failure is unhealthy
/// so that a killed process shows.
async fn everything_gateway() -> Gateway {
    let (node, entry) = everything_command();
    gateway(config(&format!(
        "backends:\n  - name: ev\n    transport: stdio\n    command: '{}'\n    args: ['{}', stdio]\n    env: {{GREETING: hello, HOME_COPY: {{fromEnv: PATH}}}}\noperational:\n  failureHandling: {{healthCheckInterval: 1s, unhealthyThreshold: 1}}\n",
        node.display(),
        entry.display()
    )))
    .await
}

/// The `ev` entry of `/status`.
async fn ev_status(gw: &Gateway) -> Value {
    let (code, status) = status_json(gw, "/status").await;
    assert_eq!(code, 200);
    status["backends"][0].clone()
}

/// Poll `/status` until `check` holds on the `ev` entry (bounded, 60 s).
async fn wait_status(gw: &Gateway, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ev = ev_status(gw).await;
        if check(&ev) {
            return ev;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} never happened; last status: {ev}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alive(pid: u64) -> bool {
    // A zombie (killed, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_everything_is_listed_and_called_on_both_revisions() {
    let gw = everything_gateway().await;
    let ev = ev_status(&gw).await;
    assert_eq!(ev["transport"], "stdio");
    assert_eq!(ev["health"], "healthy", "{ev}");
    assert_eq!(ev["mcp_revision"], "2025-11-25", "{ev}");
    // The status shows the process, never its command line or environment.
    assert!(ev["process"]["pid"].as_u64().is_some(), "{ev}");
    let text = ev.to_string();
    assert!(
        !text.contains("server-everything") && !text.contains("hello"),
        "{text}"
    );

    for mode in ["legacy", "auto"] {
        let report = py_client(
            &gw.url(),
            mode,
            json!([{"op": "list_tools"}, {"op": "call_tool", "name": "ev_echo", "arguments": {"message": "over stdio"}}]),
        )
        .await;
        let expected = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(report["protocol"], expected, "{report}");
        let tools = names(&report["results"][0], "tools", "name");
        assert!(tools.contains(&"ev_echo".to_owned()), "{tools:?}");
        assert_eq!(report["results"][1]["isError"], false, "{report}");
        assert!(
            report["results"][1]["text"]
                .as_str()
                .is_some_and(|t| t.contains("over stdio")),
            "{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_stdio_child_turns_unhealthy_and_comes_back_by_itself() {
    let gw = everything_gateway().await;
    let first = ev_status(&gw).await["process"]["pid"]
        .as_u64()
        .expect("a live child");
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let down = wait_status(&gw, "unhealthy after the kill", |ev| {
        ev["health"] == "unhealthy"
    })
    .await;
    assert!(
        down["process"]["last_exit"]
            .as_str()
            .is_some_and(|e| e.starts_with("exited after")),
        "{down}"
    );
    assert!(!alive(first), "the killed child is gone");
    // Restarted after the backoff, by the gateway alone (no call from us).
    let up = wait_status(&gw, "a restarted, healthy child", |ev| {
        ev["health"] == "healthy" && ev["process"]["pid"].as_u64().is_some_and(|p| p != first)
    })
    .await;
    assert_eq!(up["process"]["restarts"], 1, "{up}");
    let report = py_client(
        &gw.url(),
        "legacy",
        json!([{"op": "call_tool", "name": "ev_echo", "arguments": {"message": "again"}}]),
    )
    .await;
    assert!(
        report["results"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("again")),
        "{report}"
    );
    // Shutdown kills the child and returns only once it is gone.
    let second = up["process"]["pid"].as_u64().unwrap_or_default();
    gw.vmcp.shutdown().await;
    assert!(!alive(second), "child {second} survived shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_stdio_backend_kills_its_process_group() {
    let gw = everything_gateway().await;
    let pid = ev_status(&gw).await["process"]["pid"]
        .as_u64()
        .expect("a live child");
    assert!(alive(pid));
    gw.vmcp.reload(config("backends: []\n")).await.unwrap();
    assert!(!alive(pid), "child {pid} survived its removal");
}
