//! Pins in the replicas' shared Redis (`integrity.store: redis`), so every replica
//! checks against the same approvals and an approval on one applies on all.
//!
//! Three keys under the `sessionStorage` prefix: `integrity:pins` and
//! `integrity:pending` are hashes (field: `["backend","kind:name"]` as JSON, value:
//! the [`Pin`] as JSON), and `integrity:version` counts the writes. A reader takes
//! all three in one script (a consistent snapshot); a writer changes the fields that
//! differ in one compare-and-set script that refuses when the counter moved since
//! its read, then reads again and retries. Replicas poll the counter (one `GET` a
//! second), so an approval on one replica applies on the others within a second.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::store::{
    Change, Entries, MAX_DOCUMENT_BYTES, Pin, PinDocument, PinKey, PinStore, StoreError,
    StoreVersion,
};
use crate::redis_store::RedisStore;

/// KEYS: pins, pending, version. Returns the version and both hashes, atomically.
const READ: &str = r"
return {redis.call('GET', KEYS[3]) or '0', redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
";

/// KEYS: pins, pending, version. ARGV[1]: the version the change was made on; then
/// per change four values: `set` or `del`, the hash (1: pins, 2: pending), the
/// field, the value (empty for `del`). Returns the new version, or 0 (nothing
/// written) when the version moved.
const WRITE: &str = r"
if (redis.call('GET', KEYS[3]) or '0') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 4 do
  local hash = KEYS[tonumber(ARGV[i + 1])]
  if ARGV[i] == 'set' then
    redis.call('HSET', hash, ARGV[i + 2], ARGV[i + 3])
  else
    redis.call('HDEL', hash, ARGV[i + 2])
  end
end
return redis.call('INCR', KEYS[3])
";

/// How many times a write is retried when other writers keep moving the version.
const ATTEMPTS: u32 = 16;

/// The Redis pin store.
pub struct RedisPinStore {
    redis: Arc<RedisStore>,
    read: redis::Script,
    write: redis::Script,
}

impl std::fmt::Debug for RedisPinStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPinStore")
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

impl RedisPinStore {
    /// Pins in `redis`.
    pub fn new(redis: Arc<RedisStore>) -> Self {
        Self {
            redis,
            read: redis::Script::new(READ),
            write: redis::Script::new(WRITE),
        }
    }

    fn keys(&self) -> [String; 3] {
        [
            self.redis.key("integrity:pins"),
            self.redis.key("integrity:pending"),
            self.redis.key("integrity:version"),
        ]
    }

    fn failed(&self, error: crate::redis_store::StoreError) -> StoreError {
        self.redis.note_failure(&error);
        StoreError::Redis(error.to_string())
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut conn = self.redis.connection();
        match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            invocation.invoke_async(&mut conn),
        )
        .await
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.failed(e.into())),
            Err(_) => Err(self.failed(crate::redis_store::StoreError::Timeout)),
        }
    }

    /// The document and the version it was read at.
    async fn read(&self) -> Result<(PinDocument, u64), StoreError> {
        let [pins, pending, version] = self.keys();
        let mut invocation = self.read.prepare_invoke();
        invocation.key(&pins).key(&pending).key(&version);
        type Snapshot = (String, Vec<(String, String)>, Vec<(String, String)>);
        let (version, pins, pending): Snapshot = self.run(invocation).await?;
        let size: usize = pins
            .iter()
            .chain(&pending)
            .map(|(f, v)| f.len() + v.len())
            .sum();
        if size as u64 > MAX_DOCUMENT_BYTES {
            return Err(StoreError::TooLarge);
        }
        let version = version.parse().map_err(|_| {
            StoreError::Redis(format!("integrity:version is not a count: {version:?}"))
        })?;
        Ok((
            PinDocument {
                version: 1,
                pins: entries(pins)?,
                pending: entries(pending)?,
            },
            version,
        ))
    }
}

/// A hash's fields as entries.
fn entries(fields: Vec<(String, String)>) -> Result<Entries, StoreError> {
    let mut entries = Entries::new();
    for (field, value) in fields {
        let bad = |e: serde_json::Error| StoreError::Redis(format!("a stored pin is garbled: {e}"));
        let (backend, key): (String, PinKey) = serde_json::from_str(&field).map_err(bad)?;
        let pin: Pin = serde_json::from_str(&value).map_err(bad)?;
        entries.entry(backend).or_default().insert(key, pin);
    }
    Ok(entries)
}

/// The `set`/`del` operations that turn `old` into `new` in hash `hash`.
fn changes(hash: &str, old: &Entries, new: &Entries, out: &mut Vec<String>) {
    let flat = |e: &Entries| -> BTreeMap<String, String> {
        e.iter()
            .flat_map(|(backend, pins)| {
                pins.iter().map(move |(key, pin)| {
                    (
                        serde_json::to_string(&(backend, key)).unwrap_or_default(),
                        serde_json::to_string(pin).unwrap_or_default(),
                    )
                })
            })
            .collect()
    };
    let (old, new) = (flat(old), flat(new));
    for (field, value) in &new {
        if old.get(field) != Some(value) {
            out.extend(["set".into(), hash.into(), field.clone(), value.clone()]);
        }
    }
    for field in old.keys().filter(|f| !new.contains_key(*f)) {
        out.extend(["del".into(), hash.into(), field.clone(), String::new()]);
    }
}

impl PinStore for RedisPinStore {
    fn load(&self) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>> {
        Box::pin(async move {
            let (document, version) = self.read().await?;
            Ok((document, Some(StoreVersion::counter(version))))
        })
    }

    fn version(&self) -> BoxFuture<'_, Option<StoreVersion>> {
        Box::pin(async move {
            let mut conn = self.redis.connection();
            let key = self.redis.key("integrity:version");
            let mut command = redis::cmd("GET");
            command.arg(&key);
            let get = command.query_async::<Option<u64>>(&mut conn);
            match tokio::time::timeout(std::time::Duration::from_secs(1), get).await {
                Ok(Ok(n)) => Some(StoreVersion::counter(n.unwrap_or(0))),
                Ok(Err(e)) => {
                    self.redis.note_failure(&e.into());
                    None
                }
                Err(_) => None,
            }
        })
    }

    fn update(
        &self,
        mut change: Change,
    ) -> BoxFuture<'_, Result<(PinDocument, Option<StoreVersion>), StoreError>> {
        Box::pin(async move {
            for _ in 0..ATTEMPTS {
                let (old, version) = self.read().await?;
                let mut new = old.clone();
                if !change(&mut new) {
                    return Ok((old, Some(StoreVersion::counter(version))));
                }
                let mut ops = Vec::new();
                changes("1", &old.pins, &new.pins, &mut ops);
                changes("2", &old.pending, &new.pending, &mut ops);
                if ops.is_empty() {
                    return Ok((old, Some(StoreVersion::counter(version))));
                }
                let [pins, pending, counter] = self.keys();
                let mut invocation = self.write.prepare_invoke();
                invocation
                    .key(&pins)
                    .key(&pending)
                    .key(&counter)
                    .arg(version.to_string());
                for op in &ops {
                    invocation.arg(op);
                }
                let written: u64 = self.run(invocation).await?;
                if written > 0 {
                    return Ok((new, Some(StoreVersion::counter(written))));
                }
            }
            Err(StoreError::Contended(ATTEMPTS))
        })
    }
}
