//! Variant (c): the gateway behind the full layer stack, measured exactly like
//! variant (b).
//!
//! [`full_stack`] wraps `vmcp.service()` (the service (b) serves) with
//! `vmcp_layers::StackBuilder`, configured as a deployment with OIDC and Cedar and
//! audit would be, minus telemetry:
//!
//! - **authentication**: bearer JWTs, RS256, checked by `JwtValidator` against the
//!   public key of an RSA-2048 key generated at start ([`crate::issuer`]). The
//!   validator is given the key set (`JwtValidator::with_keys`), so no JWKS is
//!   fetched. One token, valid for a day, is minted for the run; the validator
//!   caches a validated token's identity, so after the first request a token costs a
//!   cache lookup, as it does for any client that reuses its token.
//! - **authorization**: Cedar with [`POLICIES`]: the caller's `engineering` group
//!   may call the tools of backend `bench`, and no one may call a tool annotated
//!   destructive. Lists are filtered by the same decision, so `tools/list` shows all
//!   ten tools, each one decided (decisions without arguments are cached per
//!   identity; calls are decided every time, with their arguments).
//! - **audit**: on, default settings (no request or response payloads): every
//!   request's record is built and serialized to a JSON line, then counted and
//!   dropped ([`AuditCount`]), or appended to the file named by
//!   `VMCP_BENCH_AUDIT_FILE` when that is set.
//! - the layers the builder adds with these: recovery, header validation, discovery
//!   (the aggregator's catalog as the caller's view), tool annotations, backend
//!   enrichment (the audit record's backend) and the gate.
//!
//! Variant (u) is the same stack without the authorizer, measured on `tools/list`
//! only: (c)/(u) is what filtering a list by the caller's view costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use vmcp_layers::audit::{AuditLayer, AuditSettings, AuditSink, WriterSink};
use vmcp_layers::auth::{AuthLayer, JwtSettings, JwtValidator};
use vmcp_layers::authz::cedar::{CedarAuthorizer, CedarSettings, sources};
use vmcp_layers::stack::StackBuilder;
use vmcp_service::CatalogProvider;
use vmcp_service::Vmcp;

use crate::client::{Client, Op, Revision, Target};
use crate::issuer::{AUDIENCE, ISSUER, Issuer};

/// The Cedar policies of variant (c).
pub const POLICIES: [&str; 2] = [
    r#"@id("engineering-may-call-bench-tools")
permit (
    principal in THVGroup::"engineering",
    action == Action::"call_tool",
    resource in Backend::"bench"
);"#,
    r#"@id("no-destructive-tools")
forbid (principal, action == Action::"call_tool", resource)
when { resource has destructiveHint && resource.destructiveHint };"#,
];

/// How long the run's token is valid.
const TOKEN_LIFETIME_SECS: u64 = 24 * 3600;

/// A ready-to-serve layered gateway and what its clients must send.
pub struct Stack {
    /// The router to serve: the layers around the aggregating service at `/mcp`.
    pub router: axum::Router,
    /// Headers added to every request: `Authorization: Bearer <jwt>`.
    pub headers: HeaderMap,
    /// Headers of a caller the policies do not admit (a valid token, another group).
    pub outsider_headers: HeaderMap,
    /// The layers, outermost first.
    pub layers: Vec<&'static str>,
    /// What the audit layer has written.
    pub audit: Arc<AuditCount>,
}

/// Audit lines and bytes written so far.
#[derive(Debug, Default)]
pub struct AuditCount {
    lines: AtomicU64,
    bytes: AtomicU64,
}

impl AuditCount {
    /// (lines, bytes) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.lines.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Counts each serialized audit line, then drops it or hands it to `file`.
struct CountingSink {
    count: Arc<AuditCount>,
    file: Option<WriterSink<std::fs::File>>,
}

impl AuditSink for CountingSink {
    fn write(&self, line: &[u8]) {
        self.count.lines.fetch_add(1, Ordering::Relaxed);
        self.count
            .bytes
            .fetch_add(line.len() as u64, Ordering::Relaxed);
        if let Some(file) = &self.file {
            file.write(line);
        }
    }
}

fn bearer(token: &str) -> Result<HeaderMap, String> {
    let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
    Ok(HeaderMap::from_iter([(AUTHORIZATION, value)]))
}

/// Build variant (c) around `vmcp`, or without `cedar` variant (u) (the same stack,
/// every request admitted, lists unfiltered), or say why it cannot be built.
pub fn full_stack(vmcp: &Vmcp, cedar: bool) -> Result<Stack, String> {
    let issuer = Issuer::generate("vmcp-bench-1")?;
    let validator = JwtValidator::with_keys(JwtSettings::new(ISSUER, AUDIENCE), &issuer.jwks()?);
    let token = issuer.token("alice", &["engineering"], TOKEN_LIFETIME_SECS)?;
    let outsider = issuer.token("mallory", &["contractors"], TOKEN_LIFETIME_SECS)?;

    let policies: Vec<String> = POLICIES.iter().map(|p| (*p).to_owned()).collect();
    let authorizer =
        CedarAuthorizer::from_sources(&sources("bench", &policies, &[]), CedarSettings::default())
            .map_err(|errors| errors.to_string())?;

    let audit = Arc::new(AuditCount::default());
    let file = match std::env::var_os("VMCP_BENCH_AUDIT_FILE") {
        Some(path) => Some(
            WriterSink::append(std::path::Path::new(&path))
                .map_err(|e| format!("VMCP_BENCH_AUDIT_FILE: {e}"))?,
        ),
        None => None,
    };
    let sink = CountingSink {
        count: audit.clone(),
        file,
    };

    let mut builder = StackBuilder::new().auth(AuthLayer::jwt(Arc::new(validator), None));
    if cedar {
        builder = builder.authorizer(Arc::new(authorizer));
    }
    let stack = builder
        .audit(AuditLayer::new(AuditSettings::default(), Arc::new(sink)))
        .provider(Arc::new(CatalogProvider(vmcp.aggregator().clone())))
        .build(crate::gateway::service(vmcp));
    Ok(Stack {
        router: stack.router(),
        headers: bearer(&token)?,
        outsider_headers: bearer(&outsider)?,
        layers: stack.layers().to_vec(),
        audit,
    })
}

/// Before (c) is measured: its token is accepted and admitted (a call succeeds, the
/// list shows all `tools` tools), a request without a token is refused with 401,
/// and a caller outside the policies is refused with 403.
pub async fn check(
    target: &Target,
    outsider_headers: &HeaderMap,
    tools: usize,
) -> anyhow::Result<()> {
    let revision = Revision::Modern;
    let mut client = Client::connect(target, revision).await?;
    client.once(target, revision, Op::Call).await?;
    let (listed, _) = client.list_all(target, revision).await?;
    anyhow::ensure!(
        listed == tools,
        "(c) lists {listed} tools to the benchmark's caller, expected {tools}"
    );
    for (headers, status) in [(HeaderMap::new(), "401"), (outsider_headers.clone(), "403")] {
        let other = Target {
            extra_headers: headers,
            ..target.clone()
        };
        let mut client = Client::connect(&other, revision).await?;
        match client.once(&other, revision, Op::Call).await {
            Err(e) if e.to_string().starts_with(status) => {}
            Err(e) => anyhow::bail!("(c) should answer {status}, answered {e}"),
            Ok(_) => anyhow::bail!("(c) should answer {status}, answered with a result"),
        }
    }
    Ok(())
}
