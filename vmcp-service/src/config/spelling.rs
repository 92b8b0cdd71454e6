//! Enum-valued settings spelled wrong (`backends[].transport`,
//! `aggregation.conflictResolution`, `outgoingAuth.source`, `subjectTokenType`), and
//! `outgoingAuth` strategies whose `type` and sections do not fit together.
//!
//! The model holds these as enums, so a typed parse would stop at the first bad
//! value. They are checked on the untyped document first, and the rest of the file
//! is then parsed and validated without them, so one run reports every problem, each
//! naming its field.

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::incoming::RawIncomingAuth;
use super::outgoing::{OutgoingSource, RawStrategy, SubjectTokenType};
use super::{BackendAuthConfig, IncomingAuthConfig, Strategy, Transport, VmcpConfig, validate};
use crate::config::ConfigError;

/// `None` if every enum-valued setting is spelled right (or the document does not
/// parse at all, which the typed parse reports). Otherwise the messages for the
/// misspelled settings, followed by every other validation problem of the file.
pub(super) fn misspelled_with_the_rest(yaml: &str) -> Option<Vec<String>> {
    let mut doc: Value = serde_yaml_ng::from_str(yaml).ok()?;
    let mut errors = Vec::new();
    if let Some(backends) = doc.get_mut("backends").and_then(Value::as_sequence_mut) {
        for (i, backend) in backends.iter_mut().enumerate() {
            take_if_invalid::<Transport>(
                backend,
                "transport",
                &format!("backends[{i}].transport"),
                r#"must be "sse", "streamable-http" or "stdio""#,
                &mut errors,
            );
        }
    }
    if let Some(aggregation) = doc.get_mut("aggregation") {
        take_if_invalid::<Strategy>(
            aggregation,
            "conflictResolution",
            "aggregation.conflictResolution",
            r#"must be "prefix", "priority" or "manual""#,
            &mut errors,
        );
    }
    if let Some(incoming) = doc.get_mut("incomingAuth") {
        incoming_fits(incoming, &mut errors);
    }
    if let Some(outgoing) = doc.get_mut("outgoingAuth") {
        outgoing_strategies(outgoing, &mut errors);
    }
    if errors.is_empty() {
        return None;
    }
    // Another type error stops here, as it would in the typed parse.
    if let Ok(config) = serde_yaml_ng::from_value::<VmcpConfig>(doc)
        && let Err(ConfigError::Invalid(more)) = validate(&config)
    {
        errors.extend(more);
    }
    Some(errors)
}

/// `incomingAuth` whose `type` does not fit its `oidc` section: recorded, and made
/// anonymous so that the rest of it (`authz`) is still checked.
fn incoming_fits(incoming: &mut Value, errors: &mut Vec<String>) {
    let Ok(raw) = serde_yaml_ng::from_value::<RawIncomingAuth>(incoming.clone()) else {
        return;
    };
    if let Err(shape) = IncomingAuthConfig::try_from(raw)
        && let Some(map) = incoming.as_mapping_mut()
    {
        errors.push(format!("incomingAuth{shape}"));
        map.remove("oidc");
        map.insert("type".into(), "anonymous".into());
    }
}

/// `outgoingAuth`: its `source`, and each strategy (`default`, `backends.<name>`)
/// whose `type` does not fit its sections, which is then left out.
fn outgoing_strategies(outgoing: &mut Value, errors: &mut Vec<String>) {
    take_if_invalid::<OutgoingSource>(
        outgoing,
        "source",
        "outgoingAuth.source",
        r#"must be "inline""#,
        errors,
    );
    if let Some(default) = outgoing.get_mut("default")
        && !strategy_fits(default, "outgoingAuth.default", errors)
        && let Some(map) = outgoing.as_mapping_mut()
    {
        map.remove("default");
    }
    let Some(backends) = outgoing.get_mut("backends").and_then(Value::as_mapping_mut) else {
        return;
    };
    let mut misfits = Vec::new();
    for (name, strategy) in backends.iter_mut() {
        let Some(name) = name.as_str() else { continue };
        if !strategy_fits(strategy, &format!("outgoingAuth.backends.{name}"), errors) {
            misfits.push(name.to_owned());
        }
    }
    for name in misfits {
        backends.remove(name.as_str());
    }
}

/// Whether one strategy's `type` fits its sections (a misspelled
/// `subjectTokenType` is recorded and dropped first). A strategy that does not
/// parse at all is left to the typed parse, which names the field.
fn strategy_fits(strategy: &mut Value, field: &str, errors: &mut Vec<String>) -> bool {
    if let Some(exchange) = strategy.get_mut("tokenExchange") {
        take_if_invalid::<SubjectTokenType>(
            exchange,
            "subjectTokenType",
            &format!("{field}.tokenExchange.subjectTokenType"),
            r#"must be "access_token", "id_token" or "jwt""#,
            errors,
        );
    }
    let Ok(raw) = serde_yaml_ng::from_value::<RawStrategy>(strategy.clone()) else {
        return true;
    };
    match BackendAuthConfig::try_from(raw) {
        Ok(_) => true,
        Err(shape) => {
            errors.push(format!("{field}{shape}"));
            false
        }
    }
}

/// Remove `key` from `section` when its value is not a `T`, recording why.
fn take_if_invalid<T: DeserializeOwned>(
    section: &mut Value,
    key: &str,
    field: &str,
    expected: &str,
    errors: &mut Vec<String>,
) {
    let Some(map) = section.as_mapping_mut() else {
        return;
    };
    let Some(value) = map.get(key) else {
        return;
    };
    if value.is_null() || serde_yaml_ng::from_value::<T>(value.clone()).is_ok() {
        return;
    }
    let got = match value {
        Value::String(s) => format!("{s:?}"),
        other => serde_yaml_ng::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
    };
    errors.push(format!("{field} {expected} (got {got})"));
    map.remove(key);
}

#[cfg(test)]
mod tests {
    use super::super::load_str;
    use super::*;

    #[test]
    fn enum_settings_parse_from_their_yaml_spelling() {
        let loaded = load_str(
            "backends: [{name: a, url: 'http://h/mcp', transport: sse}, {name: b, url: 'http://h/mcp', transport: streamable-http}]\naggregation: {conflictResolution: priority, conflictResolutionConfig: {priorityOrder: [a]}}\n",
        )
        .unwrap();
        assert_eq!(loaded.config.backends[0].transport(), Transport::Sse);
        assert_eq!(
            loaded.config.backends[1].transport(),
            Transport::StreamableHttp
        );
        assert_eq!(loaded.config.strategy(), Strategy::Priority);
    }

    #[test]
    fn a_misspelled_enum_is_reported_with_every_other_problem() {
        let errors = misspelled_with_the_rest(
            "backends: [{name: a, url: 'ftp://x', transport: 3}]\naggregation: {conflictResolution: Prefix}\n",
        )
        .unwrap();
        assert_eq!(
            errors,
            vec![
                r#"backends[0].transport must be "sse", "streamable-http" or "stdio" (got 3)"#,
                r#"aggregation.conflictResolution must be "prefix", "priority" or "manual" (got "Prefix")"#,
                "backends[0].url must start with http:// or https://",
            ]
        );
        assert!(misspelled_with_the_rest("backends: [{name: a, url: 'http://h'}]\n").is_none());
    }

    #[test]
    fn misfit_strategies_are_reported_with_every_other_problem() {
        let errors = misspelled_with_the_rest(
            "backends: [{name: a, url: 'ftp://x'}]\noutgoingAuth:\n  source: inlined\n  default: {type: header_injection}\n  backends:\n    a: {type: token_exchange, tokenExchange: {tokenUrl: 'https://t', subjectTokenType: saml}}\n    b: {type: unauthenticated, tokenExchange: {tokenUrl: 'https://t'}}\n",
        )
        .unwrap();
        assert_eq!(
            errors,
            vec![
                r#"outgoingAuth.source must be "inline" (got "inlined")"#,
                r#"outgoingAuth.default.headerInjection is required when type is "header_injection""#,
                r#"outgoingAuth.backends.a.tokenExchange.subjectTokenType must be "access_token", "id_token" or "jwt" (got "saml")"#,
                r#"outgoingAuth.backends.b.tokenExchange is only used with type "token_exchange""#,
                "backends[0].url must start with http:// or https://",
            ]
        );
    }
}
