//! The bundled server's command line, run as a real process.

use std::time::Duration;

use serde_json::json;
use tokio::process::Command;
use vmcp_tests::stacked::{LegacySession, tool_names};
use vmcp_tests::{names, py_client};

use super::serve::{Serve, VMCP};

pub(super) fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vmcp.yaml");
    std::fs::write(&path, contents).unwrap();
    path
}

/// Demo backend `a` (tool `x`), a configuration file `stem` naming it, and `vmcp
/// serve` on that file logging at `info` to the file's `.log` sibling: the start of
/// the reload tests.
pub(super) async fn serve_demo_a(
    stem: &str,
) -> (
    vmcp_examples::demo::RunningDemo,
    std::path::PathBuf,
    std::path::PathBuf,
    super::serve::Server,
) {
    use vmcp_examples::demo::{DemoSpec, spawn};
    let a = spawn(DemoSpec::new("a", &["x"]), 0).await.unwrap();
    let path = temp_file(
        stem,
        &format!("backends:\n  - {{name: a, url: '{}'}}\n", a.url()),
    );
    let log = path.with_extension("log");
    let server = Serve::new()
        .config(&path)
        .env("RUST_LOG", "info")
        .stderr_to(&log)
        .start()
        .await;
    (a, path, log, server)
}

#[tokio::test]
async fn validate_names_every_invalid_field() {
    let path = temp_file(
        "invalid",
        r#"
backends:
  - {name: a, url: "ftp://x", transport: websocket}
  - {name: a, url: "http://127.0.0.1:1/mcp"}
  - {url: "http://x"}
aggregation:
  conflictResolution: priority
  defaultToolVisibility: maybe
  pageSize: 5000
  tools:
    - workload: ghost
      overrides: {t: {name: "bad name", annotations: {readOnlyHint: "yes", color: red}}}
operational:
  timeouts: {perWorkload: {nobody: 3s, a: 0s}, default: 0s}
"#,
    );
    let out = Command::new(VMCP)
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "backends[0].url must start with http:// or https://",
        "backends[0].transport must be \"sse\", \"streamable-http\" or \"stdio\" (got \"websocket\")",
        "backends[1].name \"a\" is used by another backend",
        "backends[2].name is required",
        "aggregation.conflictResolutionConfig.priorityOrder is required when conflictResolution is \"priority\"",
        "aggregation.defaultToolVisibility must be \"allow\" or \"deny\" (got \"maybe\")",
        "aggregation.pageSize must be between 1 and 1000 (got 5000)",
        "aggregation.tools[0].workload \"ghost\" is not a configured backend",
        "aggregation.tools[0].overrides.t.name \"bad name\" must match ^[a-zA-Z0-9_-]{1,64}$",
        "aggregation.tools[0].overrides.t.annotations.readOnlyHint must be true or false",
        "aggregation.tools[0].overrides.t.annotations.color is not a tool annotation",
        "operational.timeouts.perWorkload.nobody is not a configured backend",
        "operational.timeouts.perWorkload.a must be greater than 0",
        "operational.timeouts.default must be greater than 0",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");

    let path = temp_file("syntax", "backends:\n  - name: a\n    url: [1, 2]\n");
    let out = Command::new(VMCP)
        .args(["validate", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("backends[0].url"), "{stderr}");

    let out = Command::new(VMCP)
        .args(["validate", "-c", "/nonexistent/vmcp.yaml"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/vmcp.yaml"));
}

#[tokio::test]
async fn init_writes_a_starter_that_validates_and_refuses_to_overwrite() {
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-init", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("starter.yaml");
    let out = Command::new(VMCP)
        .args(["init", "-o"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(VMCP)
        .args(["validate", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid (2 backend(s))"));
    let out = Command::new(VMCP)
        .args(["init", "-o"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(
        !out.status.success(),
        "init must not overwrite without --force"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_the_embedded_default_in_all_three_client_modes() {
    let mut server = Serve::new().start().await;
    let url = server.url();
    for (mode, protocol) in [
        ("auto", "2026-07-28"),
        ("legacy", "2025-11-25"),
        ("2026-07-28", "2026-07-28"),
    ] {
        let report = py_client(
            &url,
            mode,
            json!([
                {"op": "list_tools"},
                {"op": "call_tool", "name": "alpha_echo", "arguments": {"text": "hi"}},
                {"op": "call_tool", "name": "beta_echo", "arguments": {"text": "hi"}},
                {"op": "call_tool", "name": "beta_upper", "arguments": {"text": "hi"}},
                {"op": "call_tool", "name": "shout", "arguments": {"text": "hi"}}
            ]),
        )
        .await;
        assert_eq!(report["protocol"], protocol, "{report}");
        let r = &report["results"];
        assert_eq!(
            names(&r[0], "tools", "name"),
            [
                "alpha_add",
                "alpha_echo",
                "beta_echo",
                "beta_upper",
                "shout"
            ],
            "{mode}: the colliding echo is prefixed per backend; the composite keeps its name"
        );
        assert_eq!(r[1]["text"], "alpha: hi");
        assert_eq!(r[2]["text"], "beta: hi");
        assert_eq!(r[3]["text"], "HI");
        assert_eq!(r[4]["text"], "ALPHA: HI", "{mode}: the embedded composite");
    }

    // SIGTERM stops it gracefully, even with a Legacy client's GET stream open.
    let _stream = LegacySession::open(&url, None).await.stream().await;
    let status = server.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "graceful exit, got {status}");
}

#[tokio::test]
async fn serve_refuses_an_invalid_config_without_starting() {
    let path = temp_file("serve-invalid", "backends: [{name: a, url: nope}]\n");
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        Command::new(VMCP)
            .args(["serve", "-c"])
            .arg(&path)
            .args(["--port", "0"])
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("backends[0].url must start with http:// or https://")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_file_under_a_live_session() {
    use vmcp_examples::demo::{DemoSpec, spawn};
    use vmcp_tests::Listener;

    let (a, path, log, mut server) = serve_demo_a("reload").await;
    let b = spawn(DemoSpec::new("b", &["y"]), 0).await.unwrap();
    let url = server.url();
    let mut session = Listener::legacy(&url).await;
    assert_eq!(session.tools().await, ["a_x"]);

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

    // An invalid file is refused; the running configuration stays.
    std::fs::write(&path, "backends: [{name: a, url: nope}]\n").unwrap();
    server.signal("-HUP");
    let refused = vmcp_tests::eventually(|| {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.contains("configuration reload refused")
                && l.contains("backends[0].url must start with http:// or https://")
        })
    })
    .await;
    assert!(refused, "the invalid file is refused with its error");
    assert_eq!(
        session.tools().await,
        ["a_x", "b_y"],
        "still the running configuration"
    );
    std::fs::write(
        &path,
        format!("backends:\n  - {{name: b, url: '{}'}}\n", b.url()),
    )
    .unwrap();
    server.signal("-HUP");
    session.expect("tools").await;
    assert_eq!(
        session.tools().await,
        ["b_y"],
        "the session outlived both reloads"
    );
    let status: serde_json::Value = reqwest::get(server.at("/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["backends"].as_array().unwrap().len(), 1, "{status}");
    let _ = server.child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_puts_the_layer_stack_in_front_when_configured() {
    use vmcp_examples::demo::{DemoSpec, spawn};
    use vmcp_tests::stacked::{modern_as, tool_names};

    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-layers", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.log");
    let _ = std::fs::remove_file(&audit);
    let path = temp_file(
        "layers",
        &format!(
            r#"
name: eng
backends: [{{name: gh, url: '{}'}}]
incomingAuth:
  type: anonymous
  authz:
    type: cedar
    policies: ['permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");']
audit: {{logFile: '{}'}}
telemetry: {{enablePrometheusMetricsPath: true}}
"#,
            gh.url(),
            audit.display()
        ),
    );
    let mut server = Serve::new().config(&path).start().await;
    let url = server.url();

    let list = modern_as(&url, None, "tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["gh_echo"], "the list is filtered");
    let denied = modern_as(
        &url,
        None,
        "tools/call",
        json!({"name": "gh_add", "arguments": {"a": 1, "b": 2}}),
    )
    .await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.body["error"]["code"], 403);
    let metrics = reqwest::get(server.at("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("vmcp_requests_total{mcp_method=\"tools/call\"} 1"),
        "{metrics}"
    );

    let status = server.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "graceful exit, got {status}");
    let lines = std::fs::read_to_string(&audit).unwrap();
    let outcomes: Vec<String> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["outcome"].to_string())
        .collect();
    assert_eq!(outcomes, ["\"success\"", "\"denied\""], "{lines}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_the_cedar_policies_under_a_live_session() {
    use vmcp_examples::demo::{DemoSpec, spawn};

    let gh = spawn(DemoSpec::new("gh", &["echo", "add"]), 0)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-hup-authz", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.log");
    let _ = std::fs::remove_file(&audit);
    let file = |policies: &[&str]| {
        let policies: Vec<String> = policies.iter().map(|p| format!("'{p}'")).collect();
        format!(
            "backends: [{{name: gh, url: '{}'}}]\nincomingAuth:\n  type: anonymous\n  authz:\n    type: cedar\n    policies: [{}]\naudit: {{logFile: '{}'}}\n",
            gh.url(),
            policies.join(", "),
            audit.display()
        )
    };
    let echo = r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");"#;
    let add = r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_add");"#;
    let path = temp_file("hup-authz", &file(&[echo, add]));
    let mut server = Serve::new().config(&path).start().await;
    let url = server.url();
    let mut session = LegacySession::open(&url, None).await;
    let call = json!({"name": "gh_add", "arguments": {"a": 1, "b": 2}});
    let ok = session.request("tools/call", call.clone()).await;
    assert_eq!(
        ok.body["result"]["content"][0]["text"], "3",
        "{:?}",
        ok.body
    );
    let reloads = |outcome: &str| {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(r#""type":"config_reload""#) && l.contains(outcome))
            .count()
    };

    // Tightened: the next call in the same session is denied; the session lives on.
    std::fs::write(&path, file(&[echo])).unwrap();
    server.signal("-HUP");
    assert!(
        vmcp_tests::eventually(|| reloads(r#""outcome":"success""#) == 1).await,
        "the reload is audited"
    );
    let denied = session.request("tools/call", call.clone()).await;
    assert_eq!(denied.status, 403, "{:?}", denied.body);
    let echo_call = json!({"name": "gh_echo", "arguments": {"text": "hi"}});
    let still = session.request("tools/call", echo_call.clone()).await;
    assert_eq!(
        still.body["result"]["content"][0]["text"], "gh: hi",
        "session kept"
    );

    // A file with a broken policy is refused as a whole, even the part that would
    // allow gh_add again; the tightened policy still applies.
    std::fs::write(&path, file(&[echo, add, "permit(principal, action"])).unwrap();
    server.signal("-HUP");
    assert!(
        vmcp_tests::eventually(|| reloads(r#""outcome":"failure""#) == 1).await,
        "the refused reload is audited"
    );
    let denied = session.request("tools/call", call).await;
    assert_eq!(
        denied.status, 403,
        "old policy still applies: {:?}",
        denied.body
    );
    let still = session.request("tools/call", echo_call).await;
    assert_eq!(still.status, 200);
    let _ = server.child.kill().await;
}

/// A SIGHUP that finds 100,000 levels of flow nesting in the file is refused without
/// stalling the gateway (the check runs before parsing, and the load off the async
/// runtime; a quadratic parse of it once held requests for ~55 s): a live session's
/// requests around the reload are answered promptly, and the old configuration stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_reload_is_refused_without_delaying_requests() {
    use std::time::Instant;

    let (_a, path, log, mut server) = serve_demo_a("reload-hostile").await;
    let url = server.url();
    let mut session = LegacySession::open(&url, None).await;
    assert_eq!(session.request("tools/list", json!({})).await.status, 200);

    std::fs::write(
        &path,
        format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    server.signal("-HUP");
    let refused = || {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.contains("configuration reload refused") && l.contains("nested deeper than 64")
        })
    };
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    while !refused() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the reload was not refused in 10 s"
        );
        let asked = Instant::now();
        let reply = session.request("tools/list", json!({})).await;
        slowest = slowest.max(asked.elapsed());
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(tool_names(&reply), ["a_x"]);
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a request waited {slowest:?} during the reload"
    );
    let after = session.request("tools/list", json!({})).await;
    assert_eq!(tool_names(&after), ["a_x"], "the old configuration stays");
    let _ = server.child.kill().await;
}

/// `vmcp validate` on hostile files fails fast with a clear error: 100,000 levels of
/// flow nesting (the parser is quadratic in depth: minutes), `/dev/zero` (endless),
/// a file over the size limit, and one listing a million unknown keys.
#[tokio::test]
async fn validate_refuses_hostile_files_fast() {
    let deep = temp_file(
        "deep",
        &format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    );
    let big = temp_file("big", &format!("a: \"{}\"\n", "x".repeat(5 * 1024 * 1024)));
    let cases = [
        (deep, "nested deeper than 64 levels at line 1"),
        ("/dev/zero".into(), "not a regular file"),
        (big, "larger than 4194304 bytes"),
    ];
    for (path, expected) in cases {
        let started = std::time::Instant::now();
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(VMCP)
                .args(["validate", "-c"])
                .arg(&path)
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("validate {} did not finish in 30 s", path.display()))
        .unwrap();
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: {stderr}", path.display());
        assert!(stderr.contains(expected), "{}: {stderr}", path.display());
        assert!(
            took < Duration::from_secs(2),
            "{} took {took:?}",
            path.display()
        );
    }

    // Unknown keys are reported, but only the first hundred are listed.
    let mut many = String::new();
    for i in 0..5_000 {
        many.push_str(&format!("k{i}: 1\n"));
    }
    let path = temp_file("many", &many);
    let out = Command::new(VMCP)
        .args(["validate", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let listed = stderr.matches("is not used by vmcp").count();
    assert_eq!(listed, 100, "{stderr}");
    assert!(stderr.contains("4900 more configuration keys"), "{stderr}");
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One Legacy session: initialize, initialized, DELETE.
async fn session_cycle(client: &reqwest::Client, url: &str) {
    let deleted = LegacySession::open_with(client, url, None)
        .await
        .delete()
        .await;
    assert!((200..300).contains(&deleted), "{deleted}");
}

/// 10 cycles of 2,000 Legacy sessions opened and DELETEd leave the gateway's RSS
/// within 10% of where it stood after the first cycle (before the fix each session
/// left ~15 KB behind: +30 MB per cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_sessions_leave_rss_flat() {
    let mut server = Serve::new().start().await;
    let pid = server.pid();
    let url = server.url();
    let client = reqwest::Client::new();
    let mut samples = Vec::new();
    for _ in 0..10 {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (client, url) = (client.clone(), url.clone());
            workers.spawn(async move {
                for _ in 0..125 {
                    session_cycle(&client, &url).await;
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done.unwrap();
        }
        samples.push(rss_kib(pid));
    }
    let _ = server.child.kill().await;
    // The first cycle warms allocator arenas and connection pools: the baseline.
    let (baseline, last) = (samples[0], samples[samples.len() - 1]);
    println!("gateway RSS after each cycle of 2,000 sessions (KiB): {samples:?}");
    assert!(
        last * 10 <= baseline * 11,
        "RSS grew from {baseline} KiB to {last} KiB over 10 cycles: {samples:?}"
    );
}
