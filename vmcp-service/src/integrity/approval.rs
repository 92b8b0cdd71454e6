//! What `vmcp pins list|diff|approve` does to a pin document: list entries with their
//! state, diff pending definitions against their pins, and approve pending ones
//! (they become the pins; the running gateway picks the new file up).

use std::collections::BTreeMap;

use super::{EntryKind, FieldDiff, Pin, PinDocument, PinKey, diff};

/// Which entries a command is about: all of them, or those matching every given part.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    /// Only this backend.
    pub backend: Option<&'a str>,
    /// Only entries with this (backend's own) name.
    pub name: Option<&'a str>,
    /// Only this kind.
    pub kind: Option<EntryKind>,
}

impl Selection<'_> {
    fn matches(&self, backend: &str, key: &PinKey) -> bool {
        self.backend.is_none_or(|b| b == backend)
            && self.name.is_none_or(|n| n == key.name)
            && self.kind.is_none_or(|k| k == key.kind)
    }
}

/// The state of one listed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// Pinned; nothing pending.
    Pinned,
    /// Pinned, and a different definition is pending approval.
    Changed,
    /// Not pinned; pending approval (`newTools: block`).
    New,
}

impl RowState {
    /// `pinned`, `changed` or `new`.
    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Pinned => "pinned",
            RowState::Changed => "changed",
            RowState::New => "new",
        }
    }
}

/// One entry of `vmcp pins list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The backend.
    pub backend: String,
    /// Kind and name.
    pub key: PinKey,
    /// Pinned, changed or new.
    pub state: RowState,
    /// The pinned digest, if pinned.
    pub pinned: Option<String>,
    /// The pending digest, if any.
    pub pending: Option<String>,
}

/// Every selected entry, pinned or pending, sorted by backend, kind and name.
pub fn rows(doc: &PinDocument, selection: Selection<'_>) -> Vec<Row> {
    let mut rows: BTreeMap<(String, PinKey), Row> = BTreeMap::new();
    for (backend, pins) in &doc.pins {
        for (key, pin) in pins.iter().filter(|(k, _)| selection.matches(backend, k)) {
            rows.insert(
                (backend.clone(), key.clone()),
                Row {
                    backend: backend.clone(),
                    key: key.clone(),
                    state: RowState::Pinned,
                    pinned: Some(pin.sha256.clone()),
                    pending: None,
                },
            );
        }
    }
    for (backend, pending) in &doc.pending {
        for (key, pin) in pending
            .iter()
            .filter(|(k, _)| selection.matches(backend, k))
        {
            let row = rows
                .entry((backend.clone(), key.clone()))
                .or_insert_with(|| Row {
                    backend: backend.clone(),
                    key: key.clone(),
                    state: RowState::New,
                    pinned: None,
                    pending: None,
                });
            if row.pinned.is_some() {
                row.state = RowState::Changed;
            }
            row.pending = Some(pin.sha256.clone());
        }
    }
    rows.into_values().collect()
}

/// One pending entry against its pin.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingDiff {
    /// The backend.
    pub backend: String,
    /// Kind and name.
    pub key: PinKey,
    /// The fields that differ (every field of a new entry).
    pub fields: BTreeMap<String, FieldDiff>,
}

/// The selected pending entries, each diffed against its pin.
pub fn diffs(doc: &PinDocument, selection: Selection<'_>) -> Vec<PendingDiff> {
    doc.pending
        .iter()
        .flat_map(|(backend, pending)| {
            pending
                .iter()
                .filter(move |(k, _)| selection.matches(backend, k))
                .map(move |(key, pin)| PendingDiff {
                    backend: backend.clone(),
                    key: key.clone(),
                    fields: diff(
                        doc.pins
                            .get(backend)
                            .and_then(|p| p.get(key))
                            .map(|p| &p.definition),
                        &pin.definition,
                    ),
                })
        })
        .collect()
}

/// Make the selected pending definitions the pins, noting `by` as who approved
/// them; returns what was approved.
pub fn approve(
    doc: &mut PinDocument,
    selection: Selection<'_>,
    by: &str,
) -> Vec<(String, PinKey, Pin)> {
    let mut approved = Vec::new();
    for (backend, pending) in doc.pending.iter_mut() {
        let chosen: Vec<PinKey> = pending
            .keys()
            .filter(|k| selection.matches(backend, k))
            .cloned()
            .collect();
        for key in chosen {
            if let Some(mut pin) = pending.remove(&key) {
                pin.at = Some(super::store::now());
                pin.approved_by = Some(by.to_owned());
                doc.pins
                    .entry(backend.clone())
                    .or_default()
                    .insert(key.clone(), pin.clone());
                approved.push((backend.clone(), key, pin));
            }
        }
    }
    doc.pending.retain(|_, entries| !entries.is_empty());
    approved
}
