// Over 600 lines: one corpus of requests (most of the file is its cases) and the three tests that send it down both paths; one idea.
//! The fast path (the `edge` module of vmcp-service) against rmcp's path: one corpus
//! of valid and invalid 2026-07-28 requests sent to the same gateway mounted twice,
//! once as `Vmcp::service()` and once with `without_fast_path()`. Every answer must
//! match in HTTP status, JSON-RPC error code and (for results) the whole message,
//! and the fast path must have answered exactly the requests meant for it.

use base64::Engine;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use vmcp_examples::demo::{DemoSpec, RunningDemo, spawn};
use vmcp_service::{Vmcp, VmcpService};
use vmcp_tests::{config, serve_on_loopback};

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

/// One request of the corpus.
pub(super) struct Case {
    pub(super) name: String,
    pub(super) headers: Vec<(&'static str, String)>,
    pub(super) body: Vec<u8>,
    /// Whether the fast path should answer it.
    pub(super) fast: bool,
    /// Generated malformed params ([`malformed_params`]): either path may answer (an
    /// optional member removed is still valid), alike and never "method not found".
    pub(super) generated: bool,
}

/// The usual headers of a Modern request for `method` (and `Mcp-Name`).
fn headers(method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("accept", "application/json, text/event-stream".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", method.to_owned()),
    ];
    if let Some(name) = name {
        h.push(("mcp-name", name.to_owned()));
    }
    h
}

fn body(id: Value, method: &str, params: Value) -> Vec<u8> {
    let mut params = params;
    params["_meta"] = serde_json::from_str(META).unwrap();
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .unwrap()
}

fn case(name: &str, method: &str, target: Option<&str>, params: Value, fast: bool) -> Case {
    Case {
        name: name.to_owned(),
        headers: headers(method, target),
        body: body(json!(1), method, params),
        fast,
        generated: false,
    }
}

/// `case` with one header replaced (or removed, with `None`).
fn with_header(mut c: Case, name: &'static str, value: Option<&str>) -> Case {
    c.headers.retain(|(n, _)| *n != name);
    if let Some(value) = value {
        c.headers.push((name, value.to_owned()));
    }
    c.fast = false;
    c
}

pub(super) fn corpus() -> Vec<Case> {
    let call = |text: &str| json!({"name": "gh_echo", "arguments": {"text": text}});
    let b64 = |s: &str| format!("=?base64?{}?=", base64::prelude::BASE64_STANDARD.encode(s));
    let mut cases = vec![
        case(
            "tools/call",
            "tools/call",
            Some("gh_echo"),
            call("hi"),
            true,
        ),
        case(
            "tools/call, error result",
            "tools/call",
            Some("gh_fail"),
            json!({"name": "gh_fail"}),
            true,
        ),
        case(
            "tools/call, traceparent",
            "tools/call",
            Some("gh_traceparent"),
            json!({"name": "gh_traceparent"}),
            true,
        ),
        case(
            "tools/call, reserved _meta in the result",
            "tools/call",
            Some("gh_stamped"),
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "tools/call, non-object tool output",
            "tools/call",
            Some("gh_scalar"),
            json!({"name": "gh_scalar"}),
            true,
        ),
        case("tools/list", "tools/list", None, json!({}), true),
        case("prompts/list", "prompts/list", None, json!({}), true),
        case("resources/list", "resources/list", None, json!({}), true),
        case(
            "resources/templates/list",
            "resources/templates/list",
            None,
            json!({}),
            true,
        ),
        case(
            "tools/list, bad cursor",
            "tools/list",
            None,
            json!({"cursor": "!!"}),
            true,
        ),
        case(
            "prompts/get",
            "prompts/get",
            Some("gh_brief"),
            json!({"name": "gh_brief", "arguments": {"topic": "x"}}),
            true,
        ),
        case(
            "resources/read",
            "resources/read",
            Some("demo://gh/readme"),
            json!({"uri": "demo://gh/readme"}),
            true,
        ),
        case(
            "prompts/get, reserved _meta in the result",
            "prompts/get",
            Some("gh_stamped"),
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "resources/read, reserved _meta in the result",
            "resources/read",
            Some("demo://gh/stamped"),
            json!({"uri": "demo://gh/stamped"}),
            true,
        ),
        case(
            "completion/complete",
            "completion/complete",
            None,
            json!({"ref": {"type": "ref/prompt", "name": "gh_brief"}, "argument": {"name": "topic", "value": "a"}}),
            true,
        ),
        // Requests the fast path leaves to rmcp, valid or not.
        case(
            "unknown tool",
            "tools/call",
            Some("nope"),
            json!({"name": "nope"}),
            false,
        ),
        case("unknown method", "no/such/method", None, json!({}), false),
        case(
            "progressToken",
            "tools/call",
            Some("gh_echo"),
            {
                let mut p = call("p");
                p["_meta"] = json!({"progressToken": 5});
                p
            },
            false,
        ),
        case(
            "arguments not an object",
            "tools/call",
            Some("gh_echo"),
            json!({"name": "gh_echo", "arguments": [1]}),
            false,
        ),
        case(
            "task params",
            "tools/call",
            Some("gh_echo"),
            json!({"name": "gh_echo", "task": {}}),
            false,
        ),
        case("ping", "ping", None, json!({}), false),
    ];
    // The `_meta` of `progressToken` above is replaced by `body`; put it back.
    let progress = cases
        .iter_mut()
        .find(|c| c.name == "progressToken")
        .unwrap();
    let mut value: Value = serde_json::from_slice(&progress.body).unwrap();
    value["params"]["_meta"]["progressToken"] = json!(5);
    progress.body = serde_json::to_vec(&value).unwrap();
    let log = {
        let mut c = case("logLevel", "tools/call", Some("gh_echo"), call("l"), false);
        let mut value: Value = serde_json::from_slice(&c.body).unwrap();
        value["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
        c.body = serde_json::to_vec(&value).unwrap();
        c
    };
    cases.push(log);
    let mut base64_name = case(
        "base64 Mcp-Name",
        "tools/call",
        Some("gh_echo"),
        call("b"),
        true,
    );
    base64_name.headers.retain(|(n, _)| *n != "mcp-name");
    base64_name.headers.push(("mcp-name", b64("gh_echo")));
    cases.push(base64_name);
    let plain = || case("", "tools/call", Some("gh_echo"), call("x"), true);
    let mut refused = vec![
        (
            "wrong version header",
            with_header(plain(), "mcp-protocol-version", Some("2025-11-25")),
        ),
        (
            "unknown version header",
            with_header(plain(), "mcp-protocol-version", Some("2099-01-01")),
        ),
        (
            "no version header",
            with_header(plain(), "mcp-protocol-version", None),
        ),
        (
            "Mcp-Method mismatch",
            with_header(plain(), "mcp-method", Some("tools/list")),
        ),
        ("no Mcp-Method", with_header(plain(), "mcp-method", None)),
        (
            "Mcp-Name mismatch",
            with_header(plain(), "mcp-name", Some("gh_other")),
        ),
        (
            "Mcp-Name bad base64",
            with_header(plain(), "mcp-name", Some("=?base64?!!?=")),
        ),
        (
            "Mcp-Name wrong base64",
            with_header(plain(), "mcp-name", Some(&b64("gh_other"))),
        ),
        ("no Mcp-Name", with_header(plain(), "mcp-name", None)),
        (
            "wrong content type",
            with_header(plain(), "content-type", Some("text/plain")),
        ),
        (
            "JSON only in Accept",
            with_header(plain(), "accept", Some("application/json")),
        ),
        (
            "weighted Accept",
            with_header(
                plain(),
                "accept",
                Some("application/json, text/event-stream;q=0"),
            ),
        ),
        (
            "foreign Host",
            with_header(plain(), "host", Some("evil.example")),
        ),
        (
            "foreign Origin",
            with_header(plain(), "origin", Some("https://evil.example")),
        ),
    ];
    let mut dup = plain();
    dup.headers.push(("mcp-method", "tools/call".to_owned()));
    dup.fast = false;
    refused.push(("duplicate Mcp-Method", dup));
    for (name, mut c) in refused {
        c.name = name.to_owned();
        cases.push(c);
    }
    let raw = |name: &str, body: &str| Case {
        name: name.to_owned(),
        headers: headers("tools/call", Some("gh_echo")),
        body: body.as_bytes().to_vec(),
        fast: false,
        generated: false,
    };
    cases.extend([
        raw("malformed JSON", r#"{"jsonrpc":"2.0","id":1,"#),
        raw("oversized id", &format!(r#"{{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/call","params":{{"name":"gh_echo","_meta":{META}}}}}"#)),
        raw("notification without id", &format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"gh_echo","_meta":{META}}}}}"#)),
        raw("no jsonrpc member", &format!(r#"{{"id":1,"method":"tools/call","params":{{"name":"gh_echo","_meta":{META}}}}}"#)),
        raw("missing capabilities", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gh_echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#),
        raw("batch", &format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"gh_echo","_meta":{META}}}}}]"#)),
    ]);
    // Arguments go to the backend as the client wrote them (fast path) or as rmcp
    // reads them: whitespace, escapes and number forms must not change the answer,
    // and a repeated key at any depth, or nesting past what serde_json reads, is
    // refused before either path.
    let with_arguments = |name: &str, arguments: &str, fast: bool| Case {
        fast,
        ..raw(
            name,
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"gh_echo","arguments":{arguments},"_meta":{META}}}}}"#
            ),
        )
    };
    let nested = |depth: usize| {
        format!(
            r#"{{"text":"deep","x":{}1{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    cases.extend([
        with_arguments(
            "arguments spaced and escaped",
            r#" { "text" : "a\u00e9\n\"b\/\ud83d\ude00" , "n" : 1.50e2 , "m" : -0 } "#,
            true,
        ),
        with_arguments(
            "arguments with an escaped key",
            r#"{"t\u0065xt":"k","z":[{},[]]}"#,
            true,
        ),
        with_arguments("arguments nested to the limit", &nested(123), true),
        with_arguments("arguments nested past the limit", &nested(125), false),
        with_arguments(
            "arguments with a repeated key",
            r#"{"text":"a","text":"b"}"#,
            false,
        ),
        with_arguments(
            "arguments with an escaped twin key",
            r#"{"text":"a","\u0074ext":"b"}"#,
            false,
        ),
        with_arguments(
            "arguments with a repeated key inside",
            r#"{"text":"a","x":[{"k":1},{"k":1,"k":2}]}"#,
            false,
        ),
        with_arguments(
            "arguments with a lone surrogate",
            r#"{"text":"\ud800"}"#,
            false,
        ),
        with_arguments("arguments with a bad escape", r#"{"text":"\q"}"#, false),
    ]);
    let mut string_id = case("string id", "tools/call", Some("gh_echo"), call("s"), true);
    string_id.body = body(json!("id-1"), "tools/call", call("s"));
    cases.push(string_id);
    for (name, method, target, params) in malformed_params() {
        let mut c = case(&name, method, target, params, false);
        c.generated = true;
        cases.push(c);
    }
    cases
}

/// One valid params object for every verb the fast path serves, with the target its
/// `Mcp-Name` names (the list cursor is well-formed but unknown: -32602 on both).
pub(super) fn valid_params() -> Vec<(&'static str, Option<&'static str>, Value)> {
    vec![
        (
            "tools/call",
            Some("gh_echo"),
            json!({"name": "gh_echo", "arguments": {"text": "x"}}),
        ),
        (
            "prompts/get",
            Some("gh_brief"),
            json!({"name": "gh_brief", "arguments": {"topic": "x"}}),
        ),
        (
            "resources/read",
            Some("demo://gh/readme"),
            json!({"uri": "demo://gh/readme"}),
        ),
        (
            "completion/complete",
            None,
            json!({"ref": {"type": "ref/prompt", "name": "gh_brief"},
                   "argument": {"name": "topic", "value": "a"},
                   "context": {"arguments": {"topic": "b"}}}),
        ),
        ("tools/list", None, json!({"cursor": "!!"})),
        ("prompts/list", None, json!({"cursor": "!!"})),
        ("resources/list", None, json!({"cursor": "!!"})),
        ("resources/templates/list", None, json!({"cursor": "!!"})),
    ]
}

/// Malformed params for every verb of [`valid_params`], generated, not picked: each
/// member (and each member of an object member) removed, and replaced by a value of
/// every other JSON type. Some results are still valid params (an optional member
/// removed); the corpus only asks that both paths answer them alike, and never with
/// "method not found".
pub(super) fn malformed_params() -> Vec<(String, &'static str, Option<&'static str>, Value)> {
    /// One value of each JSON type.
    fn others(original: &Value) -> Vec<Value> {
        [
            json!(null),
            json!(true),
            json!(5),
            json!("s"),
            json!([1]),
            json!({}),
        ]
        .into_iter()
        .filter(|v| std::mem::discriminant(v) != std::mem::discriminant(original))
        .collect()
    }
    let mut cases = Vec::new();
    for (method, target, valid) in valid_params() {
        let Value::Object(members) = &valid else {
            unreachable!("params are objects")
        };
        // The paths to mutate: each member, and each member of an object member.
        let mut paths: Vec<Vec<String>> = Vec::new();
        for (key, value) in members {
            paths.push(vec![key.clone()]);
            if let Value::Object(inner) = value {
                paths.extend(inner.keys().map(|k| vec![key.clone(), k.clone()]));
            }
        }
        for path in paths {
            let (last, parents) = path.split_last().expect("a path has a member");
            let at = |params: &mut Value| -> Map<String, Value> {
                let mut parent = params;
                for key in parents {
                    parent = &mut parent[key];
                }
                std::mem::take(parent.as_object_mut().expect("an object"))
            };
            let put = |params: &mut Value, map: Map<String, Value>| {
                let mut parent = params;
                for key in parents {
                    parent = &mut parent[key];
                }
                *parent = Value::Object(map);
            };
            let shown = path.join(".");
            let mut removed = valid.clone();
            let mut map = at(&mut removed);
            let original = map.remove(last).expect("the member exists");
            put(&mut removed, map);
            cases.push((
                format!("{method}: {shown} missing"),
                method,
                target,
                removed,
            ));
            for other in others(&original) {
                let mut replaced = valid.clone();
                let mut map = at(&mut replaced);
                map.insert(last.clone(), other.clone());
                put(&mut replaced, map);
                cases.push((
                    format!("{method}: {shown}: {other}"),
                    method,
                    target,
                    replaced,
                ));
            }
        }
    }
    cases
}

/// What must match between the two paths: a result or not, the error code, and the
/// error message up to its first `:` (what follows may quote the input).
pub(super) fn class(message: &Value) -> (bool, Option<i64>, Option<&str>) {
    let text = message["error"]["message"].as_str();
    (
        message.get("result").is_some(),
        message["error"]["code"].as_i64(),
        text.map(|t| t.split(':').next().unwrap_or(t)),
    )
}

/// How the two paths' answers to `case` differ, if they do: in status or error
/// class, or (both results) in the whole message.
pub(super) fn mismatch(case: &Case, fast: (u16, &Value), slow: (u16, &Value)) -> Option<String> {
    if fast.0 != slow.0 || class(fast.1) != class(slow.1) {
        Some(format!(
            "{}: fast {} {:?}, rmcp {} {:?}",
            case.name,
            fast.0,
            class(fast.1),
            slow.0,
            class(slow.1)
        ))
    } else if fast.1.get("result").is_some() && fast.1 != slow.1 {
        Some(format!(
            "{}: results differ\n  fast: {}\n  rmcp: {}",
            case.name, fast.1, slow.1
        ))
    } else {
        None
    }
}

/// Status, content type, and the JSON-RPC message (or the body as text).
pub(super) async fn send(url: &str, case: &Case) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(url).body(case.body.clone());
    for (name, value) in &case.headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    // A JSON body, the first JSON `data:` line of an event stream (a session's stream
    // may open with an empty priming event), or rmcp's plain text.
    let message = serde_json::from_str::<Value>(text.trim())
        .ok()
        .or_else(|| {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        })
        .unwrap_or_else(|| Value::String(text.clone()));
    (status, message)
}

pub(super) async fn backend() -> RunningDemo {
    let mut spec = DemoSpec::new(
        "gh",
        &["echo", "fail", "traceparent", "stamped", "scalar", "other"],
    );
    spec.prompts = vec!["brief".into(), "stamped".into()];
    spec.resources = vec!["demo://gh/readme".into(), "demo://gh/stamped".into()];
    spawn(spec, 0).await.expect("demo backend")
}

/// One gateway in front of [`backend`], served twice on loopback: with the fast
/// path, and with every request answered by rmcp's server. Stopped on drop.
pub(super) struct TwoPaths {
    pub(super) vmcp: Vmcp,
    pub(super) fast: VmcpService,
    pub(super) slow: VmcpService,
    pub(super) fast_url: String,
    pub(super) slow_url: String,
    stops: [CancellationToken; 2],
    _backend: RunningDemo,
}

impl Drop for TwoPaths {
    fn drop(&mut self) {
        for stop in &self.stops {
            stop.cancel();
        }
    }
}

pub(super) async fn two_paths() -> TwoPaths {
    two_paths_with("").await
}

/// [`two_paths`] with `extra` appended to the gateway's YAML.
pub(super) async fn two_paths_with(extra: &str) -> TwoPaths {
    let backend = backend().await;
    let yaml = format!(
        "backends: [{{name: gh, url: '{}'}}]\n{extra}",
        backend.url()
    );
    let vmcp = Vmcp::start(config(&yaml)).await.expect("gateway starts");
    let fast = vmcp.service();
    let slow = vmcp.service().without_fast_path();
    let (fast_addr, stop_fast) =
        serve_on_loopback(axum::Router::new().nest_service("/mcp", fast.clone())).await;
    let (slow_addr, stop_slow) =
        serve_on_loopback(axum::Router::new().nest_service("/mcp", slow.clone())).await;
    TwoPaths {
        vmcp,
        fast,
        slow,
        fast_url: format!("http://{fast_addr}/mcp"),
        slow_url: format!("http://{slow_addr}/mcp"),
        stops: [stop_fast, stop_slow],
        _backend: backend,
    }
}

#[tokio::test]
async fn fast_and_rmcp_paths_answer_the_corpus_alike() {
    corpus_alike(&two_paths().await, &[]).await;
}

/// The corpus, generated malformed params included, for a backend whose connection
/// is the caller's own (`passthroughHeaders`: the edge calls it on a per-caller
/// connection instead of the shared one), with the header each caller sends.
#[tokio::test]
async fn the_corpus_answers_alike_on_a_per_caller_connection() {
    let paths = two_paths_with("passthroughHeaders: [X-Tenant]\n").await;
    corpus_alike(&paths, &[("x-tenant", "acme")]).await;
}

/// Send every case of [`corpus`] (plus `extra` headers) down both paths of `paths`:
/// alike answers, and the fast path answering what it should.
async fn corpus_alike(paths: &TwoPaths, extra: &[(&'static str, &str)]) {
    let TwoPaths {
        fast,
        slow,
        fast_url,
        slow_url,
        ..
    } = paths;
    let mut failures = Vec::new();
    for mut case in corpus() {
        case.headers
            .extend(extra.iter().map(|(name, value)| (*name, value.to_string())));
        let before = fast.fast_path_answers();
        let (fast_status, fast_message) = send(fast_url, &case).await;
        let took_fast = fast.fast_path_answers() > before;
        let (slow_status, slow_message) = send(slow_url, &case).await;
        let code = |m: &Value| m["error"]["code"].as_i64();
        if let Some(failure) = mismatch(
            &case,
            (fast_status, &fast_message),
            (slow_status, &slow_message),
        ) {
            failures.push(failure);
        } else if case.generated && code(&fast_message) == Some(-32601) {
            failures.push(format!(
                "{}: a known verb answered \"method not found\": {fast_message}",
                case.name
            ));
        }
        if took_fast != case.fast && !case.generated {
            failures.push(format!(
                "{}: answered by the {} path, expected the {}",
                case.name,
                if took_fast { "fast" } else { "rmcp" },
                if case.fast { "fast" } else { "rmcp" }
            ));
        }
        if case.fast && slow_status == 200 && code(&slow_message).is_none() {
            assert!(
                slow_message.get("result").is_some(),
                "{}: {slow_message}",
                case.name
            );
        }
    }
    assert_eq!(slow.fast_path_answers(), 0);
    assert!(
        fast.fast_path_answers() >= 10,
        "the fast path answered too little"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A backend's result passes through the fast path as the backend wrote it (spliced,
/// not re-read), except the reserved `_meta` keys that stop at the gateway: a forged
/// `serverInfo` is dropped on both paths, the end-to-end and foreign keys stay. The
/// same for every verb with a result the backend writes: a tool's, a prompt's and a
/// resource's.
#[tokio::test]
async fn a_backends_reserved_meta_stops_at_the_gateway_on_both_paths() {
    let paths = two_paths().await;
    let stamped = [
        case(
            "tool",
            "tools/call",
            Some("gh_stamped"),
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "prompt",
            "prompts/get",
            Some("gh_stamped"),
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "resource",
            "resources/read",
            Some("demo://gh/stamped"),
            json!({"uri": "demo://gh/stamped"}),
            true,
        ),
    ];
    for stamped in &stamped {
        for url in [&paths.fast_url, &paths.slow_url] {
            let what = format!("{} on {url}", stamped.name);
            let before = paths.fast.fast_path_answers();
            let (status, message) = send(url, stamped).await;
            assert_eq!(status, 200, "{what}: {message}");
            let result = &message["result"];
            assert_eq!(result["resultType"], "complete", "{what}: {message}");
            match stamped.name.as_str() {
                "tool" => {
                    assert_eq!(result["content"][0]["text"], "stamped", "{what}: {message}");
                    assert_eq!(result["structuredContent"], json!({"n": 1, "s": "é \"q\""}));
                }
                "prompt" => assert_eq!(
                    result["messages"][0]["content"]["text"], "stamped from gh about ",
                    "{what}: {message}"
                ),
                _ => assert_eq!(
                    result["contents"][0]["text"], "demo://gh/stamped from gh",
                    "{what}: {message}"
                ),
            }
            let meta = &result["_meta"];
            assert!(meta.is_object(), "{what}: {message}");
            assert_ne!(
                meta["io.modelcontextprotocol/serverInfo"]["name"], "forged",
                "{what}: a backend's serverInfo crossed the gateway: {message}"
            );
            assert_eq!(
                meta["io.modelcontextprotocol/related-task"],
                json!({"taskId": "t-1"}),
                "{what}: {message}"
            );
            assert_eq!(meta["demo/own"], json!([1, 2]), "{what}: {message}");
            if *url == paths.fast_url {
                assert_eq!(
                    paths.fast.fast_path_answers(),
                    before + 1,
                    "{what}: served fast"
                );
            }
        }
    }
}

/// A backend's key order reaches the caller as the backend wrote it, on both paths:
/// the demo backend writes `inputSchema` as `type`, `properties`, `required`, which
/// a sorted map would reorder. This is what serde_json's `preserve_order` (on for
/// the whole build, through cedar-policy) buys; docs/benchmarks.md records its cost.
#[tokio::test]
async fn a_backends_key_order_survives_both_paths() {
    let paths = two_paths().await;
    let list = case("tools/list", "tools/list", None, json!({}), true);
    for url in [&paths.fast_url, &paths.slow_url] {
        let mut request = reqwest::Client::new().post(url).body(list.body.clone());
        for (name, value) in &list.headers {
            request = request.header(*name, value);
        }
        let text = request.send().await.expect("POST").text().await.unwrap();
        assert!(
            text.contains(r#""inputSchema":{"type":"object","properties":{"text":"#),
            "{url}: {text}"
        );
    }
}
