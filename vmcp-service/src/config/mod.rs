//! The gateway's configuration: the YAML model, loading, and validation.
//!
//! Keys follow the reference vMCP's own file (camelCase) wherever it has one, so a
//! migrating user keeps the parts this project implements. Keys this project does
//! not implement yet are reported as warnings by [`load_str`], never silently taken.

mod audit;
mod authz;
pub mod composite;
mod composite_check;
mod connections;
mod hints;
mod incoming;
mod integrity;
mod kubernetes;
mod limits;
mod listen;
mod optimizer;
mod outgoing;
mod parked;
mod rate_limit;
pub mod schema;
mod script;
mod sealing;
mod session_storage;
mod sessions;
mod spelling;
mod stack;
mod stdio;
mod telemetry;
mod type_key;
mod validate;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use audit::AuditConfig;
pub use authz::{Authz, AuthzConfig, AuthzType};
pub(crate) use composite_check::step_tools as composite_step_tools;
pub use connections::{
    ConnectionLimits, ConnectionsConfig, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, default_max_connections,
};
pub use hints::ignored_key_warning;
pub use incoming::{AuthType, IncomingAuth, IncomingAuthConfig, IncomingShape, OidcConfig};
pub use integrity::{
    IntegrityAdminConfig, IntegrityConfig, IntegrityMode, NewToolsPolicy, PinStoreKind,
};
pub use kubernetes::{KubernetesConfig, NAMESPACE_ENV};
pub use limits::{MAX_CONFIG_BYTES, MAX_DEPTH, MAX_LISTED_IGNORED};
pub use listen::{ListenLimits, ListenStreamsConfig};
pub use optimizer::{CALL_TOOL, EmbeddingProvider, FIND_TOOL, OptimizerConfig};
pub use outgoing::{
    BackendAuthConfig, CallerConnectionsConfig, HeaderInjectionConfig, OutgoingAuthConfig,
    OutgoingSource, Secret, StrategyShape, StrategyType, SubjectTokenType, TokenExchangeConfig,
    validate_passthrough,
};
pub use parked::{ParkedCallsConfig, ParkedLimits};
pub use rate_limit::{
    AnonymousKey, BackendLimitConfig, BucketConfig, BucketStoreKind, FailMode, RateLimitingConfig,
    SharedAndPerUser, ToolLimitConfig, VerbLimitsConfig,
};
pub use script::{CodeModeConfig, EXECUTE_TOOL_SCRIPT, ScriptLimits};
pub use sealing::{MIN_SEALING_KEY_BYTES, SealingConfig, SealingKeys};
pub use session_storage::{
    DEFAULT_KEY_PREFIX, REDIS_PASSWORD_ENV, RedisAddress, SessionStorageConfig, StorageProvider,
};
pub use sessions::{
    DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_ADDRESS, DEFAULT_MAX_SESSIONS_PER_IDENTITY,
    DEFAULT_SESSION_TTL, OperatorClaim, SessionLimits, SessionsConfig, StatusConfig,
};
pub use stack::{StackError, StackProblem, stack_builder};
pub use stdio::{EnvValue, find_executable};
pub use telemetry::{SamplingRate, TelemetryConfig};
pub use type_key::TypeKey;
pub use validate::{ConfigError, validate};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmcpConfig {
    /// Name of this virtual server; advertised as `serverInfo.name`.
    #[serde(default)]
    pub name: Option<String>,
    /// The group of backends this server fronts; reported on the status surface.
    #[serde(default)]
    pub group_ref: Option<String>,
    /// Inline backends.
    #[serde(default)]
    pub backends: Vec<BackendConfig>,
    /// How backend capabilities are merged.
    #[serde(default)]
    pub aggregation: AggregationConfig,
    /// Operational settings (timeouts).
    #[serde(default)]
    pub operational: OperationalConfig,
    /// How callers authenticate, and what they may do (`authz`).
    #[serde(default)]
    #[schemars(with = "Option<incoming::RawIncomingAuth>")]
    pub incoming_auth: Option<IncomingAuthConfig>,
    /// The audit log.
    #[serde(default)]
    pub audit: Option<AuditConfig>,
    /// OpenTelemetry and Prometheus.
    #[serde(default)]
    pub telemetry: Option<TelemetryConfig>,
    /// How the gateway authenticates to backends.
    #[serde(default)]
    pub outgoing_auth: Option<OutgoingAuthConfig>,
    /// The read-only status page at `/ui`.
    #[serde(default)]
    pub ui: UiConfig,
    /// Headers copied from each caller's request onto every backend request made
    /// for that caller (hop-by-hop, `Host`, `X-Forwarded-*` are refused).
    #[serde(default)]
    pub passthrough_headers: Vec<String>,
    /// Allow `Authorization` in `passthroughHeaders` (off: the caller's token is not
    /// for backends).
    #[serde(default)]
    pub passthrough_authorization: bool,
    /// Multi-step workflows advertised as tools (docs/composite-tools.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub composite_tools: Vec<composite::CompositeToolConfig>,
    /// Authentication of the status routes.
    #[serde(default)]
    pub status: StatusConfig,
    /// Browser origins (`scheme://host[:port]`, as the `Origin` header spells them)
    /// allowed at `/mcp` besides loopback ones; any other `Origin` is refused (403,
    /// DNS rebinding). `vmcp serve --allowed-origin` adds to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// Where state shared between replicas is kept (docs/scaling.md).
    #[serde(default)]
    pub session_storage: SessionStorageConfig,
    /// The key sealing `requestState`s, shared by replicas (docs/scaling.md);
    /// without it a random key per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing: Option<SealingConfig>,
    /// Tool integrity: pins of backend definitions (docs/integrity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<IntegrityConfig>,
    /// Tool search: `tools/list` shows only `find_tool` and `call_tool`
    /// (docs/optimizer.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerConfig>,
    /// Token buckets per caller, tool, verb and backend (docs/rate-limiting.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limiting: Option<RateLimitingConfig>,
    /// `execute_tool_script`: a Starlark script calling the caller's tools
    /// (docs/code-mode.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeConfig>,
    /// Discovered mode's cluster: namespace, kubeconfig, the VirtualMCPServer whose
    /// status is written (docs/kubernetes.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesConfig>,
}

/// `ui:` — the status page (read when the gateway starts; a reload does not change it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UiConfig {
    /// Serve the status page at `/ui` next to `/status` (`vmcp serve --ui` sets it).
    #[serde(default)]
    pub enabled: bool,
}

impl VmcpConfig {
    /// Whether the pipeline layers beyond the defaults are configured (`incomingAuth`,
    /// `audit` or `telemetry`).
    pub fn has_layers(&self) -> bool {
        self.incoming_auth.is_some() || self.audit.is_some() || self.telemetry.is_some()
    }
}

/// One inline backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendConfig {
    /// Unique backend name (the `{workload}` of prefixes and policies).
    #[serde(default)]
    pub name: String,
    /// The backend's MCP endpoint (`http://` or `https://`); empty for `stdio`.
    #[serde(default)]
    pub url: String,
    /// `streamable-http` (default), `sse` or `stdio`.
    #[serde(default)]
    pub transport: Option<Transport>,
    /// Extra CA certificates (PEM, absolute path) trusted for this backend's
    /// `https://` URL, besides the platform and webpki roots.
    #[serde(default)]
    pub ca_bundle_path: Option<std::path::PathBuf>,
    /// `stdio`: the program to spawn (a path, or a name looked up on `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `stdio`: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// `stdio`: its environment (the gateway's own is not inherited; see `stdio`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// `stdio`: its working directory (default: the gateway's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// Free-form labels (kept for compatibility with the reference's files).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// The transport used to reach a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Transport {
    /// Streamable HTTP (both MCP revisions).
    #[serde(rename = "streamable-http")]
    StreamableHttp,
    /// The legacy HTTP+SSE two-endpoint transport (always MCP 2025-11-25).
    #[serde(rename = "sse")]
    Sse,
    /// A local child process spoken to over stdin/stdout (always MCP 2025-11-25).
    #[serde(rename = "stdio")]
    Stdio,
}

impl Transport {
    /// The config spelling of this transport.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
            Transport::Stdio => "stdio",
        }
    }
}

impl BackendConfig {
    /// The configured transport (defaults to streamable HTTP).
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or(Transport::StreamableHttp)
    }
}

/// `aggregation:` — conflict resolution, filtering and overrides.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregationConfig {
    /// `prefix` (default), `priority` or `manual`.
    #[serde(default)]
    pub conflict_resolution: Option<Strategy>,
    /// Settings of the chosen strategy.
    #[serde(default)]
    pub conflict_resolution_config: ConflictResolutionConfig,
    /// Per-backend tool settings.
    #[serde(default)]
    pub tools: Vec<WorkloadToolsConfig>,
    /// Hide every backend tool from `tools/list` (they stay routable internally).
    #[serde(default)]
    pub exclude_all_tools: bool,
    /// `allow` (default) or `deny`: whether backends without a `tools` entry advertise tools.
    #[serde(default)]
    pub default_tool_visibility: Option<String>,
    /// Items per page of gateway-paginated list results (1–1000, default 1000).
    #[serde(default)]
    pub page_size: Option<usize>,
}

/// `aggregation.conflictResolutionConfig`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictResolutionConfig {
    /// Prefix template; `{workload}` is replaced by the backend name. Default `{workload}_`.
    #[serde(default)]
    pub prefix_format: Option<String>,
    /// Backends in descending priority, for the `priority` strategy.
    #[serde(default)]
    pub priority_order: Vec<String>,
}

/// One entry of `aggregation.tools`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadToolsConfig {
    /// The backend this entry configures.
    #[serde(default)]
    pub workload: String,
    /// Allow-list of tools to advertise (original or overridden names).
    #[serde(default)]
    pub filter: Option<Vec<String>>,
    /// Hide every tool of this backend.
    #[serde(default)]
    pub exclude_all: bool,
    /// Per-tool overrides, keyed by the backend's own tool name.
    #[serde(default)]
    pub overrides: BTreeMap<String, ToolOverride>,
}

/// A per-tool override, applied before conflict resolution.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolOverride {
    /// New advertised name.
    #[serde(default)]
    pub name: Option<String>,
    /// New description.
    #[serde(default)]
    pub description: Option<String>,
    /// Annotation fields to set (`title`, `readOnlyHint`, `destructiveHint`,
    /// `idempotentHint`, `openWorldHint`), merged over the backend's.
    #[serde(default)]
    pub annotations: Option<serde_json::Map<String, Value>>,
}

/// `operational:` — timeouts and failure handling.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationalConfig {
    /// Timeouts for backend operations.
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
    /// Health checks and the circuit breaker.
    #[serde(default)]
    pub failure_handling: FailureHandlingConfig,
    /// Legacy session idle TTL, absolute lifetime and cap.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// Legacy backend calls waiting for a 2026-07-28 caller's input: TTL and cap.
    #[serde(default)]
    pub parked_calls: ParkedCallsConfig,
    /// Modern `subscriptions/listen` streams: total and per-caller caps.
    #[serde(default)]
    pub listen_streams: ListenStreamsConfig,
    /// Client connections: cap, header-read and idle timeouts.
    #[serde(default)]
    pub connections: ConnectionsConfig,
}

/// `operational.failureHandling`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureHandlingConfig {
    /// Time between health checks of each backend. Default 30s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub health_check_interval: Option<Duration>,
    /// Consecutive failures (checks or calls) that make a backend unhealthy. Default 3.
    #[serde(default)]
    pub unhealthy_threshold: Option<u32>,
    /// Bound on one health check. Default 10s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub health_check_timeout: Option<Duration>,
    /// Latency above which a successful answer counts as degraded. Default 5s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub degraded_threshold: Option<Duration>,
    /// How often the status is reported to the status reporters. Default 30s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub status_reporting_interval: Option<Duration>,
    /// The circuit breaker (off unless `enabled`).
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerConfig>,
}

/// `operational.failureHandling.circuitBreaker`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreakerConfig {
    /// Turn the breaker on.
    #[serde(default)]
    pub enabled: bool,
    /// Consecutive failures that open the circuit. Default 5.
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// How long the circuit stays open before one probe is let through. Default 60s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
}

/// `operational.timeouts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutsConfig {
    /// Bound on one backend call (`tools/call`, `resources/read`, …). Default 30s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub default: Option<Duration>,
    /// Per-backend call bounds overriding `default`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub per_workload: BTreeMap<String, humantime_serde::Serde<Duration>>,
    /// Bound on one backend's share of an aggregation fan-out (connect + list). Default 10s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub discovery: Option<Duration>,
}

/// The conflict-resolution strategy (`aggregation.conflictResolution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Every tool and prompt gets the backend prefix.
    Prefix,
    /// Listed backends keep bare names and win collisions.
    Priority,
    /// Collisions must be resolved by overrides.
    Manual,
}

/// Default per-call timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default per-backend discovery timeout.
pub const DEFAULT_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest (and default) page of a gateway-paginated list.
pub const MAX_PAGE_SIZE: usize = 1000;
/// The default prefix format.
pub const DEFAULT_PREFIX_FORMAT: &str = "{workload}_";

impl VmcpConfig {
    /// The conflict-resolution strategy (defaults to `prefix`).
    pub fn strategy(&self) -> Strategy {
        self.aggregation
            .conflict_resolution
            .unwrap_or(Strategy::Prefix)
    }

    /// The prefix format, defaulted.
    pub fn prefix_format(&self) -> &str {
        self.aggregation
            .conflict_resolution_config
            .prefix_format
            .as_deref()
            .unwrap_or(DEFAULT_PREFIX_FORMAT)
    }

    /// Whether backends without a `tools` entry advertise no tools.
    pub fn default_deny(&self) -> bool {
        self.aggregation.default_tool_visibility.as_deref() == Some("deny")
    }

    /// The tools entry for a backend, if any.
    pub fn tools_for(&self, backend: &str) -> Option<&WorkloadToolsConfig> {
        self.aggregation
            .tools
            .iter()
            .find(|t| t.workload == backend)
    }

    /// Whether `/status`, `/ui` and `/ui/events` require the `/mcp` bearer token:
    /// `status.requireAuth`, by default on exactly when `incomingAuth` is `oidc`.
    pub fn status_requires_auth(&self) -> bool {
        let oidc = self.incoming_auth.as_ref().is_some_and(|a| a.is_oidc());
        self.status.require_auth.unwrap_or(oidc)
    }

    /// Who may read `/metrics`: as the status routes (`status.requireAuth`), and
    /// only operators when `status.operators` names them.
    pub fn metrics_access(&self) -> vmcp_layers::telemetry::MetricsAccess {
        use vmcp_layers::telemetry::MetricsAccess;
        match &self.status.operators {
            _ if !self.status_requires_auth() => MetricsAccess::Open,
            Some(operators) => MetricsAccess::Claim(operators.required()),
            None => MetricsAccess::Authenticated,
        }
    }

    /// The page size of gateway-paginated lists.
    pub fn page_size(&self) -> usize {
        self.aggregation.page_size.unwrap_or(MAX_PAGE_SIZE)
    }

    /// The call timeout for a backend.
    pub fn call_timeout(&self, backend: &str) -> Duration {
        let timeouts = &self.operational.timeouts;
        timeouts
            .per_workload
            .get(backend)
            .map(|d| **d)
            .or(timeouts.default)
            .unwrap_or(DEFAULT_CALL_TIMEOUT)
    }

    /// The per-backend discovery timeout.
    pub fn discovery_timeout(&self) -> Duration {
        self.operational
            .timeouts
            .discovery
            .unwrap_or(DEFAULT_DISCOVERY_TIMEOUT)
    }
}

/// A loaded configuration and the keys it contained that this project does not use.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated configuration.
    pub config: VmcpConfig,
    /// Dotted paths of keys that were ignored (not implemented or misspelled), at
    /// most [`MAX_LISTED_IGNORED`].
    pub ignored_keys: Vec<String>,
    /// How many more ignored keys there were beyond those listed.
    pub ignored_unlisted: usize,
}

/// Parse and validate a YAML configuration.
///
/// Type errors name the field (`backends[0].metadata: invalid type …`); semantic errors
/// are collected by [`validate`] and all reported at once.
pub fn load_str(yaml: &str) -> Result<Loaded, ConfigError> {
    // Limits first: the syntax check below parses too.
    limits::check(yaml)?;
    if let Some(error) = hints::syntax_error(yaml) {
        return Err(ConfigError::Parse(error));
    }
    if let Some(errors) = spelling::misspelled_with_the_rest(yaml) {
        return Err(ConfigError::Invalid(errors));
    }
    let mut ignored_keys = Vec::new();
    let mut ignored_unlisted = 0;
    let deserializer = serde_yaml_ng::Deserializer::from_str(yaml);
    // Optional sections show up as `?` segments (`incomingAuth.?.oidc`); drop them.
    let mut record = |path: serde_ignored::Path<'_>| {
        if ignored_keys.len() < MAX_LISTED_IGNORED {
            ignored_keys.push(path.to_string().replace(".?", ""));
        } else {
            ignored_unlisted += 1;
        }
    };
    let tracked = serde_ignored::Deserializer::new(deserializer, &mut record);
    let config: VmcpConfig = match serde_path_to_error::deserialize(tracked) {
        Ok(config) => config,
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner().to_string();
            // serde_yaml_ng already names the path in some messages.
            let message = if path == "." || path.is_empty() || inner.starts_with(&path) {
                inner
            } else {
                format!("{path}: {inner}")
            };
            // A shape error is relative to its value (`.headerInjection is required …`):
            // joined to the value's path as one field.
            let relative = message
                .strip_prefix(path.as_str())
                .and_then(|rest| rest.strip_prefix(": ."));
            return Err(ConfigError::Parse(match relative {
                Some(rest) => format!("{path}.{rest}"),
                None => message,
            }));
        }
    };
    match validate(&config) {
        Err(ConfigError::Invalid(mut errors)) => {
            hints::annotate_required(&mut errors, &hints::misspellings(&ignored_keys));
            return Err(ConfigError::Invalid(errors));
        }
        other => other?,
    }
    Ok(Loaded {
        config,
        ignored_keys,
        ignored_unlisted,
    })
}

/// Read, parse and validate a configuration file: a regular file of at most
/// [`MAX_CONFIG_BYTES`], nested at most [`MAX_DEPTH`] deep. This blocks; from async
/// code call it through `tokio::task::spawn_blocking`.
pub fn load_file(path: &std::path::Path) -> Result<Loaded, ConfigError> {
    load_str(&limits::read(path)?)
}

/// Push "`{section}.{field} must be greater than 0`" for each count set to 0 (the
/// shared check of the `operational.*` caps).
pub(crate) fn require_positive(
    section: &str,
    counts: &[(&str, Option<usize>)],
    errors: &mut Vec<String>,
) {
    for (field, value) in counts {
        if *value == Some(0) {
            errors.push(format!("{section}.{field} must be greater than 0"));
        }
    }
}
