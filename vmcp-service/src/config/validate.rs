//! Semantic validation: every problem is collected and reported at once, each naming
//! its field the way it is spelled in the file.

use std::collections::{BTreeMap, BTreeSet};

use super::{MAX_PAGE_SIZE, Strategy, Transport, VmcpConfig};
use crate::names::is_valid_name;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The YAML did not parse into the configuration model.
    #[error("invalid configuration: {0}")]
    Parse(String),
    /// The configuration parsed but is inconsistent; one message per problem.
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

const ANNOTATION_KEYS: [&str; 5] = [
    "title",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// Check an optional `caBundlePath`-style key at load time; the message starts with
/// `field` (e.g. `backends[2].caBundlePath`).
pub(crate) fn validate_ca_path(
    field: &str,
    path: Option<&std::path::Path>,
    errors: &mut Vec<String>,
) {
    if let Some(path) = path
        && let Err(e) = vmcp_layers::tls::CaBundle::load(path)
    {
        errors.push(format!("{field}: {e}"));
    }
}

/// Check a parsed configuration; returns every problem found.
pub fn validate(config: &VmcpConfig) -> Result<(), ConfigError> {
    let mut errors = Vec::new();
    let mut names = BTreeSet::new();
    for (i, backend) in config.backends.iter().enumerate() {
        let field = format!("backends[{i}]");
        if backend.name.is_empty() {
            errors.push(format!("{field}.name is required"));
        } else if !is_valid_backend_name(&backend.name) {
            errors.push(format!(
                "{field}.name {:?} may contain only letters, digits, '-', '_' and '.' (at most 63 characters)",
                backend.name
            ));
        } else if !names.insert(backend.name.as_str()) {
            errors.push(format!(
                "{field}.name {:?} is used by another backend",
                backend.name
            ));
        }
        let stdio = backend.transport() == Transport::Stdio;
        if stdio {
            super::stdio::check(&field, backend, &mut errors);
        } else if backend.url.is_empty() {
            errors.push(format!("{field}.url is required"));
        } else if !(backend.url.starts_with("http://") || backend.url.starts_with("https://")) {
            errors.push(format!("{field}.url must start with http:// or https://"));
        } else if reqwest::Url::parse(&backend.url).is_err() {
            errors.push(format!("{field}.url {:?} is not a valid URL", backend.url));
        }
        if !stdio {
            super::stdio::check(&field, backend, &mut errors);
        }
        validate_ca_path(
            &format!("{field}.caBundlePath"),
            backend.ca_bundle_path.as_deref(),
            &mut errors,
        );
    }

    let aggregation = &config.aggregation;
    let strategy = aggregation.conflict_resolution;
    if let Some(format) = &aggregation.conflict_resolution_config.prefix_format
        && format.is_empty()
    {
        errors.push("aggregation.conflictResolutionConfig.prefixFormat must not be empty".into());
    }
    let order = &aggregation.conflict_resolution_config.priority_order;
    if strategy == Some(Strategy::Priority) && order.is_empty() {
        errors.push(
            "aggregation.conflictResolutionConfig.priorityOrder is required when conflictResolution is \"priority\""
                .into(),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, name) in order.iter().enumerate() {
        if !names.contains(name.as_str()) {
            errors.push(format!(
                "aggregation.conflictResolutionConfig.priorityOrder[{i}] {name:?} is not a configured backend"
            ));
        }
        if !seen.insert(name) {
            errors.push(format!(
                "aggregation.conflictResolutionConfig.priorityOrder[{i}] {name:?} is listed twice"
            ));
        }
    }
    if strategy == Some(Strategy::Manual) && aggregation.tools.is_empty() {
        errors.push(
            "aggregation.tools is required when conflictResolution is \"manual\" (collisions are resolved by overrides)"
                .into(),
        );
    }
    if let Some(v) = &aggregation.default_tool_visibility
        && v != "allow"
        && v != "deny"
    {
        errors.push(format!(
            "aggregation.defaultToolVisibility must be \"allow\" or \"deny\" (got {v:?})"
        ));
    }
    if let Some(size) = aggregation.page_size
        && !(1..=MAX_PAGE_SIZE).contains(&size)
    {
        errors.push(format!(
            "aggregation.pageSize must be between 1 and {MAX_PAGE_SIZE} (got {size})"
        ));
    }

    let mut workloads = BTreeSet::new();
    // Overridden names per backend, to catch two overrides claiming one name.
    let mut override_names: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (i, entry) in aggregation.tools.iter().enumerate() {
        let field = format!("aggregation.tools[{i}]");
        if entry.workload.is_empty() {
            errors.push(format!("{field}.workload is required"));
        } else if !names.contains(entry.workload.as_str()) {
            errors.push(format!(
                "{field}.workload {:?} is not a configured backend",
                entry.workload
            ));
        } else if !workloads.insert(entry.workload.as_str()) {
            errors.push(format!(
                "{field}.workload {:?} has more than one entry",
                entry.workload
            ));
        }
        for (tool, o) in &entry.overrides {
            let field = format!("{field}.overrides.{tool}");
            if let Some(name) = &o.name {
                if !is_valid_name(name) {
                    errors.push(format!(
                        "{field}.name {name:?} must match ^[a-zA-Z0-9_-]{{1,64}}$"
                    ));
                }
                override_names
                    .entry(name.as_str())
                    .or_default()
                    .push(format!("{}.{tool}", entry.workload));
            }
            if let Some(annotations) = &o.annotations {
                for (key, value) in annotations {
                    if !ANNOTATION_KEYS.contains(&key.as_str()) {
                        errors.push(format!(
                            "{field}.annotations.{key} is not a tool annotation (expected one of {})",
                            ANNOTATION_KEYS.join(", ")
                        ));
                    } else if key == "title" && !value.is_string() {
                        errors.push(format!("{field}.annotations.title must be a string"));
                    } else if key != "title" && !value.is_boolean() {
                        errors.push(format!("{field}.annotations.{key} must be true or false"));
                    }
                }
            }
        }
    }
    if strategy == Some(Strategy::Manual) {
        for (name, claimants) in &override_names {
            if claimants.len() > 1 {
                errors.push(format!(
                    "aggregation.tools: collision after override: {} are all renamed to {name:?}",
                    claimants.join(", ")
                ));
            }
        }
    }
    // Under deny, a priority winner without a tools entry would win a name and then be
    // withheld, silently hiding the loser too.
    if strategy == Some(Strategy::Priority) && config.default_deny() {
        for (i, name) in order.iter().enumerate() {
            if names.contains(name.as_str()) && !workloads.contains(name.as_str()) {
                errors.push(format!(
                    "aggregation.conflictResolutionConfig.priorityOrder[{i}] {name:?} has no aggregation.tools entry, so with defaultToolVisibility \"deny\" it would win collisions and then advertise nothing"
                ));
            }
        }
    }
    for (key, value) in &config.operational.timeouts.per_workload {
        if !names.contains(key.as_str()) {
            errors.push(format!(
                "operational.timeouts.perWorkload.{key} is not a configured backend"
            ));
        }
        if value.is_zero() {
            errors.push(format!(
                "operational.timeouts.perWorkload.{key} must be greater than 0"
            ));
        }
    }
    for (field, value) in [
        ("default", config.operational.timeouts.default),
        ("discovery", config.operational.timeouts.discovery),
    ] {
        if value.is_some_and(|d| d.is_zero()) {
            errors.push(format!(
                "operational.timeouts.{field} must be greater than 0"
            ));
        }
    }
    config.operational.sessions.validate(&mut errors);
    config.operational.parked_calls.validate(&mut errors);
    config.operational.listen_streams.validate(&mut errors);
    config.operational.connections.validate(&mut errors);
    config.session_storage.validate(&mut errors);
    if let Some(sealing) = &config.sealing {
        sealing.validate(&mut errors);
    }
    if let Some(optimizer) = &config.optimizer {
        optimizer.validate(&mut errors);
    }
    if let Some(code_mode) = &config.code_mode {
        code_mode.validate(&mut errors);
        if code_mode.enabled {
            for (i, composite) in config.composite_tools.iter().enumerate() {
                if composite.name == super::EXECUTE_TOOL_SCRIPT {
                    errors.push(format!(
                        "compositeTools[{i}].name: {:?} is code mode's own tool",
                        composite.name
                    ));
                }
            }
        }
    }
    if let Some(limits) = &config.rate_limiting {
        let backends: Vec<&str> = config.backends.iter().map(|b| b.name.as_str()).collect();
        limits.validate(&backends, &mut errors);
        if limits.store == Some(super::BucketStoreKind::Redis)
            && config.session_storage.provider != super::StorageProvider::Redis
        {
            errors.push(
                "rateLimiting.store: redis needs sessionStorage.provider: redis (its connection)"
                    .into(),
            );
        }
    }
    let oidc = config.incoming_auth.as_ref().is_some_and(|a| a.is_oidc());
    if config.status.require_auth == Some(true) && !oidc {
        errors.push(
            "status.requireAuth needs incomingAuth.type \"oidc\" (no token to check otherwise)"
                .into(),
        );
    }
    if let Some(operators) = &config.status.operators {
        if !config.status_requires_auth() {
            errors.push(
                "status.operators needs the status routes to want the token (incomingAuth.type \"oidc\", status.requireAuth not false)"
                    .into(),
            );
        }
        if operators.claim.is_empty() {
            errors.push("status.operators.claim must name a claim".into());
        }
        if operators.values.is_empty() || operators.values.iter().any(String::is_empty) {
            errors.push("status.operators.values must list non-empty values".into());
        }
    }
    if let Some(auth) = &config.incoming_auth {
        auth.validate(&mut errors);
    }
    if let Some(integrity) = &config.integrity {
        integrity.validate(&config.session_storage, &mut errors);
    }
    if let Some(audit) = &config.audit {
        audit.validate(&mut errors);
    }
    if let Some(outgoing) = &config.outgoing_auth
        && outgoing.source == Some(super::OutgoingSource::Discovered)
    {
        if config.group_ref.as_deref().is_none_or(str::is_empty) {
            errors.push(
                "groupRef is required when outgoingAuth.source is \"discovered\" (the MCPGroup whose backends are served)".into(),
            );
        }
        if let Some(kubernetes) = &config.kubernetes {
            kubernetes.validate(&mut errors);
        }
    }
    if let Some(outgoing) = &config.outgoing_auth {
        let backends: Vec<&str> = config.backends.iter().map(|b| b.name.as_str()).collect();
        outgoing.validate(&backends, &mut errors);
        outgoing.validate_passthrough(&config.passthrough_headers, &mut errors);
    }
    if let Some(telemetry) = &config.telemetry {
        telemetry.validate(&mut errors);
    }
    for (i, origin) in config.allowed_origins.iter().enumerate() {
        if let Err(expected) = check_origin(origin) {
            errors.push(format!(
                "allowedOrigins[{i}] {origin:?} is not an origin as browsers send it ({expected})"
            ));
        }
    }
    super::validate_passthrough(
        &config.passthrough_headers,
        config.passthrough_authorization,
        &mut errors,
    );

    let fh = &config.operational.failure_handling;
    for (field, value) in [
        ("healthCheckInterval", fh.health_check_interval),
        ("healthCheckTimeout", fh.health_check_timeout),
        ("degradedThreshold", fh.degraded_threshold),
        ("statusReportingInterval", fh.status_reporting_interval),
    ] {
        if value.is_some_and(|d| d.is_zero()) {
            errors.push(format!(
                "operational.failureHandling.{field} must be greater than 0"
            ));
        }
    }
    if fh.unhealthy_threshold == Some(0) {
        errors.push("operational.failureHandling.unhealthyThreshold must be at least 1".into());
    }
    if let Some(cb) = &fh.circuit_breaker {
        if cb.failure_threshold == Some(0) {
            errors.push(
                "operational.failureHandling.circuitBreaker.failureThreshold must be at least 1"
                    .into(),
            );
        }
        if cb
            .timeout
            .is_some_and(|d| d < std::time::Duration::from_secs(1))
        {
            errors.push(
                "operational.failureHandling.circuitBreaker.timeout must be at least 1s".into(),
            );
        }
    }
    super::composite_check::check(config, &mut errors);

    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(errors))
    }
}

/// An `allowedOrigins` entry is compared with the `Origin` header as written, so it
/// must be spelled as browsers serialize one: `http(s)://host[:port]`, lower-case,
/// no default port, no path. The error says what was expected.
fn check_origin(origin: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(origin).map_err(|_| "scheme://host[:port]".to_owned())?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("http:// or https:// and a host".into());
    }
    let serialized = url.origin().ascii_serialization();
    if serialized != origin {
        return Err(format!("expected {serialized:?}"));
    }
    Ok(())
}

fn is_valid_backend_name(name: &str) -> bool {
    name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::super::load_str;
    use super::ConfigError;

    fn errors(yaml: &str) -> Vec<String> {
        match load_str(yaml) {
            Err(ConfigError::Invalid(errors)) => errors,
            other => panic!("expected validation errors, got {other:?}"),
        }
    }

    #[test]
    fn names_the_offending_backend_fields() {
        let errs = errors(
            "backends:\n  - {name: a, url: ftp://x, transport: websocket}\n  - {name: a, url: http://127.0.0.1:1/mcp}\n  - {url: http://x}\n",
        );
        assert!(errs.contains(&"backends[0].url must start with http:// or https://".into()));
        assert!(errs.contains(
            &"backends[0].transport must be \"sse\", \"streamable-http\" or \"stdio\" (got \"websocket\")"
                .into()
        ));
        assert!(errs.contains(&"backends[1].name \"a\" is used by another backend".into()));
        assert!(errs.contains(&"backends[2].name is required".into()));
    }

    #[test]
    fn allowed_origins_are_spelled_as_browsers_send_them() {
        let errs = errors(
            "allowedOrigins: ['https://app.example', 'http://127.0.0.1:8080', 'https://App.example/', 'https://app.example:443', 'app.example', 'ftp://x']\n",
        );
        assert_eq!(
            errs,
            vec![
                r#"allowedOrigins[2] "https://App.example/" is not an origin as browsers send it (expected "https://app.example")"#,
                r#"allowedOrigins[3] "https://app.example:443" is not an origin as browsers send it (expected "https://app.example")"#,
                r#"allowedOrigins[4] "app.example" is not an origin as browsers send it (scheme://host[:port])"#,
                r#"allowedOrigins[5] "ftp://x" is not an origin as browsers send it (http:// or https:// and a host)"#,
            ]
        );
    }

    #[test]
    fn checks_strategy_settings() {
        let errs = errors(
            "backends: [{name: a, url: 'http://h/mcp'}]\naggregation:\n  conflictResolution: priority\n",
        );
        assert_eq!(
            errs,
            vec![
                "aggregation.conflictResolutionConfig.priorityOrder is required when conflictResolution is \"priority\""
            ]
        );
        let errs = errors(
            "backends: [{name: a, url: 'http://h/mcp'}]\naggregation:\n  conflictResolution: mnaual\n",
        );
        assert!(errs[0].starts_with("aggregation.conflictResolution must be"));
        let errs = errors(
            "backends: [{name: a, url: 'http://h/mcp'}, {name: b, url: 'http://h/mcp'}]\naggregation:\n  conflictResolution: manual\n  tools:\n    - workload: a\n      overrides: {x: {name: same}}\n    - workload: b\n      overrides: {y: {name: same}}\n",
        );
        assert_eq!(
            errs,
            vec![
                "aggregation.tools: collision after override: a.x, b.y are all renamed to \"same\""
            ]
        );
    }

    #[test]
    fn type_errors_name_the_path() {
        let err =
            load_str("backends:\n  - name: a\n    url: http://h\n    metadata: 3\n").unwrap_err();
        let text = err.to_string();
        assert_eq!(text.matches("backends[0].metadata").count(), 1, "{text}");
    }

    #[test]
    fn unknown_keys_are_reported_not_fatal() {
        let loaded = load_str(
            "name: x\nincomingAuth: {type: anonymous, oidc: null}\nbackends: [{name: a, url: 'http://h/mcp', type: entry}]\noperational: {logLevel: debug}\n",
        )
        .unwrap();
        assert_eq!(
            loaded.ignored_keys,
            vec![
                "backends.0.type".to_string(),
                "operational.logLevel".to_string()
            ]
        );
    }

    #[test]
    fn layer_sections_name_their_fields() {
        let errs = errors(
            "backends: [{name: a, url: 'http://h/mcp'}]\nincomingAuth:\n  type: oidc\n  oidc: {issuer: 'http://idp.example.com'}\n  authz:\n    type: cedar\n    policies: ['permit(principal, action, resource);', 'permit(principal,']\naudit: {eventTypes: [mcp_tool_cal]}\ntelemetry: {samplingRate: '2'}\n",
        );
        assert_eq!(errs.len(), 5, "{errs:?}");
        assert_eq!(
            errs[0],
            "incomingAuth.oidc.issuer must use https:// (or set insecureAllowHttp)"
        );
        assert_eq!(errs[1], "incomingAuth.oidc.audience is required");
        assert!(
            errs[2].starts_with("incomingAuth.authz.policies[1]: invalid Cedar policy"),
            "{}",
            errs[2]
        );
        assert!(errs[3].starts_with("audit.eventTypes[0] \"mcp_tool_cal\" is not an event type"));
        assert_eq!(
            errs[4],
            "telemetry.samplingRate must be a number between 0 and 1"
        );
    }

    #[test]
    fn reference_layer_keys_parse() {
        let loaded = load_str(
            r#"
name: eng
backends: [{name: a, url: 'http://h/mcp'}]
incomingAuth:
  type: oidc
  oidc: {issuer: 'https://idp.example.com/realms/eng', audience: vmcp, clientId: vmcp, jwksUrl: 'https://idp.example.com/jwks'}
  authz:
    type: cedar
    groupClaimName: groups
    policies: ['permit(principal in THVGroup::"eng", action == Action::"call_tool", resource in MCP::"eng");']
telemetry: {endpoint: 'otel:4318', serviceName: eng, tracingEnabled: true, samplingRate: "0.1", enablePrometheusMetricsPath: true}
audit: {component: vmcp-server, eventTypes: [mcp_tool_call], includeRequestData: true, maxDataSize: 1000}
"#,
        )
        .unwrap();
        assert_eq!(
            loaded.ignored_keys,
            vec!["incomingAuth.oidc.clientId".to_string()]
        );
        let config = loaded.config;
        assert_eq!(
            config.incoming_auth.unwrap().oidc().unwrap().audience,
            "vmcp"
        );
        assert_eq!(config.audit.unwrap().max_data_size, Some(1000));
        assert!(config.telemetry.unwrap().tracing_enabled);
    }

    #[test]
    fn durations_parse_with_humantime() {
        let loaded = load_str(
            "backends: [{name: a, url: 'http://h/mcp'}]\noperational:\n  timeouts: {default: 45s, discovery: 2s, perWorkload: {a: 1m}}\n",
        )
        .unwrap();
        assert_eq!(loaded.config.call_timeout("a").as_secs(), 60);
        assert_eq!(loaded.config.call_timeout("b").as_secs(), 45);
        assert_eq!(loaded.config.discovery_timeout().as_secs(), 2);
    }

    #[test]
    fn stdio_backends_need_an_existing_command_and_no_url() {
        let errs = errors(
            "backends:\n  - {name: a, transport: stdio, command: no-such-program-vmcp, url: http://x}\n  - {name: b, transport: stdio}\n  - {name: c, transport: stdio, command: ./missing, env: {T: {fromEnv: VMCP_TEST_SURELY_UNSET}}}\n  - {name: d, url: http://127.0.0.1:1/mcp, command: sh, args: [x]}\n",
        );
        for expected in [
            "backends[0].command \"no-such-program-vmcp\" was not found on PATH",
            "backends[0].url is not used with transport: stdio",
            "backends[1].command is required with transport: stdio",
            "backends[2].command \"./missing\" is not an executable file",
            "backends[2].env.T.fromEnv: the gateway's environment has no VMCP_TEST_SURELY_UNSET",
            "backends[3].command is only used with transport: stdio",
            "backends[3].args is only used with transport: stdio",
        ] {
            assert!(errs.contains(&expected.to_owned()), "{expected}: {errs:?}");
        }
        let ok = load_str(
            "backends:\n  - {name: a, transport: stdio, command: sh, args: [-c, 'exit 0'], env: {A: literal, P: {fromEnv: PATH}}}\n",
        )
        .expect("valid stdio backend");
        let backend = &ok.config.backends[0];
        assert_eq!(
            backend.env["A"],
            super::super::EnvValue::Literal("literal".into())
        );
        // Values never show in debug output (logs of the config).
        assert!(!format!("{backend:?}").contains("literal"));
    }
}
