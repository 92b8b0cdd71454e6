//! Property tests and a stable-Rust fuzz loop over every parser that takes hostile
//! input: the pagination cursor, `ParsedMcpRequest::parse`, the URI-template
//! matcher, the name sanitizer and the configuration loader.
//!
//! Each target runs `VMCP_FUZZ_CASES` generated inputs (default 256, the short pass
//! that `scripts/test.sh` runs with the rest of the suite). The long run, at least a
//! million inputs per target (see docs/security.md for the figures):
//!
//! ```text
//! VMCP_FUZZ_CASES=1000000 cargo nextest run --cargo-profile fuzz -p vmcp-tests --test fuzz --no-capture
//! ```
//!
//! Properties are "never panics" (a panic inside rmcp's handler task escapes the
//! recovery layer) plus the invariants each parser promises.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use vmcp_layers::context::ParsedMcpRequest;
use vmcp_service::config::load_str;
use vmcp_service::fuzzing::{ListKind, UriTemplate, is_valid_name, page, sanitize};

/// Inputs per target: `VMCP_FUZZ_CASES`, default 256.
fn cases() -> u32 {
    std::env::var("VMCP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Run `test` over `cases()` inputs of `strategy`, printing the count so a long run
/// leaves a record. No persistence file: a failure prints its minimal input.
fn run<S: Strategy>(target: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let cases = cases();
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..Config::default()
    };
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(config);
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("fuzz target {target} failed: {failure}");
    }
    println!(
        "fuzz target {target}: {cases} inputs, 0 failures, {:.1?}",
        started.elapsed()
    );
}

/// A string strategy from `pattern`, compiled once. A `&str` used as a strategy
/// re-parses its regex for every generated value, which was most of each case's
/// time (and made a million inputs per target take hours).
fn re(pattern: &str) -> proptest::string::RegexGeneratorStrategy<String> {
    proptest::string::string_regex(pattern).expect("a valid generator regex")
}

/// Arbitrary JSON, nested up to a few levels, with the keys the parser looks at.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("jsonrpc".to_owned()),
        Just("id".to_owned()),
        Just("method".to_owned()),
        Just("params".to_owned()),
        Just("name".to_owned()),
        Just("uri".to_owned()),
        Just("arguments".to_owned()),
        Just("_meta".to_owned()),
        Just("clientInfo".to_owned()),
        Just("version".to_owned()),
        Just("io.modelcontextprotocol/protocolVersion".to_owned()),
        Just("io.modelcontextprotocol/clientInfo".to_owned()),
        re(".{0,8}"),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        re(".{0,16}").prop_map(Value::String),
        Just(json!("2026-07-28")),
        Just(json!("tools/call")),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

#[test]
fn fuzz_cursor() {
    let kind = prop_oneof![
        Just("tools".to_owned()),
        Just("prompts".to_owned()),
        Just("resources".to_owned()),
        Just("resourceTemplates".to_owned()),
        re(".{0,6}"),
    ];
    // Well-formed positions with any delivered count (the overflow case), cursors of
    // arbitrary JSON, and arbitrary strings.
    let cursor = prop_oneof![
        (kind, re(".{0,6}"), any::<u64>()).prop_map(|(k, l, d)| {
            URL_SAFE_NO_PAD.encode(json!({"k": k, "l": l, "d": d}).to_string())
        }),
        json_value().prop_map(|v| URL_SAFE_NO_PAD.encode(v.to_string())),
        re(".{0,64}"),
    ];
    let items = prop::collection::vec(re("[a-d]{0,2}"), 0..12).prop_map(|mut v| {
        v.sort();
        v
    });
    run(
        "cursor",
        (items, cursor, 0usize..6),
        |(items, cursor, size): (Vec<String>, String, usize)| {
            match page(
                &items,
                |s: &String| s.as_str(),
                ListKind::Tools,
                Some(&cursor),
                size,
            ) {
                Ok((got, _)) => prop_assert!(got.len() <= size.max(1)),
                Err(e) => prop_assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_cursor_pages_cover_everything_once() {
    let items = prop::collection::vec(re("[a-c]{0,2}"), 0..24).prop_map(|mut v| {
        v.sort();
        v
    });
    run("cursor_pages", (items, 1usize..8), |(items, size)| {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..=items.len() {
            let (got, next) = page(
                &items,
                |s: &String| s.as_str(),
                ListKind::Tools,
                cursor.as_deref(),
                size,
            )
            .map_err(|e| TestCaseError::fail(e.message.to_string()))?;
            seen.extend(got);
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        prop_assert_eq!(seen, items);
        Ok(())
    });
}

#[test]
fn fuzz_parse() {
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        // Duplicate keys and raw splices serde_json's writer never produces.
        (json_value(), json_value()).prop_map(|(a, b)| {
            format!(r#"{{"jsonrpc":"2.0","id":{a},"method":"tools/call","id":{b},"params":{{"name":{a},"name":{b}}}}}"#)
                .into_bytes()
        }),
    ];
    let header = prop::option::of(prop_oneof![
        Just("2025-11-25".to_owned()),
        Just("2026-07-28".to_owned()),
        re(".{0,12}"),
    ]);
    run(
        "parse",
        (body, header, any::<bool>()),
        |(body, header, session)| {
            if let Ok(parsed) = ParsedMcpRequest::parse(&body, header.as_deref(), session) {
                // Whatever it decoded came from a JSON object.
                let value: Value = serde_json::from_slice(&body)
                    .map_err(|e| TestCaseError::fail(format!("parsed non-JSON: {e}")))?;
                prop_assert!(value.is_object());
                if let Some(Value::String(method)) = value.get("method") {
                    prop_assert_eq!(&parsed.method, method);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_uri_template() {
    let template = re("[a-z:/{}+#?&.;,]{0,24}");
    let uri = re("[a-z0-9:/?&#.;=]{0,24}");
    run("uri_template", (template, uri), |(template, uri)| {
        if let Ok(compiled) = UriTemplate::parse(&template) {
            let _ = compiled.matches(&uri);
            // A template without expressions matches exactly itself.
            if !template.contains(['{', '}']) {
                prop_assert!(compiled.matches(&template));
                prop_assert_eq!(compiled.matches(&uri), uri == template);
            }
        }
        Ok(())
    });
    run(
        "uri_template_simple",
        (
            re("[a-z:/]{0,12}"),
            re("[a-z0-9]{1,8}"),
            re("[a-z0-9/]{0,8}"),
        ),
        |(prefix, segment, other)| {
            let compiled = UriTemplate::parse(&format!("{prefix}{{id}}"))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let matching = format!("{prefix}{segment}");
            prop_assert!(compiled.matches(&matching));
            // `{id}` is one non-empty segment.
            let expansion = format!("{prefix}{other}");
            prop_assert_eq!(
                compiled.matches(&expansion),
                !other.is_empty() && !other.contains('/')
            );
            Ok(())
        },
    );
}

#[test]
fn fuzz_names() {
    run("names", re(".{0,80}"), |name| {
        match sanitize(&name) {
            Some(fixed) => {
                prop_assert!(is_valid_name(&fixed));
                // One character for each: nothing merged, nothing dropped.
                prop_assert_eq!(fixed.chars().count(), name.chars().count());
                prop_assert_eq!(sanitize(&fixed), Some(fixed.clone()));
                if is_valid_name(&name) {
                    prop_assert_eq!(fixed, name);
                }
            }
            None => prop_assert!(name.is_empty() || name.chars().count() > 64),
        }
        Ok(())
    });
}

/// YAML documents built from the loader's real keys with arbitrary values, plus
/// arbitrary text and deep nesting.
fn yaml_document() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("".to_owned()),
        Just("~".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("1e999".to_owned()),
        Just("http://127.0.0.1:1/mcp".to_owned()),
        Just("30s".to_owned()),
        Just("*a".to_owned()),
        Just("&a x".to_owned()),
        Just("!!binary aGk=".to_owned()),
        re("[a-zA-Z0-9 _.:/{}-]{0,12}"),
    ];
    let key = prop_oneof![
        Just("name"),
        Just("backends"),
        Just("url"),
        Just("transport"),
        Just("aggregation"),
        Just("conflictResolution"),
        Just("pageSize"),
        Just("operational"),
        Just("timeouts"),
        Just("default"),
        Just("incomingAuth"),
        Just("type"),
        Just("oidc"),
        Just("authz"),
        Just("policies"),
        Just("audit"),
        Just("telemetry"),
        Just("tools"),
        Just("filter"),
        Just("overrides"),
        Just("zzz"),
    ];
    let line = (0usize..4, key, scalar)
        .prop_map(|(indent, key, value)| format!("{}{key}: {value}\n", "  ".repeat(indent)));
    prop_oneof![
        prop::collection::vec(line, 0..12).prop_map(|lines| lines.concat()),
        re(".{0,128}"),
        (1usize..300).prop_map(|depth| format!("a: {}{}", "[".repeat(depth), "]".repeat(depth))),
        (1usize..300).prop_map(|depth| "- ".repeat(depth)),
    ]
}

#[test]
fn fuzz_config() {
    run("config", yaml_document(), |yaml| {
        let _ = load_str(&yaml);
        Ok(())
    });
}
