// Over 600 lines: one bench per layer plus the stack, sharing the fixtures at the top; splitting would duplicate them across bench binaries.
//! Per-request cost of each layer, of a Cedar decision and a JWT validation, and of
//! the whole stack against the bare service.
//!
//! ```text
//! cargo bench -p vmcp-tests --bench layers
//! ```
//!
//! Layer benchmarks wrap a trivial inner service (`layer/bare` is that service
//! alone), so a layer's cost is its time minus `layer/bare`. The inner layers get the
//! request extensions the outer ones would have set. `vmcp/*` runs real requests
//! through `VmcpService` (two in-process demo backends on loopback), bare and behind
//! the full stack from configuration: JWT (cached token), Cedar, audit to a file,
//! telemetry with tracing and Prometheus.

use std::convert::Infallible;
use std::sync::{Arc, LazyLock};

use axum::body::Body;
use bytes::Bytes;
use divan::Bencher;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};
use tower::{Layer, Service, ServiceExt};
use vmcp_examples::demo::{DemoSpec, RunningDemo, spawn};
use vmcp_layers::annotations::AnnotationEnrichmentLayer;
use vmcp_layers::audit::{AuditLayer, AuditSettings, WriterSink};
use vmcp_layers::auth::{AuthLayer, JwtSettings, JwtValidator};
use vmcp_layers::authz::AuthorizationLayer;
use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, Target, sources};
use vmcp_layers::backend_enrichment::BackendEnrichmentLayer;
use vmcp_layers::context::{
    AdmissionDecision, CallKind, CapabilityProvider, CatalogView, Discovered, DiscoveryError,
    Identity, ParsedMcpRequest, ToolAnnotations, ToolInfo,
};
use vmcp_layers::discovery::DiscoveryLayer;
use vmcp_layers::gate::GateLayer;
use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_layers::parse::McpParseLayer;
use vmcp_layers::recovery::RecoveryLayer;
use vmcp_layers::stack::Stack;
use vmcp_layers::telemetry::{Telemetry, TelemetrySettings};
use vmcp_service::{Vmcp, VmcpService};
use vmcp_tests::idp::{Idp, SigningKey};

fn main() {
    divan::main();
}

static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
});

const POLICIES: [&str; 5] = [
    r#"permit(principal, action == Action::"call_tool", resource == Tool::"gh_echo");"#,
    r#"permit(principal in THVGroup::"admins", action == Action::"call_tool", resource in Backend::"gh");"#,
    r#"permit(principal, action == Action::"call_tool", resource) when { context.annotations has readOnlyHint && context.annotations.readOnlyHint };"#,
    r#"forbid(principal, action == Action::"call_tool", resource) when { context.arguments has repo && context.arguments.repo like "secret/*" };"#,
    r#"permit(principal, action in [Action::"get_prompt", Action::"read_resource"], resource);"#,
];

fn cedar() -> Arc<CedarAuthorizer> {
    let policies: Vec<String> = POLICIES.iter().map(|p| p.to_string()).collect();
    Arc::new(
        CedarAuthorizer::from_sources(
            &sources("bench", &policies, &[]),
            CedarSettings {
                server_name: Some("eng".into()),
                ..CedarSettings::default()
            },
        )
        .expect("policies"),
    )
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gh_echo","arguments":{"text":"hello","repo":"acme/x","n":3},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}}}}"#;

fn outer_request() -> Request<Body> {
    Request::post("/mcp")
        .header("host", "127.0.0.1:4483")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "gh_echo")
        .body(Body::from(CALL))
        .unwrap()
}

fn identity() -> Arc<Identity> {
    static ALICE: LazyLock<Arc<Identity>> = LazyLock::new(|| {
        Arc::new(Identity {
            subject: "alice".into(),
            issuer: Some("https://idp".into()),
            groups: vec!["devs".into()],
            claims: json!({"sub": "alice", "tier": "gold"})
                .as_object()
                .cloned()
                .unwrap(),
        })
    });
    ALICE.clone()
}

struct View {
    tools: std::collections::HashMap<String, ToolInfo>,
}

impl CatalogView for View {
    fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.tools.get(name).cloned()
    }
    fn prompt_backend(&self, _: &str) -> Option<Arc<str>> {
        None
    }
    fn resource_backend(&self, _: &str) -> Option<Arc<str>> {
        None
    }
}

impl CapabilityProvider for View {
    fn view(
        &self,
        _: &Identity,
    ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>> {
        let view = VIEW.clone();
        Box::pin(async move { Ok(view as Arc<dyn CatalogView>) })
    }
}

static VIEW: LazyLock<Arc<View>> = LazyLock::new(|| {
    let tools = (0..1000)
        .map(|i| {
            (
                if i == 0 {
                    "gh_echo".to_owned()
                } else {
                    format!("gh_tool{i}")
                },
                ToolInfo {
                    backend: Arc::from("gh"),
                    annotations: ToolAnnotations {
                        read_only: Some(i % 2 == 0),
                        ..ToolAnnotations::default()
                    },
                },
            )
        })
        .collect();
    Arc::new(View { tools })
});

/// A request as the inner layers see it: buffered, parsed, with identity and view.
fn inner_request() -> Request<Full<Bytes>> {
    let mut request = Request::post("/mcp")
        .body(Full::new(Bytes::from_static(CALL.as_bytes())))
        .unwrap();
    let parsed = ParsedMcpRequest::parse(CALL.as_bytes(), Some("2026-07-28"), false).unwrap();
    let ext = request.extensions_mut();
    ext.insert(identity());
    ext.insert(Arc::new(parsed));
    ext.insert(Discovered(VIEW.clone()));
    ext.insert(ToolAnnotations {
        read_only: Some(true),
        ..ToolAnnotations::default()
    });
    ext.insert(AdmissionDecision {
        kind: CallKind::Tool,
        allowed: true,
    });
    request
}

#[derive(Clone)]
struct Ok200;

impl<B: Send + 'static> Service<Request<B>> for Ok200 {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::from(
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#,
        ))))
    }
}

fn run<S, B>(service: &S, request: Request<B>) -> usize
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone,
{
    RT.block_on(async {
        let response = service.clone().oneshot(request).await.unwrap();
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .len()
    })
}

mod layer {
    use super::*;

    #[divan::bench]
    fn bare(b: Bencher) {
        b.with_inputs(inner_request)
            .bench_values(|r| run(&Ok200, r));
    }

    #[divan::bench]
    fn recovery(b: Bencher) {
        let s = RecoveryLayer::new().layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn headers(b: Bencher) {
        let s = HeaderValidationLayer::new().layer(Ok200);
        b.with_inputs(outer_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn audit(b: Bencher) {
        let s = AuditLayer::new(
            AuditSettings::default(),
            Arc::new(WriterSink::new(std::io::sink())),
        )
        .layer(Ok200);
        b.with_inputs(outer_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn auth_anonymous_and_parse(b: Bencher) {
        let s = AuthLayer::anonymous().layer(McpParseLayer::new().layer(Ok200));
        b.with_inputs(outer_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn auth_jwt_cached_and_parse(b: Bencher) {
        let (validator, token) = jwt();
        let s = AuthLayer::jwt(validator, None).layer(McpParseLayer::new().layer(Ok200));
        b.with_inputs(|| {
            let mut r = outer_request();
            r.headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            r
        })
        .bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn discovery(b: Bencher) {
        let s = DiscoveryLayer::new(VIEW.clone()).layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn annotations(b: Bencher) {
        let s = AnnotationEnrichmentLayer::new().layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn authz(b: Bencher) {
        let s = AuthorizationLayer::new(cedar()).layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn backend_enrichment(b: Bencher) {
        let s = BackendEnrichmentLayer::new().layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn telemetry(b: Bencher) {
        // Tracing on (spans are built and batched; the collector is absent) and
        // Prometheus metrics.
        let t = Telemetry::new(&TelemetrySettings {
            endpoint: Some("http://127.0.0.1:9".into()),
            tracing: true,
            prometheus: true,
            ..TelemetrySettings::default()
        })
        .unwrap();
        let s = t.layer().layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }

    #[divan::bench]
    fn gate(b: Bencher) {
        let s = GateLayer::new().layer(Ok200);
        b.with_inputs(inner_request).bench_values(|r| run(&s, r));
    }
}

fn jwt() -> (Arc<JwtValidator>, String) {
    let key = SigningKey::generate("k");
    let keys = serde_json::from_value(json!({"keys": [key.jwk]})).unwrap();
    let validator = Arc::new(JwtValidator::with_keys(
        JwtSettings::new("https://idp", "vmcp"),
        &keys,
    ));
    let now = vmcp_tests::idp::now();
    let token = key.sign(&json!({"iss": "https://idp", "aud": "vmcp", "sub": "alice", "exp": now + 3600, "groups": ["devs"]}));
    (validator, token)
}

mod decision {
    use super::*;

    /// A `tools/call` decision with arguments (never cached).
    #[divan::bench]
    fn cedar_call_with_arguments(b: Bencher) {
        let cedar = cedar();
        let alice = identity();
        let args: Map<String, Value> =
            json!({"text": "hello", "repo": "acme/x", "n": 3, "ratio": 0.5})
                .as_object()
                .cloned()
                .unwrap();
        let annotations = ToolAnnotations::default();
        b.bench(|| {
            cedar
                .decide(
                    &alice,
                    Target::Tool {
                        name: "gh_echo",
                        backend: Some("gh"),
                        annotations: &annotations,
                    },
                    Some(&args),
                )
                .unwrap()
        });
    }

    /// Filtering a 1000-tool `tools/list` (argument-free decisions, cached per identity).
    #[divan::bench]
    fn cedar_filter_1000_tools(b: Bencher) {
        let cedar = cedar();
        let alice = identity();
        let names: Vec<(String, ToolAnnotations)> = VIEW
            .tools
            .iter()
            .map(|(n, t)| (n.clone(), t.annotations.clone()))
            .collect();
        b.bench(|| {
            names
                .iter()
                .filter(|(name, annotations)| {
                    cedar
                        .decide(
                            &alice,
                            Target::Tool {
                                name,
                                backend: Some("gh"),
                                annotations,
                            },
                            None,
                        )
                        .unwrap()
                })
                .count()
        });
    }

    /// Validating a token seen before (identity cache).
    #[divan::bench]
    fn jwt_cached(b: Bencher) {
        let (validator, token) = jwt();
        b.bench(|| RT.block_on(validator.validate(&token)).unwrap());
    }

    /// Validating a new token: RS256 signature and claims.
    #[divan::bench]
    fn jwt_first_sight(b: Bencher) {
        let key = SigningKey::generate("k");
        let keys = serde_json::from_value(json!({"keys": [key.jwk]})).unwrap();
        let validator = JwtValidator::with_keys(JwtSettings::new("https://idp", "vmcp"), &keys);
        let now = vmcp_tests::idp::now();
        let n = std::sync::atomic::AtomicU64::new(0);
        b.with_inputs(|| {
            let n = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            key.sign(&json!({"iss": "https://idp", "aud": "vmcp", "sub": "alice", "exp": now + 3600, "jti": n}))
        })
        .bench_values(|token| RT.block_on(validator.validate(&token)).unwrap());
    }
}

struct Fixture {
    _backends: Vec<RunningDemo>,
    _idp: Idp,
    bare: Vmcp,
    service: VmcpService,
    stacked: Vmcp,
    stack: Stack,
    minimal: Stack,
    _untraced: Vmcp,
    untraced: Stack,
    token: String,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    RT.block_on(async {
        let gh = spawn(DemoSpec::new("gh", &["echo", "add", "upper", "whoami"]), 0).await.unwrap();
        let jira = spawn(DemoSpec::new("jira", &["echo", "get_issue", "add_comment"]), 0)
            .await
            .unwrap();
        let key = SigningKey::generate("k");
        let idp = Idp::start(&[&key]).await;
        let backends = format!("backends: [{{name: gh, url: '{}'}}, {{name: jira, url: '{}'}}]\n", gh.url(), jira.url());
        let plain: vmcp_service::VmcpConfig = vmcp_tests::config(&format!("name: eng\n{backends}"));
        let policies: Vec<String> = POLICIES.iter().map(|p| format!("      - '{p}'")).collect();
        let layered = vmcp_tests::config(&format!(
            "name: eng\n{backends}incomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n  authz:\n    type: cedar\n    policies:\n{}\naudit: {{logFile: /dev/null}}\ntelemetry: {{endpoint: 'http://127.0.0.1:9', tracingEnabled: true, enablePrometheusMetricsPath: true}}\n",
            idp.issuer,
            policies.join("\n")
        ));
        // The full stack without telemetry, to see what telemetry adds to a call.
        let untraced_config = vmcp_tests::config(&format!(
            "name: eng\n{backends}incomingAuth:\n  type: oidc\n  oidc: {{issuer: '{}', audience: vmcp}}\n  authz:\n    type: cedar\n    policies:\n{}\naudit: {{logFile: /dev/null}}\n",
            idp.issuer,
            policies.join("\n")
        ));
        let untraced_vmcp = Vmcp::start(untraced_config).await.unwrap();
        let untraced = untraced_vmcp
            .stack(Default::default(), HeaderValidationLayer::new())
            .unwrap();
        let bare = Vmcp::start(plain).await.unwrap();
        let service = bare.service();
        // No sections configured: recovery, headers, anonymous auth + parsing, discovery.
        let minimal = bare.stack(Default::default(), HeaderValidationLayer::new()).unwrap();
        let stacked = Vmcp::start(layered).await.unwrap();
        let stack = stacked.stack(Default::default(), HeaderValidationLayer::new()).unwrap();
        let token = key.sign(&idp.claims("alice", json!({"groups": ["admins"]})));
        Fixture {
            _backends: vec![gh, jira],
            _idp: idp,
            bare,
            service,
            stacked,
            stack,
            minimal,
            _untraced: untraced_vmcp,
            untraced,
            token,
        }
    })
});

fn modern(method: &str, params: Value, token: Option<&str>) -> Request<Body> {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{},
        "io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}});
    let mut builder = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        builder = builder.header("mcp-name", name);
    }
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    builder
        .body(Body::from(
            json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string(),
        ))
        .unwrap()
}

fn through<S>(service: S, request: Request<Body>) -> usize
where
    S: Service<Request<Body>, Error = Infallible>,
    S::Response: axum::response::IntoResponse,
{
    RT.block_on(async {
        let response =
            axum::response::IntoResponse::into_response(service.oneshot(request).await.unwrap());
        assert!(response.status().is_success(), "{}", response.status());
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .len()
    })
}

mod vmcp {
    use super::*;

    #[divan::bench]
    fn tools_list_bare(b: Bencher) {
        let f = &*FIXTURE;
        let _ = &f.bare;
        b.with_inputs(|| modern("tools/list", json!({}), None))
            .bench_values(|r| through(f.service.clone(), r));
    }

    #[divan::bench]
    fn tools_list_minimal_stack(b: Bencher) {
        let f = &*FIXTURE;
        let router = f.minimal.router();
        b.with_inputs(|| modern("tools/list", json!({}), None))
            .bench_values(|r| through(router.clone(), r));
    }

    #[divan::bench]
    fn tools_list_full_stack(b: Bencher) {
        let f = &*FIXTURE;
        let _ = &f.stacked;
        let router = f.stack.router();
        b.with_inputs(|| modern("tools/list", json!({}), Some(&f.token)))
            .bench_values(|r| through(router.clone(), r));
    }

    #[divan::bench]
    fn tools_call_bare(b: Bencher) {
        let f = &*FIXTURE;
        b.with_inputs(|| {
            modern(
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
                None,
            )
        })
        .bench_values(|r| through(f.service.clone(), r));
    }

    /// The bare service of the gateway behind `tools_call_full_stack` (its own
    /// backend connections), to separate the layers from the gateway instance.
    #[divan::bench]
    fn tools_call_bare_of_the_stacked_gateway(b: Bencher) {
        let f = &*FIXTURE;
        let service = f.stacked.service();
        b.with_inputs(|| {
            modern(
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
                None,
            )
        })
        .bench_values(|r| through(service.clone(), r));
    }

    #[divan::bench]
    fn tools_call_minimal_stack(b: Bencher) {
        let f = &*FIXTURE;
        let router = f.minimal.router();
        b.with_inputs(|| {
            modern(
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
                None,
            )
        })
        .bench_values(|r| through(router.clone(), r));
    }

    #[divan::bench]
    fn tools_call_stack_without_telemetry(b: Bencher) {
        let f = &*FIXTURE;
        let router = f.untraced.router();
        b.with_inputs(|| {
            modern(
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
                Some(&f.token),
            )
        })
        .bench_values(|r| through(router.clone(), r));
    }

    #[divan::bench]
    fn tools_call_full_stack(b: Bencher) {
        let f = &*FIXTURE;
        let router = f.stack.router();
        b.with_inputs(|| {
            modern(
                "tools/call",
                json!({"name": "gh_echo", "arguments": {"text": "hi"}}),
                Some(&f.token),
            )
        })
        .bench_values(|r| through(router.clone(), r));
    }
}
