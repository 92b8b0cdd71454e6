//! Where pins live: the [`PinStore`] trait (a file here, Redis in
//! [`super::redis_pins`]) and the pin document both the gateway and `vmcp pins`
//! read and write.
//!
//! The document holds, per backend, the approved pins and the pending definitions
//! (seen but not approved: changed ones, and new ones under `newTools: block`). Every
//! write is a read-modify-write under a lock, so the gateway (pinning on first sight,
//! recording a change) and an operator approving never lose each other's update.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kind of a pinned definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A tool (`tools/list`).
    Tool,
    /// A prompt (`prompts/list`).
    Prompt,
    /// A resource template (`resources/templates/list`), named by its `uriTemplate`.
    Template,
}

impl EntryKind {
    /// `tool`, `prompt` or `template`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Tool => "tool",
            EntryKind::Prompt => "prompt",
            EntryKind::Template => "template",
        }
    }

    /// The kind spelled `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "tool" => Some(EntryKind::Tool),
            "prompt" => Some(EntryKind::Prompt),
            "template" => Some(EntryKind::Template),
            _ => None,
        }
    }
}

/// A pinned entry within a backend: its kind and the backend's own name. Written
/// `kind:name` in the document (a kind has no `:`, so any name round-trips).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PinKey {
    /// Tool, prompt or template.
    pub kind: EntryKind,
    /// The backend's own name (not the advertised, prefixed one).
    pub name: String,
}

impl fmt::Display for PinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.name)
    }
}

impl Serialize for PinKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PinKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (kind, name) = text
            .split_once(':')
            .and_then(|(k, n)| Some((EntryKind::parse(k)?, n)))
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "pin key {text:?} is not `tool:NAME`, `prompt:NAME` or `template:URI`"
                ))
            })?;
        Ok(PinKey {
            kind,
            name: name.to_owned(),
        })
    }
}

/// One pinned (or pending) definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// Lowercase hex SHA-256 of the canonical JSON of `definition`.
    pub sha256: String,
    /// The pinned fields, for diffs.
    pub definition: Value,
    /// When it was pinned or first seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Who approved it (`cli:USER` for `vmcp pins approve`, `admin` for the admin
    /// endpoint); absent when pinned on first sight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// Per backend, per entry.
pub type Entries = BTreeMap<String, BTreeMap<PinKey, Pin>>;

/// The pin document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinDocument {
    /// Format version (1).
    #[serde(default = "one")]
    pub version: u32,
    /// Approved definitions: advertised while they match.
    #[serde(default)]
    pub pins: Entries,
    /// Seen and not approved: a definition that differs from its pin, or a new one
    /// under `newTools: block`. `vmcp pins approve` moves it to `pins`.
    #[serde(default)]
    pub pending: Entries,
}

fn one() -> u32 {
    1
}

/// A token that changes whenever the stored pins change (compared, never read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreVersion(Token);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// The file's identity and size: a write renames a new file over it.
    File {
        inode: u64,
        modified: Option<SystemTime>,
        len: u64,
    },
    /// A counter every write increments (Redis).
    Counter(u64),
}

impl StoreVersion {
    /// The version numbered `n` of a store that counts its writes.
    pub(crate) fn counter(n: u64) -> Self {
        Self(Token::Counter(n))
    }
}

/// Why the pins could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be read or written.
    #[error("pin file {path}: {source}")]
    Io {
        /// The pin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The stored document is not a pin document.
    #[error("pin file {path} is not a pin document: {message}")]
    Parse {
        /// The pin file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Another writer held the lock too long.
    #[error("pin file {0} is locked by another writer")]
    Locked(PathBuf),
    /// The pins are kept in Redis and Redis failed (or is not configured).
    #[error("pins in redis: {0}")]
    Redis(String),
    /// Other writers kept changing the pins while this one tried to.
    #[error("pins in redis changed under every one of {0} attempts to write them")]
    Contended(u32),
    /// The store is larger than the cap (64 MiB).
    #[error("the pins are larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
}

/// Change a pin document, under the store's lock (or compare-and-set): may run more
/// than once, on the document as stored at each attempt; returns whether it changed
/// anything (nothing is written otherwise).
pub type Change = Box<dyn FnMut(&mut PinDocument) -> bool + Send>;

/// Where pins are kept. Reads are cheap to repeat: [`PinStore::version`] says
/// whether [`PinStore::load`] would return something new. Every method is async and
/// keeps blocking I/O off the runtime (the file store runs on the blocking pool).
pub trait PinStore: Send + Sync + fmt::Debug {
    /// The stored document (empty when nothing is stored yet).
    fn load(&self) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>>;
    /// The current version, without reading the document (`None`: nothing stored, or
    /// the store cannot be reached).
    fn version(&self) -> BoxFuture<'_, Option<StoreVersion>>;
    /// Read, apply `change`, and store the result if `change` returned true, all
    /// under the store's lock. Returns the document as stored afterwards.
    fn update(
        &self,
        change: Change,
    ) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>>;
}

/// The largest pin document read (a definition is small; a backend with thousands
/// of tools stays well below).
pub const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;
/// How long a writer waits for the lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Pins in a JSON file: written to a temporary file beside it and renamed over it
/// (a reader never sees half a document), under an OS lock on `PATH.lock` (released
/// by the kernel when a writer dies, so no stale lock outlives a crash; `vmcp pins
/// approve` and `vmcp serve` take the same lock).
#[derive(Debug, Clone)]
pub struct FilePinStore {
    path: PathBuf,
}

impl FilePinStore {
    /// The store at `path` (created on the first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The pin file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn read(&self) -> Result<(PinDocument, Option<StoreVersion>), StoreError> {
        let version = self.version();
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((PinDocument::default(), None));
            }
            Err(e) => return Err(self.io(e)),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_DOCUMENT_BYTES + 1),
            &mut text,
        )
        .map_err(|e| self.io(e))?;
        if text.len() as u64 > MAX_DOCUMENT_BYTES {
            return Err(StoreError::Parse {
                path: self.path.clone(),
                message: format!("larger than {MAX_DOCUMENT_BYTES} bytes"),
            });
        }
        if text.trim().is_empty() {
            return Ok((PinDocument::default(), version));
        }
        let document = serde_json::from_str(&text).map_err(|e| StoreError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        Ok((document, version))
    }

    fn write(&self, document: &PinDocument) -> Result<(), StoreError> {
        let mut text = serde_json::to_vec_pretty(document).map_err(|e| StoreError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        text.push(b'\n');
        let temp = sibling(&self.path, &format!("tmp.{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let result = options
            .open(&temp)
            .and_then(|mut file| {
                file.write_all(&text)?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temp, &self.path));
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result.map_err(|e| self.io(e))
    }

    fn lock(&self) -> Result<std::fs::File, StoreError> {
        let path = sibling(&self.path, "lock");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| self.io(e))?;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                // Unlocked when the file is dropped (closed).
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(StoreError::Locked(self.path.clone()));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(self.io(e)),
            }
        }
    }
}

/// `PATH.suffix` beside `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

impl FilePinStore {
    /// The stored document (blocking; [`PinStore::load`] off the runtime).
    pub fn load(&self) -> Result<(PinDocument, Option<StoreVersion>), StoreError> {
        self.read()
    }

    /// The file's version (blocking: one `stat`).
    pub fn version(&self) -> Option<StoreVersion> {
        let meta = std::fs::metadata(&self.path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(StoreVersion(Token::File {
            inode,
            modified: meta.modified().ok(),
            len: meta.len(),
        }))
    }

    /// Read, change and write under the lock (blocking).
    pub fn update(
        &self,
        change: &mut dyn FnMut(&mut PinDocument) -> bool,
    ) -> Result<(PinDocument, Option<StoreVersion>), StoreError> {
        let _lock = self.lock()?;
        let (mut document, version) = self.read()?;
        if !change(&mut document) {
            return Ok((document, version));
        }
        self.write(&document)?;
        Ok((document, self.version()))
    }
}

/// `f` on the blocking pool (a panic there is an I/O error, not a crash).
async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StoreError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

impl PinStore for FilePinStore {
    fn load(&self) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>> {
        let store = self.clone();
        Box::pin(blocking(&self.path, move || store.read()))
    }

    fn version(&self) -> BoxFuture<'_, Option<StoreVersion>> {
        let store = self.clone();
        Box::pin(async move {
            blocking(&self.path, move || Ok(FilePinStore::version(&store)))
                .await
                .ok()
                .flatten()
        })
    }

    fn update(
        &self,
        mut change: Change,
    ) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>> {
        let store = self.clone();
        Box::pin(blocking(&self.path, move || {
            FilePinStore::update(&store, &mut *change)
        }))
    }
}

/// The current time as RFC 3339 (seconds).
pub(crate) fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmcp-pins-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pins.json");
        let _ = std::fs::remove_file(&path);
        path
    }

    fn pin(sha: &str) -> Pin {
        Pin {
            sha256: sha.into(),
            definition: json!({"name": "a:b"}),
            at: None,
            approved_by: None,
        }
    }

    #[test]
    fn updates_round_trip_and_change_the_version() {
        let store = FilePinStore::new(temp("round"));
        let (empty, none) = store.load().unwrap();
        assert_eq!(empty, PinDocument::default());
        assert!(none.is_none());
        let key = PinKey {
            kind: EntryKind::Tool,
            name: "odd:name".into(),
        };
        let (written, v1) = store
            .update(&mut |doc| {
                doc.pins
                    .entry("b".into())
                    .or_default()
                    .insert(key.clone(), pin("aa"));
                true
            })
            .unwrap();
        assert_eq!(store.load().unwrap().0, written);
        assert_eq!(written.pins["b"][&key].sha256, "aa");
        let text = std::fs::read_to_string(store.path()).unwrap();
        assert!(text.contains(r#""tool:odd:name""#), "{text}");
        let (_, v2) = store
            .update(&mut |doc| {
                doc.pending
                    .entry("b".into())
                    .or_default()
                    .insert(key.clone(), pin("bb"));
                true
            })
            .unwrap();
        assert_ne!(v1, v2, "a rename gives a new version");
        assert_eq!(store.version(), v2);
        let lock = std::fs::File::open(sibling(store.path(), "lock")).unwrap();
        assert!(lock.try_lock().is_ok(), "the lock is released");
    }

    #[test]
    fn a_held_lock_blocks_a_writer_and_a_garbled_file_is_an_error() {
        let store = FilePinStore::new(temp("lock"));
        let held = store.lock().unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(
            store.update(&mut |_| true),
            Err(StoreError::Locked(_))
        ));
        assert!(started.elapsed() >= LOCK_WAIT);
        drop(held);
        std::fs::write(store.path(), "{\"pins\": {\"b\": {\"nokind\": {}}}}").unwrap();
        assert!(matches!(store.load(), Err(StoreError::Parse { .. })));
    }
}
