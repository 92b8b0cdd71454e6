use super::*;

fn limiter(yaml: &str) -> RateLimiter {
    let config: VmcpConfig = serde_yaml_ng::from_str(yaml).unwrap();
    RateLimiter::new(&config)
}

fn request(method: &str, name: Option<&str>) -> ParsedMcpRequest {
    ParsedMcpRequest {
        id: Some(serde_json::json!(1)),
        method: method.to_owned(),
        name: name.map(str::to_owned),
        ..ParsedMcpRequest::default()
    }
}

fn who(n: u8) -> Caller {
    Caller::Identity(vec![n])
}

async fn admit(
    limiter: &RateLimiter,
    parsed: &ParsedMcpRequest,
    caller: Caller,
) -> Option<Refusal> {
    limiter
        .admit(parsed, || Arc::new(Catalog::default()), || caller, None)
        .await
}

#[tokio::test]
async fn per_user_is_per_caller_and_shared_is_shared() {
    let limiter = limiter(
        "rateLimiting: {perUser: {maxTokens: 2, refillPeriod: 1h}, shared: {maxTokens: 3, refillPeriod: 1h}}",
    );
    let call = request("tools/call", Some("t"));
    assert_eq!(admit(&limiter, &call, who(1)).await, None);
    assert_eq!(admit(&limiter, &call, who(1)).await, None);
    let refused = admit(&limiter, &call, who(1)).await.unwrap();
    assert_eq!(refused.bucket, BucketKind::PerUser);
    assert_eq!(refused.retry_after_secs, 1800);
    // Caller 2 has its own per-user budget; the shared one has one token left.
    assert_eq!(admit(&limiter, &call, who(2)).await, None);
    let refused = admit(&limiter, &call, who(2)).await.unwrap();
    assert_eq!(refused.bucket, BucketKind::Shared);
    // Other verbs are not metered by the tools/call budgets.
    assert_eq!(
        admit(&limiter, &request("tools/list", None), who(1)).await,
        None
    );
}

#[tokio::test]
async fn verbs_and_tools_by_name() {
    let limiter = limiter(
        "rateLimiting: {tools: [{name: slow, perUser: {maxTokens: 1, refillPeriod: 1m}}], verbs: {lists: {shared: {maxTokens: 1, refillPeriod: 1m}}}}",
    );
    let slow = request("tools/call", Some("slow"));
    assert_eq!(admit(&limiter, &slow, who(1)).await, None);
    assert_eq!(
        admit(&limiter, &slow, who(1)).await.map(|r| r.bucket),
        Some(BucketKind::ToolPerUser)
    );
    // Another tool is not limited.
    assert_eq!(
        admit(&limiter, &request("tools/call", Some("fast")), who(1)).await,
        None
    );
    assert_eq!(
        admit(&limiter, &request("prompts/list", None), who(1)).await,
        None
    );
    assert_eq!(
        admit(&limiter, &request("tools/list", None), who(2))
            .await
            .map(|r| r.bucket),
        Some(BucketKind::VerbShared)
    );
    // Notifications are not metered.
    let mut note = request("tools/list", None);
    note.id = None;
    assert_eq!(admit(&limiter, &note, who(2)).await, None);
    // Steps are metered as calls of their tool (not by the global budgets).
    assert_eq!(
        limiter
            .admit_step("slow", "b", &who(1), None)
            .await
            .map(|r| r.bucket),
        Some(BucketKind::ToolPerUser)
    );
    assert_eq!(limiter.admit_step("slow", "b", &who(3), None).await, None);
}

#[tokio::test]
async fn anonymous_callers_by_address_or_shared() {
    let addr = |n: u8| Caller::Address(IpAddr::from([10, 0, 0, n]));
    let yaml = "rateLimiting: {perUser: {maxTokens: 1, refillPeriod: 1m}}";
    let by_address = limiter(yaml);
    let call = request("tools/call", Some("t"));
    assert_eq!(admit(&by_address, &call, addr(1)).await, None);
    assert_eq!(admit(&by_address, &call, addr(2)).await, None);
    assert!(admit(&by_address, &call, addr(1)).await.is_some());
    let shared =
        limiter("rateLimiting: {perUser: {maxTokens: 1, refillPeriod: 1m}, anonymous: shared}");
    assert_eq!(admit(&shared, &call, addr(1)).await, None);
    assert!(admit(&shared, &call, addr(2)).await.is_some());
    // An authenticated caller is never the anonymous one.
    assert_eq!(admit(&shared, &call, who(1)).await, None);
}

struct Broken;

impl BucketStore for Broken {
    fn take<'a>(
        &'a self,
        _: &'a [Charge],
    ) -> futures::future::BoxFuture<'a, Result<Decision, bucket::StoreError>> {
        Box::pin(std::future::ready(Err(bucket::StoreError("down".into()))))
    }
}

#[tokio::test]
async fn a_store_error_fails_open_or_closed() {
    let call = request("tools/call", Some("t"));
    for (mode, refused) in [("open", false), ("closed", true)] {
        let limiter = limiter(&format!(
            "rateLimiting: {{shared: {{maxTokens: 1, refillPeriod: 1m}}, failMode: {mode}}}"
        ));
        let _ = limiter.shared_store.set(Arc::new(Broken));
        for _ in 0..3 {
            assert_eq!(
                admit(&limiter, &call, who(1)).await.is_some(),
                refused,
                "{mode}"
            );
        }
    }
}

#[tokio::test]
async fn backend_slots_cap_and_survive_a_reload() {
    let yaml = "backends: [{name: b, url: 'http://h/mcp'}]\nrateLimiting: {backends: [{name: b, maxConcurrent: 1}]}";
    let limiter = limiter(yaml);
    let first = limiter
        .slot("b", || Duration::from_millis(1))
        .await
        .unwrap();
    assert!(first.is_some());
    assert_eq!(limiter.in_flight(), [("b".to_owned(), 1, 1)]);
    assert_eq!(
        limiter.slot("b", || Duration::from_millis(5)).await.err(),
        Some(Duration::from_millis(5))
    );
    assert!(
        limiter
            .slot("other", || Duration::from_millis(1))
            .await
            .unwrap()
            .is_none()
    );
    // The same cap after a reload: the call in flight still counts.
    limiter.reconfigure(&serde_yaml_ng::from_str(yaml).unwrap());
    assert!(
        limiter
            .slot("b", || Duration::from_millis(5))
            .await
            .is_err()
    );
    drop(first);
    assert!(
        limiter
            .slot("b", || Duration::from_millis(5))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_composite_takes_the_global_tokens_once_and_its_steps_their_tools() {
    let limiter = limiter(
        "rateLimiting: {shared: {maxTokens: 1, refillPeriod: 1h}, tools: [{name: step, shared: {maxTokens: 2, refillPeriod: 1h}}]}",
    );
    // The composite's call: the one global token.
    assert_eq!(
        admit(&limiter, &request("tools/call", Some("composite")), who(1)).await,
        None
    );
    // Its two steps: the step tool's two tokens, no global one.
    for _ in 0..2 {
        assert_eq!(limiter.admit_step("step", "b", &who(1), None).await, None);
    }
    assert_eq!(
        limiter
            .admit_step("step", "b", &who(1), None)
            .await
            .map(|r| r.bucket),
        Some(BucketKind::ToolShared)
    );
    assert_eq!(
        admit(&limiter, &request("tools/call", Some("composite")), who(1))
            .await
            .map(|r| r.bucket),
        Some(BucketKind::Shared)
    );
}
