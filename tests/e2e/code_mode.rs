//! Code mode end to end, with the Python SDK client on both revisions against the
//! Python SDK backend: `execute_tool_script` calls three tools sequentially and in
//! parallel (the backend's timestamps show the parallel calls overlapped); under
//! Cedar a forbidden tool is as absent as a nonexistent one and each inner call has
//! its own audit line under its real name; runaway scripts (an endless loop, deep
//! recursion, a 100 MB string, too many steps) end cleanly within the cap and the
//! gateway's memory returns to where it was.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vmcp_tests::stacked::stacked_gateway;
use vmcp_tests::{config, gateway, py_backend, py_client};

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

fn script(source: &str) -> Value {
    json!({"op": "call_tool", "name": "execute_tool_script", "arguments": {"script": source}})
}

fn listed(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The script's returned value.
fn returned(result: &Value) -> &Value {
    assert_eq!(result["isError"], false, "{result}");
    &result["structured"]["result"]
}

fn yaml(url: &str, extra: &str) -> String {
    format!("name: eng\nbackends:\n  - {{name: py, url: '{url}'}}\n{extra}")
}

/// A tool's value: the Python SDK wraps a plain return value as `{"result": ..}`.
const UNWRAP: &str =
    "def v(r):\n    return r['result'] if type(r) == 'dict' and 'result' in r else r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tools_sequentially_and_in_parallel_on_both_revisions() {
    let py = py_backend("py", &["--timed-tools"]).await;
    let gw = gateway(config(&yaml(&py.url, "codeMode: {enabled: true}\n"))).await;
    let sequential = format!(
        "{UNWRAP}e = v(py_echo(text=data_text))\ns = v(py_add(a=2, b=40))\n\
         t = py_timed(tag='seq', seconds=0.05)\nreturn {{'echo': e, 'sum': s, 'timed': t['tag']}}\n"
    )
    .replace("data_text", "'hi'");
    let parallel = "r = parallel([lambda: py_timed(tag='p1', seconds=0.6), \
                    lambda: py_timed(tag='p2', seconds=0.6), \
                    lambda: py_timed(tag='p3', seconds=0.6)])\nreturn r\n";
    for mode in MODES {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                script(&sequential),
                script(parallel),
                {"op": "call_tool", "name": "execute_tool_script",
                 "arguments": {"script": "return data['n'] * 2", "data": {"n": 21}}},
            ]),
        )
        .await;
        let r = &report["results"];
        let tools = listed(&r[0]);
        assert!(
            tools.contains(&"execute_tool_script".to_owned()) && tools.contains(&"py_echo".into()),
            "{mode}: {tools:?}"
        );
        let seq = returned(&r[1]);
        assert!(
            seq["echo"].as_str().unwrap().contains("hi"),
            "{mode}: {seq}"
        );
        assert_eq!(seq["sum"], 42, "{mode}: {seq}");
        assert_eq!(seq["timed"], "seq", "{mode}: {seq}");
        let calls = returned(&r[2]).as_array().expect("a list of results");
        let tags: Vec<&str> = calls.iter().map(|c| c["tag"].as_str().unwrap()).collect();
        assert_eq!(tags, ["p1", "p2", "p3"], "{mode}: results in order");
        // Overlapped: every call started before any of them ended.
        let latest_start = calls
            .iter()
            .map(|c| c["start"].as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        let earliest_end = calls
            .iter()
            .map(|c| c["end"].as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        assert!(
            latest_start < earliest_end,
            "{mode}: the parallel calls did not overlap: {calls:?}"
        );
        assert_eq!(returned(&r[3]), 42, "{mode}: data is a global");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_cedar_forbidden_is_nonexistent_and_each_call_is_audited() {
    let py = py_backend("py", &["--timed-tools"]).await;
    let dir = std::env::temp_dir().join(format!("vmcp-code-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let extra = format!(
        r#"codeMode: {{enabled: true}}
incomingAuth:
  type: anonymous
  authz:
    type: cedar
    policies:
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"py_echo");'
      - 'permit(principal, action == Action::"call_tool", resource == Tool::"py_timed");'
      - 'forbid(principal, action == Action::"call_tool", resource == Tool::"py_timed") when {{ context.arguments has tag && context.arguments.tag == "secret" }};'
audit:
  logFile: '{}'
"#,
        log.display()
    );
    let gw = stacked_gateway(config(&yaml(&py.url, &extra))).await;
    for mode in MODES {
        let report = py_client(
            &gw.url(),
            mode,
            json!([
                {"op": "list_tools"},
                script("x = 1\nreturn py_add(a=1, b=2)\n"),
                script("x = 1\nreturn py_nope(a=1, b=2)\n"),
                script("a = py_echo(text='one')\nb = py_echo(text='two')\n\
                        c = py_timed(tag='t', seconds=0.01)\nreturn [a, b, c['tag']]\n"),
                // Admitted by name, refused for these arguments: as a nonexistent
                // tool's call would be, at run time.
                script("return py_timed(tag='secret', seconds=0.01)\n"),
            ]),
        )
        .await;
        let r = &report["results"];
        assert_eq!(
            listed(&r[0]),
            ["execute_tool_script", "py_echo", "py_timed"],
            "{mode}"
        );
        for forbidden in [&r[1], &r[2]] {
            assert_eq!(forbidden["isError"], true, "{mode}: {forbidden}");
        }
        let same = |v: &Value, name: &str| v.to_string().replace(name, "TOOL");
        assert_eq!(
            same(&r[1], "py_add"),
            same(&r[2], "py_nope"),
            "{mode}: forbidden vs nonexistent"
        );
        assert_eq!(r[1]["structured"]["error"]["line"], 2, "{mode}: {}", r[1]);
        assert_eq!(returned(&r[3])[2], "t", "{mode}: {}", r[3]);
        assert_eq!(r[4]["isError"], true, "{mode}: {}", r[4]);
        assert!(
            r[4]["text"]
                .as_str()
                .unwrap()
                .contains("tool \"py_timed\" is not available"),
            "{mode}: {}",
            r[4]
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    let steps = |name: &str, outcome: &str| {
        lines
            .iter()
            .filter(|l| {
                l["type"] == "mcp_composite_step"
                    && l["workflow"]["composite"] == "execute_tool_script"
                    && l["target"]["name"] == name
                    && l["outcome"] == outcome
            })
            .count()
    };
    // Per mode: two echo calls, one timed call, one refused timed call.
    assert_eq!(steps("py_echo", "success"), 4, "{text}");
    assert_eq!(steps("py_timed", "success"), 2, "{text}");
    assert_eq!(steps("py_timed", "denied"), 2, "{text}");
    assert_eq!(steps("py_add", "success") + steps("py_add", "denied"), 0);
    let echo = lines
        .iter()
        .find(|l| l["target"]["name"] == "py_echo" && l["type"] == "mcp_composite_step")
        .unwrap();
    assert_eq!(echo["target"]["backend"], "py", "{echo}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// This process's resident set (the gateway runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Poll until this process's RSS is within `slack` of `baseline`.
async fn rss_returns(baseline: u64, slack: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = rss();
        if now <= baseline + slack || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_scripts_end_within_the_cap_and_memory_returns() {
    let py = py_backend("py", &[]).await;
    // Steps unbounded here, so the endless loop meets the clock.
    let timed = gateway(config(&yaml(
        &py.url,
        "codeMode: {enabled: true, stepLimit: 1000000000000, scriptTimeout: 3s, maxMemoryBytes: 33554432}\n",
    )))
    .await;
    let stepped = gateway(config(&yaml(&py.url, "codeMode: {enabled: true}\n"))).await;
    // Warm up (the first script and client load code and buffers), then measure.
    let warm = py_client(&timed.url(), "legacy", json!([script("return 1")])).await;
    assert_eq!(returned(&warm["results"][0]), 1);
    let baseline = rss();
    let cases = [
        (
            &timed,
            "for i in range(2000000000):\n    x = i\n",
            "scriptTimeout",
        ),
        (&timed, "def f(n):\n    return f(n + 1)\nreturn f(0)\n", "f"),
        (
            &timed,
            "s = 'x' * 100000000\nreturn len(s)\n",
            "maxMemoryBytes",
        ),
        (
            &stepped,
            "for i in range(2000000000):\n    x = i\n",
            "stepLimit",
        ),
    ];
    for (gw, source, expected) in cases {
        for mode in MODES {
            // The client's own start and a trivial script, timed alike (the box
            // may be loaded), so what is measured is the script's run.
            let started = Instant::now();
            let control = py_client(&gw.url(), mode, json!([script("return 1")])).await;
            let control_elapsed = started.elapsed();
            assert_eq!(returned(&control["results"][0]), 1);
            let started = Instant::now();
            let report = py_client(&gw.url(), mode, json!([script(source)])).await;
            let elapsed = started.elapsed().saturating_sub(control_elapsed);
            let r = &report["results"][0];
            assert_eq!(r["isError"], true, "{mode} {source:?}: {r}");
            let text = r["text"].as_str().unwrap();
            assert!(text.starts_with("script error"), "{text}");
            assert!(text.contains(expected), "{mode} {source:?}: {text}");
            // The 3 s cap, plus the stop's grace (1 s) and scheduling slack.
            assert!(
                elapsed < Duration::from_secs(6),
                "{mode} {source:?}: {elapsed:?}"
            );
            let after = rss_returns(baseline, 40 << 20).await;
            assert!(
                after <= baseline + (40 << 20),
                "{mode} {source:?}: RSS {after} after, {baseline} before"
            );
        }
    }
    // The gateway still answers.
    let report = py_client(&timed.url(), "legacy", json!([script("return 2")])).await;
    assert_eq!(returned(&report["results"][0]), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tool_of_the_reserved_name_is_refused_loudly() {
    let py = py_backend("py", &[]).await;
    // The backend's echo advertised as execute_tool_script (unprefixed names).
    let gw = gateway(config(&format!(
        "backends:\n  - {{name: py, url: '{}'}}\naggregation:\n  conflictResolution: priority\n  \
         conflictResolutionConfig: {{priorityOrder: [py]}}\n  tools:\n    - workload: py\n      \
         overrides: {{echo: {{name: execute_tool_script}}}}\ncodeMode: {{enabled: true}}\n",
        py.url
    )))
    .await;
    assert!(
        gw.vmcp
            .aggregator()
            .catalog()
            .tool("execute_tool_script")
            .is_some(),
        "the override took effect"
    );
    for mode in MODES {
        let report = py_client(
            &gw.url(),
            mode,
            json!([{"op": "list_tools"}, script("return 1")]),
        )
        .await;
        let r = &report["results"];
        for refused in [&r[0], &r[1]] {
            let message = refused["error"]["message"].as_str().unwrap_or_else(|| {
                panic!("{mode}: refused, not served: {refused}");
            });
            assert!(
                message.contains("backend \"py\" advertises a tool named \"execute_tool_script\""),
                "{mode}: {message}"
            );
        }
    }
}
