//! One Legacy session as Redis keeps it: a hash at `<prefix>session:<id>`.
//!
//! A hash rather than one JSON value, so a subscription or a log level is one
//! `HSET`/`HDEL` of its own field (no read-modify-write racing another replica),
//! and the sliding pass touches `last_used` alone.
#![allow(deprecated)] // Log levels are deprecated by SEP-2577 but still part of both revisions.

use std::collections::{BTreeSet, HashMap};

use rmcp::model::{InitializeRequestParams, LoggingLevel};

/// Field names of the hash.
pub(super) mod field {
    /// HMAC-SHA256 (shared key) of the creator's issuer and subject, hex.
    pub(crate) const OWNER: &str = "owner";
    /// Whom the session counts against for the per-caller cap (the zset's name).
    pub(crate) const CALLER: &str = "caller";
    /// Unix milliseconds.
    pub(crate) const CREATED: &str = "created";
    /// Unix milliseconds of the latest use any replica reported.
    pub(crate) const LAST_USED: &str = "last_used";
    /// The negotiated protocol revision.
    pub(crate) const REVISION: &str = "revision";
    /// The client's `initialize` params (client info and capabilities), JSON.
    pub(crate) const INIT: &str = "init";
    /// The `logging/setLevel` choice, JSON.
    pub(crate) const LEVEL: &str = "level";
    /// Prefix of one field per subscribed URI.
    pub(crate) const SUB: &str = "sub:";
}

/// The state a replica needs to serve a session it did not create.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) owner: String,
    pub(crate) caller: String,
    pub(crate) created_ms: u64,
    pub(crate) init: InitializeRequestParams,
    pub(crate) subscriptions: BTreeSet<String>,
    pub(crate) level: Option<LoggingLevel>,
}

impl Record {
    /// The hash's fields (all of them: a first write, or a catch-up).
    pub(super) fn fields(&self, now_ms: u64) -> Vec<(String, String)> {
        let mut fields = vec![
            (field::OWNER.into(), self.owner.clone()),
            (field::CALLER.into(), self.caller.clone()),
            (field::CREATED.into(), self.created_ms.to_string()),
            (field::LAST_USED.into(), now_ms.to_string()),
            (
                field::REVISION.into(),
                self.init.protocol_version.to_string(),
            ),
            (
                field::INIT.into(),
                serde_json::to_string(&self.init).unwrap_or_default(),
            ),
        ];
        if let Some(level) = self.level {
            fields.push((field::LEVEL.into(), level_json(level)));
        }
        for uri in &self.subscriptions {
            fields.push((format!("{}{uri}", field::SUB), "1".into()));
        }
        fields
    }

    /// The record a hash (`HGETALL`) holds; `None` when missing or unreadable.
    pub(super) fn from_hash(mut hash: HashMap<String, String>) -> Option<Self> {
        let owner = hash.remove(field::OWNER)?;
        let init = serde_json::from_str(&hash.remove(field::INIT)?).ok()?;
        let subscriptions = hash
            .keys()
            .filter_map(|k| k.strip_prefix(field::SUB))
            .map(str::to_owned)
            .collect();
        Some(Self {
            owner,
            caller: hash.remove(field::CALLER).unwrap_or_default(),
            created_ms: hash
                .get(field::CREATED)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
            init,
            subscriptions,
            level: hash
                .get(field::LEVEL)
                .and_then(|l| serde_json::from_str(l).ok()),
        })
    }
}

/// A level as the hash keeps it (its JSON form, `"debug"`).
pub(super) fn level_json(level: LoggingLevel) -> String {
    serde_json::to_string(&level).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_from_its_fields() {
        let init: InitializeRequestParams = serde_json::from_value(serde_json::json!({
            "protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
            "clientInfo": {"name": "c", "version": "1"}}))
        .unwrap();
        let record = Record {
            owner: "ab".into(),
            caller: "id:cd".into(),
            created_ms: 7,
            init,
            subscriptions: ["file:///a".to_string(), "x://b:c".to_string()].into(),
            level: Some(LoggingLevel::Debug),
        };
        let hash: HashMap<String, String> = record.fields(9).into_iter().collect();
        assert_eq!(hash[field::LAST_USED], "9");
        assert_eq!(hash[field::REVISION], "2025-11-25");
        let back = Record::from_hash(hash).unwrap();
        assert_eq!(back.owner, "ab");
        assert_eq!(back.caller, "id:cd");
        assert_eq!(back.created_ms, 7);
        assert_eq!(back.subscriptions, record.subscriptions);
        assert_eq!(back.level, Some(LoggingLevel::Debug));
        assert_eq!(back.init.client_info.name, "c");
        assert!(Record::from_hash(HashMap::new()).is_none());
    }
}
