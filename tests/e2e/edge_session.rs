//! The fast path for 2025-11-25 session requests against rmcp's path: the same
//! gateway mounted twice (`Vmcp::service()` and `without_fast_path()`), one session
//! opened on each, and one corpus of valid and invalid session requests sent on
//! both. Every answer must match in HTTP status, JSON-RPC error code and (for
//! results) the whole message, and the fast path must have answered exactly the
//! requests meant for it: plain requests on a plain session, never a request whose
//! session set a log level or whose client can be asked for input.

use std::time::Duration;

use serde_json::{Value, json};
use vmcp_service::Vmcp;

use super::edge::{Case, TwoPaths, class, malformed_params, send, two_paths};

const LEGACY: &str = "2025-11-25";

/// Which `Mcp-Session-Id` a case carries.
#[derive(Clone, Copy)]
enum Session {
    /// The session opened for this service.
    Own,
    /// One nobody opened.
    Unknown,
    /// None at all.
    Missing,
}

fn headers() -> Vec<(&'static str, String)> {
    vec![
        ("accept", "application/json, text/event-stream".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("mcp-protocol-version", LEGACY.to_owned()),
    ]
}

fn case(name: &str, method: &str, params: Value, fast: bool) -> (Case, Session) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    (
        Case {
            name: name.to_owned(),
            headers: headers(),
            body: serde_json::to_vec(&body).unwrap(),
            fast,
            generated: false,
        },
        Session::Own,
    )
}

/// `case` with one header replaced (or removed, with `None`), for rmcp.
fn with_header(
    (mut c, session): (Case, Session),
    name: &'static str,
    value: Option<&str>,
) -> (Case, Session) {
    c.headers.retain(|(n, _)| *n != name);
    if let Some(value) = value {
        c.headers.push((name, value.to_owned()));
    }
    c.fast = false;
    (c, session)
}

fn corpus() -> Vec<(Case, Session)> {
    let call = |text: &str| json!({"name": "gh_echo", "arguments": {"text": text}});
    let plain = || case("", "tools/call", call("x"), true);
    let mut cases = vec![
        case("tools/call", "tools/call", call("hi"), true),
        case(
            "tools/call, error result",
            "tools/call",
            json!({"name": "gh_fail"}),
            true,
        ),
        case("tools/list", "tools/list", json!({}), true),
        case("tools/list, no params", "tools/list", Value::Null, false),
        case("prompts/list", "prompts/list", json!({}), true),
        case("resources/list", "resources/list", json!({}), true),
        case(
            "resources/templates/list",
            "resources/templates/list",
            json!({}),
            true,
        ),
        case(
            "tools/list, bad cursor",
            "tools/list",
            json!({"cursor": "!!"}),
            true,
        ),
        case(
            "prompts/get",
            "prompts/get",
            json!({"name": "gh_brief", "arguments": {"topic": "x"}}),
            true,
        ),
        case(
            "resources/read",
            "resources/read",
            json!({"uri": "demo://gh/readme"}),
            true,
        ),
        case(
            "tools/call, reserved _meta in the result",
            "tools/call",
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "tools/call, non-object tool output (moved into the content)",
            "tools/call",
            json!({"name": "gh_scalar"}),
            true,
        ),
        case(
            "prompts/get, reserved _meta in the result",
            "prompts/get",
            json!({"name": "gh_stamped"}),
            true,
        ),
        case(
            "resources/read, reserved _meta in the result",
            "resources/read",
            json!({"uri": "demo://gh/stamped"}),
            true,
        ),
        case(
            "completion/complete",
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "gh_brief"}, "argument": {"name": "topic", "value": "a"}}),
            true,
        ),
        // Requests the fast path leaves to rmcp, valid or not.
        case("unknown tool", "tools/call", json!({"name": "nope"}), false),
        case("unknown method", "no/such/method", json!({}), false),
        case(
            "progressToken",
            "tools/call",
            json!({"name": "gh_echo", "arguments": {"text": "p"}, "_meta": {"progressToken": 5}}),
            false,
        ),
        case(
            "other _meta",
            "tools/call",
            json!({"name": "gh_echo", "arguments": {"text": "m"}, "_meta": {"x": 1}}),
            false,
        ),
        case(
            "arguments not an object",
            "tools/call",
            json!({"name": "gh_echo", "arguments": [1]}),
            false,
        ),
        case(
            "task params",
            "tools/call",
            json!({"name": "gh_echo", "task": {}}),
            false,
        ),
        case("ping", "ping", json!({}), false),
        case(
            "cancel of an unknown call",
            "notifications/cancelled",
            json!({"requestId": 99}),
            false,
        ),
    ];
    // A notification has no id.
    let note = cases
        .iter_mut()
        .find(|(c, _)| c.name == "cancel of an unknown call")
        .unwrap();
    note.0.body =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}"#
            .to_vec();
    let mut string_id = case("string id", "tools/call", call("s"), true);
    string_id.0.body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": "id-1", "method": "tools/call", "params": call("s")}),
    )
    .unwrap();
    cases.push(string_id);
    let mut older = with_header(plain(), "mcp-protocol-version", Some("2025-06-18"));
    older.0.fast = true;
    older.0.name = "older version header".into();
    cases.push(older);
    let mut no_version = with_header(plain(), "mcp-protocol-version", None);
    no_version.0.fast = true;
    no_version.0.name = "no version header".into();
    cases.push(no_version);
    let refused = [
        (
            "2026-07-28 header without _meta",
            with_header(plain(), "mcp-protocol-version", Some("2026-07-28")),
        ),
        (
            "unknown version header",
            with_header(plain(), "mcp-protocol-version", Some("2099-01-01")),
        ),
        (
            "wrong content type",
            with_header(plain(), "content-type", Some("text/plain")),
        ),
        (
            "JSON only in Accept",
            with_header(plain(), "accept", Some("application/json")),
        ),
        (
            "foreign Host",
            with_header(plain(), "host", Some("evil.example")),
        ),
        (
            "foreign Origin",
            with_header(plain(), "origin", Some("https://evil.example")),
        ),
        ("unknown session", {
            let (c, _) = plain();
            (Case { fast: false, ..c }, Session::Unknown)
        }),
        ("no session", {
            let (c, _) = plain();
            (Case { fast: false, ..c }, Session::Missing)
        }),
    ];
    for (name, (mut c, session)) in refused {
        c.name = name.into();
        cases.push((c, session));
    }
    let raw = |name: &str, body: &str| {
        (
            Case {
                name: name.to_owned(),
                headers: headers(),
                body: body.as_bytes().to_vec(),
                fast: false,
                generated: false,
            },
            Session::Own,
        )
    };
    cases.extend([
        raw("malformed JSON", r#"{"jsonrpc":"2.0","id":1,"#),
        raw(
            "notification without id",
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"gh_echo"}}"#,
        ),
        raw(
            "oversized id",
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/call","params":{"name":"gh_echo"}}"#,
        ),
    ]);
    for (name, method, _, params) in malformed_params() {
        let (mut c, session) = case(&name, method, params, false);
        c.generated = true;
        cases.push((c, session));
    }
    cases
}

/// A POST of `body` on `session` (if any).
async fn post(url: &str, session: Option<&str>, body: Value) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", LEGACY)
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.send().await.expect("POST")
}

/// Open a 2025-11-25 session on `url` whose client declares `capabilities`, and wait
/// (bounded) until the gateway has registered it (rmcp runs the registration on a
/// task of its own, after answering `notifications/initialized`).
async fn open(vmcp: &Vmcp, url: &str, capabilities: Value) -> String {
    let before = vmcp.sessions().len();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": capabilities,
        "clientInfo": {"name": "t", "version": "1"}}});
    let response = post(url, None, init).await;
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(url, Some(&session), initialized).await.status(),
        reqwest::StatusCode::ACCEPTED
    );
    tokio::time::timeout(Duration::from_secs(20), async {
        while vmcp.sessions().len() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the session was registered");
    session
}

/// `case` sent on `session`, the way `which` says.
async fn send_on(url: &str, (case, which): &(Case, Session), session: &str) -> (u16, Value) {
    let mut headers = case.headers.clone();
    match which {
        Session::Own => headers.push(("mcp-session-id", session.to_owned())),
        Session::Unknown => headers.push(("mcp-session-id", "no-such-session".to_owned())),
        Session::Missing => {}
    }
    let case = Case {
        name: case.name.clone(),
        headers,
        body: case.body.clone(),
        fast: case.fast,
        generated: case.generated,
    };
    send(url, &case).await
}

#[tokio::test]
async fn session_requests_answer_alike_on_both_paths() {
    let paths = two_paths().await;
    let TwoPaths {
        vmcp,
        fast,
        slow,
        fast_url,
        slow_url,
        ..
    } = &paths;
    let fast_session = open(vmcp, fast_url, json!({})).await;
    let slow_session = open(vmcp, slow_url, json!({})).await;
    let cases = corpus();
    // Sessions whose state needs the handler: a log level set, a client that can be
    // asked for input. Plain calls on them stay with rmcp.
    let mut stateful = Vec::new();
    for (name, capabilities, level) in [
        ("session with a log level", json!({}), true),
        ("client with elicitation", json!({"elicitation": {}}), false),
        ("client with roots", json!({"roots": {}}), false),
    ] {
        let pair = [
            open(vmcp, fast_url, capabilities.clone()).await,
            open(vmcp, slow_url, capabilities).await,
        ];
        if level {
            for (url, session) in [(&fast_url, &pair[0]), (&slow_url, &pair[1])] {
                let set = json!({"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel",
                    "params": {"level": "debug"}});
                let response = post(url, Some(session), set).await;
                assert_eq!(response.status(), 200);
                let _ = response.text().await;
            }
        }
        stateful.push((name, pair));
    }
    let mut failures = Vec::new();
    let mut check = |case: &(Case, Session),
                     took_fast: bool,
                     (fast_status, fast_message): (u16, Value),
                     (slow_status, slow_message): (u16, Value)| {
        let name = &case.0.name;
        let code = |m: &Value| m["error"]["code"].as_i64();
        if fast_status != slow_status || class(&fast_message) != class(&slow_message) {
            failures.push(format!(
                "{name}: fast {fast_status} {:?}, rmcp {slow_status} {:?}",
                class(&fast_message),
                class(&slow_message)
            ));
        } else if case.0.generated && code(&fast_message) == Some(-32601) {
            failures.push(format!(
                "{name}: a known verb answered \"method not found\": {fast_message}"
            ));
        } else if fast_message.get("result").is_some() && fast_message != slow_message {
            failures.push(format!(
                "{name}: results differ\n  fast: {fast_message}\n  rmcp: {slow_message}"
            ));
        }
        if took_fast != case.0.fast && !case.0.generated {
            failures.push(format!(
                "{name}: answered by the {} path, expected the {}",
                if took_fast { "fast" } else { "rmcp" },
                if case.0.fast { "fast" } else { "rmcp" }
            ));
        }
        if case.0.fast {
            assert!(
                slow_message.get("result").is_some() || code(&slow_message).is_some(),
                "{name}: {slow_message}"
            );
        }
    };
    for case in &cases {
        let before = fast.fast_path_answers();
        let fast_answer = send_on(fast_url, case, &fast_session).await;
        let took_fast = fast.fast_path_answers() > before;
        let slow_answer = send_on(slow_url, case, &slow_session).await;
        check(case, took_fast, fast_answer, slow_answer);
    }
    let plain_call = corpus().swap_remove(0);
    for (name, [fast_on, slow_on]) in &stateful {
        let mut case = case(
            name,
            "tools/call",
            json!({"name": "gh_echo", "arguments": {"text": "s"}}),
            false,
        );
        case.0.name = (*name).into();
        let before = fast.fast_path_answers();
        let fast_answer = send_on(fast_url, &case, fast_on).await;
        let took_fast = fast.fast_path_answers() > before;
        let slow_answer = send_on(slow_url, &case, slow_on).await;
        check(&case, took_fast, fast_answer, slow_answer);
    }
    // The plain session is still served fast after all that.
    let before = fast.fast_path_answers();
    let (status, message) = send_on(fast_url, &plain_call, &fast_session).await;
    assert_eq!(status, 200);
    assert_eq!(
        message["result"]["content"][0]["text"], "gh: hi",
        "{message}"
    );
    assert!(fast.fast_path_answers() > before);
    assert_eq!(slow.fast_path_answers(), 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
