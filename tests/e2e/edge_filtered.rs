//! Lists filtered per caller on the fast path: one gateway behind the full stack
//! (JWT, Cedar), mounted twice (`Vmcp::service()` and `without_fast_path()`). Four
//! callers with three different views walk every page of every list on both
//! revisions; each answer must be the one rmcp's handler gives, the fast side must
//! have answered all of them, and the views must really differ (the filter ran).

use serde_json::{Value, json};
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_service::Vmcp;
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::{LegacySession, Reply, TwoStacks, modern_as, two_stacks};

const LISTS: [(&str, &str); 4] = [
    ("tools/list", "tools"),
    ("prompts/list", "prompts"),
    ("resources/list", "resources"),
    ("resources/templates/list", "resourceTemplates"),
];

/// The policies: Alice sees everything; Bob the tools `echo` and `add`; Carol and
/// Dave only `echo` and the open prompt (one view, two callers).
const POLICIES: &[&str] = &[
    r#"permit(principal == Client::"alice", action, resource);"#,
    r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");"#,
    r#"permit(principal == Client::"bob", action == Action::"call_tool", resource == Tool::"gh_add");"#,
    r#"permit(principal, action == Action::"get_prompt", resource == Prompt::"gh_open");"#,
];

/// A gateway in front of the backend `gh` at `url`, authenticating callers of
/// `issuer` and authorizing them with `policies`; `extra`: more top-level YAML.
async fn cedar_gateway(url: &str, issuer: &str, policies: &[&str], extra: &str) -> Vmcp {
    let policies: Vec<String> = policies.iter().map(|p| format!("      - '{p}'")).collect();
    Vmcp::start(config(&format!(
        "backends: [{{name: gh, url: '{url}'}}]\n{extra}\
         incomingAuth:\n  type: oidc\n  oidc: {{issuer: '{issuer}', audience: vmcp}}\n  \
         authz:\n    type: cedar\n    policies:\n{}\n",
        policies.join("\n")
    )))
    .await
    .expect("gateway starts")
}

/// Every page of `method` through `request` (which sends the params), the replies
/// in order; a cursor is followed until the last page.
async fn walk<F, Fut>(mut request: F) -> Vec<Reply>
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    let mut replies = Vec::new();
    let mut params = json!({});
    loop {
        let reply = request(params).await;
        let next = reply.body["result"]["nextCursor"]
            .as_str()
            .map(str::to_owned);
        replies.push(reply);
        match next {
            Some(cursor) if replies.len() < 50 => params = json!({"cursor": cursor}),
            _ => return replies,
        }
    }
}

/// [`walk`] in a 2025-11-25 session.
async fn walk_session(session: &mut LegacySession, method: &str) -> Vec<Reply> {
    let mut replies = Vec::new();
    let mut params = json!({});
    loop {
        let reply = session.request_with_id(5, method, params).await;
        let next = reply.body["result"]["nextCursor"]
            .as_str()
            .map(str::to_owned);
        replies.push(reply);
        match next {
            Some(cursor) if replies.len() < 50 => params = json!({"cursor": cursor}),
            _ => return replies,
        }
    }
}

/// The URIs (or URI templates, or names) of the items of every page.
fn items(replies: &[Reply], field: &str) -> Vec<String> {
    replies
        .iter()
        .flat_map(|r| {
            r.body["result"][field]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|item| {
            item["uri"]
                .as_str()
                .or(item["uriTemplate"].as_str())
                .or(item["name"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_lists_on_the_fast_path_are_the_handlers() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let mut spec = DemoSpec::new("gh", &["echo", "add", "secret", "other", "more"]);
    spec.prompts = vec!["open".into(), "closed".into()];
    spec.resources = vec!["demo://gh/readme".into(), "demo://gh/private".into()];
    spec.templates = vec!["demo://gh/items/{id}".into()];
    let backend = spawn(spec, 0).await.unwrap();
    let vmcp = cedar_gateway(
        &backend.url(),
        &idp.issuer,
        POLICIES,
        "aggregation: {pageSize: 2}\n",
    )
    .await;
    let paths = two_stacks(&vmcp).await;
    let TwoStacks {
        fast,
        slow,
        fast_url,
        slow_url,
        ..
    } = &paths;

    let mut views = Vec::new();
    for subject in ["alice", "bob", "carol", "dave"] {
        let token = key.sign(&idp.claims(subject, json!({})));
        let mut fast_legacy = LegacySession::open(fast_url, Some(&token)).await;
        let mut slow_legacy = LegacySession::open(slow_url, Some(&token)).await;
        let mut view = Vec::new();
        for (method, field) in LISTS {
            let before = fast.fast_path_answers();
            let on = |url: String| {
                let token = token.clone();
                move |params: Value| {
                    let (url, token) = (url.clone(), token.clone());
                    async move { modern_as(&url, Some(&token), method, params).await }
                }
            };
            let fast_pages = walk(on(fast_url.clone())).await;
            let slow_pages = walk(on(slow_url.clone())).await;
            let answered = fast.fast_path_answers() - before;
            assert_eq!(
                answered as usize,
                fast_pages.len(),
                "{subject} {method}: every page on the fast path"
            );
            assert_eq!(fast_pages.len(), slow_pages.len(), "{subject} {method}");
            for (f, s) in fast_pages.iter().zip(&slow_pages) {
                assert_eq!(f.status, 200, "{subject} {method}: {}", f.raw);
                assert_eq!(f.raw, s.raw, "{subject} {method}: Modern pages differ");
            }
            // The same lists in a 2025-11-25 session of each mount.
            let before = fast.fast_path_answers();
            let fast_session = walk_session(&mut fast_legacy, method).await;
            let slow_session = walk_session(&mut slow_legacy, method).await;
            assert_eq!(
                (fast.fast_path_answers() - before) as usize,
                fast_session.len(),
                "{subject} {method}: every session page on the fast path"
            );
            let bodies = |pages: &[Reply]| pages.iter().map(|p| p.body.clone()).collect::<Vec<_>>();
            assert_eq!(
                bodies(&fast_session),
                bodies(&slow_session),
                "{subject} {method}: session pages differ"
            );
            assert_eq!(items(&fast_session, field), items(&fast_pages, field));
            view.push(items(&fast_pages, field));
        }
        views.push(view);
    }
    assert_eq!(views[2], views[3], "Carol and Dave share a view");
    assert_ne!(views[0], views[1], "Alice and Bob see different lists");
    assert_ne!(views[1], views[2], "Bob and Carol see different lists");
    assert_eq!(views[1][0], ["gh_add", "gh_echo"], "Bob's tools");
    assert_eq!(views[2][0], ["gh_echo"], "Carol's tools");
    assert_eq!(views[2][1], ["gh_open"], "Carol's prompts");
    assert!(views[2][2].is_empty(), "Carol reads no resource");
    assert!(views[2][3].is_empty(), "nor any template");
    assert_eq!(views[0][3], ["demo://gh/items/{id}"], "Alice's templates");
    assert!(
        views[0][0].len() >= 5,
        "Alice sees every tool: {:?}",
        views[0][0]
    );

    // A cursor cut from Alice's view, sent by Carol, and a forged one: the same
    // answer on both paths.
    let alice = key.sign(&idp.claims("alice", json!({})));
    let carol = key.sign(&idp.claims("carol", json!({})));
    let first = modern_as(fast_url, Some(&alice), "tools/list", json!({})).await;
    let cursor = first.body["result"]["nextCursor"]
        .as_str()
        .expect("a second page")
        .to_owned();
    for params in [json!({"cursor": cursor}), json!({"cursor": "not-a-cursor"})] {
        let f = modern_as(fast_url, Some(&carol), "tools/list", params.clone()).await;
        let s = modern_as(slow_url, Some(&carol), "tools/list", params.clone()).await;
        assert_eq!(
            (f.status, &f.raw),
            (s.status, &s.raw),
            "Carol with {params}"
        );
    }
    assert_eq!(slow.fast_path_answers(), 0);
}

/// The fast-path corpus of `edge.rs` (valid requests of every fast verb, wrong
/// headers, and malformed params generated for every verb), sent by a caller whose
/// lists are filtered (Cedar admits it one tool and one prompt), to the stacked
/// gateway with and without the fast path: statuses, error classes and results
/// match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_answers_alike_for_a_filtered_caller() {
    let key = SigningKey::generate("k1");
    let idp = Idp::start(&[&key]).await;
    let backend = super::edge::backend().await;
    let policies = [
        r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");"#,
        r#"permit(principal, action == Action::"get_prompt", resource == Prompt::"gh_brief");"#,
    ];
    let vmcp = cedar_gateway(&backend.url(), &idp.issuer, &policies, "").await;
    let paths = two_stacks(&vmcp).await;
    let TwoStacks {
        fast,
        slow,
        fast_url,
        slow_url,
        ..
    } = &paths;
    let bearer = format!("Bearer {}", key.sign(&idp.claims("carol", json!({}))));

    let mut failures = Vec::new();
    let mut cases = 0;
    for mut case in super::edge::corpus() {
        case.headers.push(("authorization", bearer.clone()));
        let (fast_status, fast_message) = super::edge::send(fast_url, &case).await;
        let (slow_status, slow_message) = super::edge::send(slow_url, &case).await;
        failures.extend(super::edge::mismatch(
            &case,
            (fast_status, &fast_message),
            (slow_status, &slow_message),
        ));
        cases += 1;
    }
    assert!(cases > 100, "the corpus ran: {cases} cases");
    assert_eq!(slow.fast_path_answers(), 0);
    assert!(
        fast.fast_path_answers() >= 10,
        "the fast path answered too little: {}",
        fast.fast_path_answers()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
