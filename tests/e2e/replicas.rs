//! Legacy sessions shared by replicas (`sessionStorage: redis`): two in-process
//! gateways, each with its own rmcp session manager, sharing one real
//! redis-server. A session created on one is served by the other without a new
//! `initialize`; another subject holding its id gets the unknown-session answer
//! on every replica; the per-caller cap counts across replicas; the record's TTL
//! slides as the session is used (read with `redis-cli PTTL`).

use reqwest::Method;
use serde_json::json;
use vmcp_examples::demo::{DemoSpec, spawn};
use vmcp_tests::config;
use vmcp_tests::idp::{Idp, SigningKey};
use vmcp_tests::redis::RedisServer;
use vmcp_tests::stacked::{StackedGateway, stacked_gateway};

/// One raw request: status, body text, and the session id it created.
async fn raw(
    method: Method,
    url: &str,
    token: &str,
    session: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String, Option<String>) {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25");
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request to the gateway");
    let status = response.status().as_u16();
    let created = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = tokio::time::timeout(std::time::Duration::from_secs(5), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (status, text, created)
}

fn initialize() -> Option<serde_json::Value> {
    Some(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "replicas-test", "version": "1"}}}),
    )
}

async fn open(url: &str, token: &str) -> String {
    let (status, text, session) = raw(Method::POST, url, token, None, initialize()).await;
    assert_eq!(status, 200, "initialize: {text}");
    let session = session.expect("a session id");
    let (status, _, _) = raw(
        Method::POST,
        url,
        token,
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    )
    .await;
    assert_eq!(status, 202, "notifications/initialized");
    session
}

fn call(id: u64, n: i64) -> Option<serde_json::Value> {
    Some(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "gh_add", "arguments": {"a": n, "b": 1}}}))
}

/// A call (JSON-RPC id `id`) on each `(replica, session)` of `held` is answered
/// 200; `what` names the moment in the message.
async fn each_held_answers(
    set: &Replicas,
    token: &str,
    held: &[(usize, String)],
    id: u64,
    what: &str,
) {
    for (i, session) in held {
        let (status, text, _) = raw(
            Method::POST,
            &set.url(*i),
            token,
            Some(session),
            call(id, 1),
        )
        .await;
        assert_eq!(status, 200, "{what} (replica {i}): {text}");
    }
}

struct Replicas {
    _idp: Idp,
    key: SigningKey,
    issuer: String,
    redis: RedisServer,
    gateways: Vec<StackedGateway>,
}

impl Replicas {
    async fn start(count: usize, sessions: &str) -> Self {
        let key = SigningKey::generate("k1");
        let idp = Idp::start(&[&key]).await;
        let gh = spawn(DemoSpec::new("gh", &["add"]), 0).await.unwrap();
        let redis = RedisServer::start().await;
        let mut gateways = Vec::new();
        for _ in 0..count {
            gateways.push(
                stacked_gateway(config(&format!(
                    "backends: [{{name: gh, url: '{}'}}]\nincomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\nsessionStorage: {{provider: redis, address: '{}', keyPrefix: 'rp:'}}\noperational: {{sessions: {sessions}}}\n",
                    gh.url(),
                    idp.issuer,
                    redis.address(),
                )))
                .await,
            );
        }
        std::mem::forget(gh);
        Self {
            issuer: idp.issuer.clone(),
            _idp: idp,
            key,
            redis,
            gateways,
        }
    }

    fn token(&self, subject: &str) -> String {
        let _ = &self.issuer;
        self.key.sign(&self._idp.claims(subject, json!({})))
    }

    fn url(&self, i: usize) -> String {
        self.gateways[i].url()
    }
}

/// A session opened on replica 0 is served by replica 1 (no new `initialize`),
/// then by 0 again; Bob holding its id is answered on both exactly as for an id
/// that does not exist, and his tries restore nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_restores_the_session_for_its_owner_only() {
    let set = Replicas::start(2, "{}").await;
    let (alice, bob) = (set.token("alice"), set.token("bob"));
    let session = open(&set.url(0), &alice).await;
    let record = set
        .redis
        .cli(&["HGET", &format!("rp:session:{session}"), "revision"])
        .await;
    assert_eq!(record, "2025-11-25", "the record is written at initialize");
    let owner = set
        .redis
        .cli(&["HGET", &format!("rp:session:{session}"), "owner"])
        .await;
    assert_eq!(owner.len(), 64, "an HMAC-SHA256, hex: {owner}");
    assert!(!owner.contains("alice"));

    // Bob first, on the replica that does not hold it and on the one that does.
    let unknown = "00000000-0000-0000-0000-000000000000";
    for i in [1, 0] {
        let (status, text, _) =
            raw(Method::POST, &set.url(i), &bob, Some(&session), call(5, 1)).await;
        let (unknown_status, unknown_text, _) =
            raw(Method::POST, &set.url(i), &bob, Some(unknown), call(5, 1)).await;
        assert_eq!(
            (status, text),
            (unknown_status, unknown_text),
            "replica {i}: Bob on Alice's session must look like an unknown session"
        );
        assert_eq!(status, 404, "replica {i}");
    }
    assert_eq!(
        set.gateways[1].vmcp.sessions().len(),
        0,
        "Bob restored nothing"
    );

    for (id, i) in [(6u64, 1usize), (7, 0), (8, 1)] {
        let (status, text, _) = raw(
            Method::POST,
            &set.url(i),
            &alice,
            Some(&session),
            call(id, id as i64),
        )
        .await;
        assert_eq!(status, 200, "replica {i}: {text}");
        assert!(
            text.contains(&format!("{}", id + 1)) && text.contains("\"isError\":false"),
            "replica {i} answers Alice's call: {text}"
        );
    }
    // Restored on replica 1 as a live session (its listener registered).
    assert!(
        vmcp_tests::eventually(|| set.gateways[1].vmcp.sessions().len() == 1).await,
        "replica 1 registered the restored session"
    );

    // DELETE on replica 1: gone from Redis, and replica 0 closes its copy.
    let (status, _, _) = raw(Method::DELETE, &set.url(1), &alice, Some(&session), None).await;
    assert!((200..300).contains(&status), "Alice's DELETE: {status}");
    assert_eq!(
        set.redis
            .cli(&["EXISTS", &format!("rp:session:{session}")])
            .await,
        "0"
    );
    let (status, _, _) = raw(
        Method::POST,
        &set.url(1),
        &alice,
        Some(&session),
        call(9, 1),
    )
    .await;
    assert_eq!(status, 404, "deleted: unknown on replica 1");
}

/// `maxPerIdentity: 1` holds across replicas: Alice's second session, asked of
/// the other replica, is refused with 503 while her first one lives; Bob is not
/// affected; after her DELETE she may open one anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_caller_cap_counts_across_replicas() {
    let set = Replicas::start(2, "{maxPerIdentity: 1}").await;
    let (alice, bob) = (set.token("alice"), set.token("bob"));
    let first = open(&set.url(0), &alice).await;
    let (status, text, _) = raw(Method::POST, &set.url(1), &alice, None, initialize()).await;
    assert_eq!(status, 503, "over the cap across replicas: {text}");
    let _bob = open(&set.url(1), &bob).await;
    let (status, _, _) = raw(Method::DELETE, &set.url(0), &alice, Some(&first), None).await;
    assert!((200..300).contains(&status));
    let _second = open(&set.url(1), &alice).await;
}

/// The record's TTL is the session TTL and slides when the session is used on
/// any replica (the pass batches it, off the request's path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_ttl_slides_with_use() {
    let set = Replicas::start(2, "{ttl: 60s}").await;
    let alice = set.token("alice");
    let session = open(&set.url(0), &alice).await;
    let key = format!("rp:session:{session}");
    let pttl = || async { set.redis.cli(&["PTTL", &key]).await.parse::<i64>().unwrap() };
    let first = pttl().await;
    assert!((1..=60_000).contains(&first), "PTTL {first}");
    // Let it run down, then use the session on the other replica.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while pttl().await > first - 1500 {
        assert!(tokio::time::Instant::now() < deadline, "the TTL runs down");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let low = pttl().await;
    let (status, text, _) = raw(
        Method::POST,
        &set.url(1),
        &alice,
        Some(&session),
        call(3, 1),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let mut slid = false;
    while tokio::time::Instant::now() < deadline + std::time::Duration::from_secs(5) {
        if pttl().await > low + 500 {
            slid = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(slid, "the TTL slid back up from {low}");
    let last_used = set.redis.cli(&["HGET", &key, "last_used"]).await;
    assert!(last_used.parse::<u64>().is_ok(), "{last_used}");
}

/// Redis killed under load: four sessions (two held by each replica) run calls
/// concurrently through the outage; `/readyz` flips to 503 on both replicas and
/// back, every call of a held session is answered, a new session is served
/// locally, nothing panics. Afterwards the state is consistent: every live
/// session has its record again, the caller's zset counts exactly them, and the
/// other replica restores the session created during the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_outlive_a_redis_outage_and_catch_up_after() {
    let panics = vmcp_tests::panics::PanicCount::start();
    let mut set = Replicas::start(2, "{}").await;
    let alice = set.token("alice");
    let mut held = Vec::new();
    for i in [0, 0, 1, 1] {
        held.push((i, open(&set.url(i), &alice).await));
    }
    let store = set.gateways[0].vmcp.shared_store().unwrap().clone();
    let other = set.gateways[1].vmcp.shared_store().unwrap().clone();
    let mut status = Vec::new();
    for gw in &set.gateways {
        status.push(vmcp_tests::serve_on_loopback(gw.vmcp.status_router()).await);
    }
    let readyz = |i: usize| {
        let url = format!("http://{}/readyz", status[i].0);
        async move {
            reqwest::get(url)
                .await
                .expect("GET /readyz")
                .status()
                .as_u16()
        }
    };
    assert_eq!((readyz(0).await, readyz(1).await), (200, 200));
    // The load: calls on each held session, one after another, until told to stop.
    let stop = tokio_util::sync::CancellationToken::new();
    let mut load = Vec::new();
    for (i, session) in &held {
        let (url, token, session, stop) =
            (set.url(*i), alice.clone(), session.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut id = 100u64;
            while !stop.is_cancelled() {
                let (status, text, _) =
                    raw(Method::POST, &url, &token, Some(&session), call(id, 1)).await;
                answered.push((status, text.contains("\"isError\":false")));
                id += 1;
            }
            answered
        }));
    }
    set.redis.kill().await;
    assert!(vmcp_tests::eventually(|| !store.is_up() && !other.is_up()).await);
    assert_eq!(
        (readyz(0).await, readyz(1).await),
        (503, 503),
        "not ready while the shared store is down"
    );
    each_held_answers(&set, &alice, &held, 1, "a held session while Redis is down").await;
    let local = open(&set.url(0), &alice).await;
    let (status, text, _) = raw(Method::POST, &set.url(0), &alice, Some(&local), call(2, 1)).await;
    assert_eq!(status, 200, "a new, local-only session: {text}");

    set.redis.restart().await;
    assert!(vmcp_tests::eventually(|| store.is_up() && other.is_up()).await);
    assert_eq!(
        (readyz(0).await, readyz(1).await),
        (200, 200),
        "ready again"
    );
    stop.cancel();
    for (task, (i, session)) in load.into_iter().zip(&held) {
        let answered = task.await.expect("a load task");
        assert!(
            answered.len() >= 3,
            "calls of {session} on replica {i} ran through the outage: {answered:?}"
        );
        assert!(
            answered.iter().all(|&(status, ok)| status == 200 && ok),
            "every call of {session} on replica {i} answered: {answered:?}"
        );
    }
    // Catch-up: the record of every live session is written (again: Redis lost
    // them all), and the caller's zset counts exactly those sessions.
    let live: Vec<&String> = held.iter().map(|(_, s)| s).chain([&local]).collect();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    for session in &live {
        while set
            .redis
            .cli(&["EXISTS", &format!("rp:session:{session}")])
            .await
            != "1"
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the record of {session} is written after the outage"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let records = set.redis.cli(&["KEYS", "rp:session:*"]).await;
    assert_eq!(records.lines().count(), live.len(), "{records}");
    let zsets = set.redis.cli(&["KEYS", "rp:sessions-of:*"]).await;
    let zsets: Vec<&str> = zsets.lines().collect();
    assert_eq!(zsets.len(), 1, "one caller: {zsets:?}");
    let members = set.redis.cli(&["ZRANGE", zsets[0], "0", "-1"]).await;
    let mut members: Vec<&str> = members.lines().collect();
    let mut expected: Vec<&str> = live.iter().map(|s| s.as_str()).collect();
    members.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        members, expected,
        "the cap counts exactly the live sessions"
    );
    let (status, text, _) = raw(Method::POST, &set.url(1), &alice, Some(&local), call(3, 1)).await;
    assert_eq!(status, 200, "restored on the other replica: {text}");
    each_held_answers(&set, &alice, &held, 4, "a held session after the outage").await;
    assert_eq!(panics.since(), 0, "no panic through the outage");
}
