//! Enum-valued settings spelled wrong (`backends[].transport`,
//! `aggregation.conflictResolution`).
//!
//! The model holds these as enums, so a typed parse would stop at the first bad
//! value. They are checked on the untyped document first, and the rest of the file
//! is then parsed and validated without them, so one run reports every problem, each
//! naming its field.

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::{Strategy, Transport, VmcpConfig, validate};
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
}
