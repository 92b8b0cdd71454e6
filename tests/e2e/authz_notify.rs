//! Per-identity notification filtering, on both client revisions: a session is told
//! only what its caller may see. Negatives are proven with a later marker
//! notification the same session does receive (as in `live.rs`).

use serde_json::json;
use vmcp_examples::demo::{DemoList, DemoSpec, RunningDemo, spawn};
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::stacked::stacked_gateway;
use vmcp_tests::{Listener, config, eventually};

fn yaml(backend: &str, issuer: &str, policies: &[&str]) -> String {
    let policies: Vec<String> = policies.iter().map(|p| format!("      - '{p}'")).collect();
    format!(
        r#"
name: eng
backends: [{{name: gh, url: '{backend}'}}]
incomingAuth:
  type: oidc
  oidc: {{issuer: '{issuer}', audience: vmcp}}
  authz:
    type: cedar
    policies:
{}
"#,
        policies.join("\n")
    )
}

async fn demo() -> RunningDemo {
    spawn(
        DemoSpec {
            resources: vec!["gh://open".into(), "gh://secret".into()],
            prompts: vec!["p1".into()],
            ..DemoSpec::new("gh", &["echo"])
        },
        0,
    )
    .await
    .unwrap()
}

#[allow(deprecated)] // resources/subscribe is the Legacy mechanism.
async fn subscribe(listener: &Listener, uri: &str) {
    listener
        .client
        .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
        .await
        .unwrap_or_else(|e| panic!("subscribe {uri}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_uri_update_reaches_only_sessions_that_may_read_it() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = demo().await;
    let everyone_reads = r#"permit(principal, action == Action::"read_resource", resource);"#;
    let open_only = r#"permit(principal, action == Action::"read_resource", resource == Resource::"gh://open");"#;
    let alice_reads =
        r#"permit(principal == Client::"alice", action == Action::"read_resource", resource);"#;
    let gw = stacked_gateway(config(&yaml(&gh.url(), &idp.issuer, &[everyone_reads]))).await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));

    // Everyone subscribes while everyone may read both URIs.
    let uris = ["gh://open", "gh://secret"];
    let mut alice_legacy = Listener::legacy_as(&url, Some(&alice)).await;
    let mut bob_legacy = Listener::legacy_as(&url, Some(&bob)).await;
    for uri in uris {
        subscribe(&alice_legacy, uri).await;
        subscribe(&bob_legacy, uri).await;
    }
    let mut alice_modern = Listener::modern_as(&url, Some(&alice), &uris).await;
    let mut bob_modern = Listener::modern_as(&url, Some(&bob), &uris).await;
    assert!(
        eventually(|| gw.vmcp.sessions().len() == 4).await,
        "four listeners registered"
    );

    // Bob loses gh://secret; his sessions stay open.
    gw.vmcp
        .reload(config(&yaml(
            &gh.url(),
            &idp.issuer,
            &[open_only, alice_reads],
        )))
        .await
        .expect("reload");
    let control = gh.control();
    control.resource_updated("gh://secret").await;
    alice_legacy.expect("updated gh://secret").await;
    alice_modern.expect("updated gh://secret").await;
    // The marker: an update bob may see, sent after the denied one.
    control.resource_updated("gh://open").await;
    for bob in [&mut bob_legacy, &mut bob_modern] {
        bob.expect("updated gh://open").await;
        let rest = bob.drain();
        assert!(
            !rest.iter().any(|n| n == "updated gh://secret"),
            "bob got a denied update: {rest:?}"
        );
    }

    // A new Modern listen stream cannot even ask for what it may not read.
    let mut bob_late = Listener::modern_as(&url, Some(&bob), &uris).await;
    control.resource_updated("gh://secret").await;
    control.resource_updated("gh://open").await;
    bob_late.expect("updated gh://open").await;
    assert!(
        !bob_late.drain().iter().any(|n| n == "updated gh://secret"),
        "a late listen stream got a denied update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_change_only_one_identity_sees_notifies_only_it() {
    let key = SigningKey::generate("k");
    let idp = Idp::start(&[&key]).await;
    let gh = demo().await;
    let gw = stacked_gateway(config(&yaml(
        &gh.url(),
        &idp.issuer,
        &[
            r#"permit(principal == Client::"alice", action == Action::"call_tool", resource);"#,
            r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");"#,
            r#"permit(principal, action == Action::"get_prompt", resource);"#,
        ],
    )))
    .await;
    let url = gw.url();
    let alice = key.sign(&idp.claims("alice", json!({})));
    let bob = key.sign(&idp.claims("bob", json!({})));
    let mut alice_legacy = Listener::legacy_as(&url, Some(&alice)).await;
    let mut bob_legacy = Listener::legacy_as(&url, Some(&bob)).await;
    let mut alice_modern = Listener::modern_as(&url, Some(&alice), &[]).await;
    let mut bob_modern = Listener::modern_as(&url, Some(&bob), &[]).await;
    assert!(
        eventually(|| gw.vmcp.sessions().len() == 4).await,
        "four listeners registered"
    );
    let control = gh.control();

    // A tool only alice may call appears: alice is told, bob is not.
    control
        .change(DemoList::Tools, |s| s.tools.push("admin_only".into()))
        .await;
    alice_legacy.expect("tools").await;
    alice_modern.expect("tools").await;
    assert!(
        alice_legacy
            .tools()
            .await
            .contains(&"gh_admin_only".to_owned()),
        "alice sees the new tool"
    );
    // The marker: a prompt change both may see.
    control
        .change(DemoList::Prompts, |s| s.prompts.push("p2".into()))
        .await;
    for bob in [&mut bob_legacy, &mut bob_modern] {
        bob.expect("prompts").await;
        let rest = bob.drain();
        assert!(
            !rest.iter().any(|n| n == "tools"),
            "bob was told about a tool he cannot see: {rest:?}"
        );
        assert_eq!(bob.tools().await, ["gh_echo"]);
    }

    // A change bob can see reaches him.
    control
        .change(DemoList::Tools, |s| s.tools.retain(|t| t != "echo"))
        .await;
    bob_legacy.expect("tools").await;
    bob_modern.expect("tools").await;
}
