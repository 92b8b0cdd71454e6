//! Legacy sessions shared by replicas through Redis (`sessionStorage: redis`).
//!
//! Each session is a record (`record`) written when it is created, before its
//! `initialize` answer leaves: who created it (an HMAC of issuer and subject with
//! a key every replica shares, stored at `<prefix>session-binding-key`; never a
//! token), whom it counts against, its `initialize` params (revision, client info
//! and capabilities), its subscriptions and log level. A replica that gets a
//! request for a session it does not hold checks the caller against the record
//! first (a foreign caller gets the unknown-session answer and learns nothing) and
//! then lets rmcp rebuild the session from it (`rmcp_store`), without a new
//! `initialize` from the client.
//!
//! The hot path never waits on Redis for a session this replica holds: a request
//! only marks its session used, and a pass every second slides the TTL of the used
//! ones in one batch (`SLIDE`), finds those deleted or expired elsewhere (and
//! closes them here), and writes the records Redis missed while it was down.
//!
//! The per-caller cap counts across replicas: a zset per caller
//! (`<prefix>sessions-of:<caller>`, scored by last use). A new session over it is
//! refused (503), as a replica refuses one when its own sessions are all busy.
#![allow(deprecated)] // Log levels are deprecated by SEP-2577 but still part of both revisions.

mod pass;
mod record;
mod rmcp_store;
mod scripts;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use redis::Script;
use rmcp::model::{InitializeRequestParams, LoggingLevel};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use vmcp_layers::Identity;

pub(crate) use record::Record;

use crate::aggregator::Aggregator;
use crate::config::SessionLimits;
use crate::redis_store::{RedisStore, StoreError};
use crate::session_binding::{Caller, SessionBindings};
use crate::sessions::Sessions;

/// How often the sliding pass runs.
const PASS_EVERY: Duration = Duration::from_secs(1);
/// How long a deleted session's tombstone stays.
const TOMBSTONE: Duration = Duration::from_secs(60);
/// The longest a restore may wait on Redis before the session is answered as
/// unknown (the client re-initializes).
pub(crate) const RESTORE_BOUND: Duration = Duration::from_secs(3);

/// What happened to a new session's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    /// Written: any replica can serve it.
    Shared,
    /// Redis is unreachable: the session lives here only until Redis is back,
    /// when the pass writes it.
    LocalOnly,
    /// Its caller is at its cap across replicas.
    Full,
}

/// A session this replica holds, as the record it writes.
struct Held {
    record: Record,
    /// Its creator, until the record is written (the owner hash needs the shared
    /// key, which a replica that started while Redis was down has not read yet).
    identity: Option<Option<Arc<Identity>>>,
    address: Option<IpAddr>,
    /// Whether Redis has the record.
    persisted: bool,
    /// Used since the last pass.
    used: bool,
    /// Adopted from the record: rmcp's restore and the handler take its state.
    restoring: bool,
}

/// The shared sessions of one MCP endpoint.
pub(crate) struct SharedSessions {
    store: Arc<RedisStore>,
    key: tokio::sync::OnceCell<(hmac::Key, String)>,
    held: Mutex<HashMap<String, Held>>,
    /// `initialize` params rmcp handed over (`SessionStore::store`), until the
    /// endpoint writes the session's record.
    initialized: Mutex<HashMap<String, InitializeRequestParams>>,
    write: Script,
    slide: Script,
    delete: Script,
    manager: Weak<LocalSessionManager>,
    bindings: Weak<SessionBindings>,
    sessions: Weak<Sessions>,
    aggregator: Weak<Aggregator>,
}

impl std::fmt::Debug for SharedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSessions")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl SharedSessions {
    pub(crate) fn new(
        store: Arc<RedisStore>,
        manager: Weak<LocalSessionManager>,
        bindings: Weak<SessionBindings>,
        sessions: Weak<Sessions>,
        aggregator: Weak<Aggregator>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            key: tokio::sync::OnceCell::new(),
            held: Mutex::default(),
            initialized: Mutex::default(),
            write: Script::new(scripts::WRITE),
            slide: Script::new(scripts::SLIDE),
            delete: Script::new(scripts::DELETE),
            manager,
            bindings,
            sessions,
            aggregator,
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_key(&self, session: &str) -> String {
        self.store.key(&format!("session:{session}"))
    }

    fn zset_prefix(&self) -> String {
        self.store.key("sessions-of:")
    }

    /// Run `command` against Redis, within the command timeout; failures mark the
    /// store down at once.
    async fn run<T, F>(&self, command: F) -> Result<T, StoreError>
    where
        F: AsyncFnOnce(&mut redis::aio::ConnectionManager) -> redis::RedisResult<T>,
    {
        if self.store.is_known_down() {
            return Err(StoreError::Timeout);
        }
        let mut conn = self.store.connection();
        let answer = match tokio::time::timeout(Duration::from_secs(1), command(&mut conn)).await {
            Ok(answer) => answer.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout),
        };
        if let Err(e) = &answer {
            self.store.note_failure(e);
        }
        answer
    }

    /// The key every replica hashes identities with: the first replica creates it
    /// (`SET NX`), the others read it.
    async fn binding_key(&self) -> Result<&hmac::Key, StoreError> {
        self.key_and_text().await.map(|(key, _)| key)
    }

    async fn key_and_text(&self) -> Result<&(hmac::Key, String), StoreError> {
        self.key
            .get_or_try_init(|| async {
                let name = self.store.key("session-binding-key");
                let fresh =
                    hex(uuid::Uuid::new_v4().as_bytes()) + &hex(uuid::Uuid::new_v4().as_bytes());
                let stored: String = self
                    .run(async |conn| {
                        redis::cmd("SET")
                            .arg(&name)
                            .arg(&fresh)
                            .arg("NX")
                            .exec_async(conn)
                            .await?;
                        redis::cmd("GET").arg(&name).query_async(conn).await
                    })
                    .await?;
                let bytes = unhex(&stored).unwrap_or_else(|| stored.clone().into_bytes());
                Ok((hmac::Key::new(hmac::HMAC_SHA256, &bytes), stored))
            })
            .await
    }

    fn owner(key: &hmac::Key, identity: Option<&Identity>) -> String {
        hex(hmac::sign(key, &SessionBindings::message(identity)).as_ref())
    }

    fn caller(key: &hmac::Key, identity: Option<&Identity>, address: Option<IpAddr>) -> String {
        let tag = || {
            hmac::sign(key, &SessionBindings::message(identity))
                .as_ref()
                .to_vec()
        };
        match Caller::of(identity, tag, address) {
            Caller::Identity(tag) => format!("id:{}", hex(&tag)),
            Caller::Address(ip) => format!("ip:{ip}"),
            Caller::Anonymous => "anonymous".into(),
        }
    }

    /// rmcp handed over a new session's `initialize` params.
    fn initialized(&self, session: &str, params: InitializeRequestParams) {
        self.initialized
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.to_owned(), params);
    }

    /// A new session (bound here to `identity`, from `address`): write its record
    /// and count it against its caller's cap across replicas.
    pub(crate) async fn created(
        &self,
        session: &str,
        identity: Option<Arc<Identity>>,
        address: Option<IpAddr>,
        limits: &SessionLimits,
    ) -> Created {
        let Some(init) = self
            .initialized
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session)
        else {
            return Created::LocalOnly;
        };
        let record = Record {
            owner: String::new(),
            caller: String::new(),
            created_ms: now_ms(),
            init,
            subscriptions: Default::default(),
            level: None,
        };
        let held = Held {
            record,
            identity: Some(identity),
            address,
            persisted: false,
            used: false,
            restoring: false,
        };
        self.held().insert(session.to_owned(), held);
        match self.persist(session, limits, false).await {
            Ok(Persisted::Written) => Created::Shared,
            Ok(Persisted::Full) => {
                self.held().remove(session);
                Created::Full
            }
            Ok(Persisted::Deleted) => Created::Shared,
            Err(e) => {
                tracing::warn!(error = %e, "a new Legacy session is local to this replica until Redis is back");
                Created::LocalOnly
            }
        }
    }

    /// Write the record of `session` (held here) with the script `WRITE`.
    async fn persist(
        &self,
        session: &str,
        limits: &SessionLimits,
        catch_up: bool,
    ) -> Result<Persisted, StoreError> {
        let key = self.binding_key().await?;
        let record = {
            let mut held = self.held();
            let Some(entry) = held.get_mut(session) else {
                return Ok(Persisted::Deleted);
            };
            if let Some(identity) = entry.identity.as_ref() {
                entry.record.owner = Self::owner(key, identity.as_deref());
                entry.record.caller = Self::caller(key, identity.as_deref(), entry.address);
            }
            entry.record.clone()
        };
        let now = now_ms();
        let cap = if catch_up {
            // Serving already: counted, never refused.
            usize::MAX
        } else {
            use crate::session_binding::PerCaller;
            let caller = match record.caller.split_once(':') {
                Some(("id", _)) => Caller::Identity(Vec::new()),
                _ => Caller::Anonymous,
            };
            limits.per_caller(&caller)
        };
        let mut invocation = self.write.prepare_invoke();
        invocation
            .key(format!("{}{}", self.zset_prefix(), record.caller))
            .key(self.record_key(session))
            .key(self.store.key(&format!("session-deleted:{session}")))
            .arg(now)
            .arg(now.saturating_sub(ms(limits.ttl)))
            .arg(cap.min(i64::MAX as usize))
            .arg(session)
            .arg(ms(limits.ttl))
            .arg(if catch_up { "1" } else { "0" });
        for (field, value) in record.fields(now) {
            invocation.arg(field).arg(value);
        }
        let answer: i64 = self
            .run(async |conn| invocation.invoke_async(conn).await)
            .await?;
        let outcome = match answer {
            1 => Persisted::Written,
            0 => Persisted::Full,
            _ => Persisted::Deleted,
        };
        if outcome == Persisted::Written
            && let Some(entry) = self.held().get_mut(session)
        {
            entry.persisted = true;
            entry.identity = None;
        }
        Ok(outcome)
    }

    /// Whether `identity` owns the session `session` recorded in Redis; if so the
    /// session is adopted here (rmcp restores it next). Bounded by
    /// [`RESTORE_BOUND`]; anything but a live record of this caller is `false`.
    pub(crate) async fn adopt(
        &self,
        session: &str,
        identity: Option<&Identity>,
        limits: &SessionLimits,
    ) -> bool {
        match tokio::time::timeout(RESTORE_BOUND, self.load_owned(session, identity, limits)).await
        {
            Ok(Ok(Some(record))) => {
                let mut held = self.held();
                held.entry(session.to_owned()).or_insert(Held {
                    record,
                    identity: None,
                    address: None,
                    persisted: true,
                    used: true,
                    restoring: true,
                });
                true
            }
            Ok(Ok(None)) => false,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not restore a Legacy session from Redis");
                false
            }
            Err(_) => {
                tracing::warn!("restoring a Legacy session from Redis took too long");
                false
            }
        }
    }

    /// The record of `session` if `identity` created it and it is not past its
    /// lifetime. The owner is checked before anything else is read from it.
    async fn load_owned(
        &self,
        session: &str,
        identity: Option<&Identity>,
        limits: &SessionLimits,
    ) -> Result<Option<Record>, StoreError> {
        let key = self.binding_key().await?;
        let name = self.record_key(session);
        let hash: HashMap<String, String> = self
            .run(async |conn| redis::cmd("HGETALL").arg(&name).query_async(conn).await)
            .await?;
        // Verified even for a missing record, so both answers cost the same.
        let tag = hash
            .get(record::field::OWNER)
            .and_then(|owner| unhex(owner))
            .unwrap_or_else(|| vec![0; 32]);
        let owner = hmac::verify(key, &SessionBindings::message(identity), &tag).is_ok()
            && !hash.is_empty();
        if !owner {
            return Ok(None);
        }
        let Some(record) = Record::from_hash(hash) else {
            return Ok(None);
        };
        if let Some(max) = limits.max_lifetime
            && now_ms().saturating_sub(record.created_ms) >= ms(max)
        {
            return Ok(None);
        }
        Ok(Some(record))
    }

    /// The `initialize` params rmcp replays to rebuild an adopted session.
    fn restore_params(&self, session: &str) -> Option<InitializeRequestParams> {
        let held = self.held();
        held.get(session)
            .filter(|h| h.restoring)
            .map(|h| h.record.init.clone())
    }

    /// The state to re-apply to a session rmcp just rebuilt here (once).
    pub(crate) fn take_restored(&self, session: &str) -> Option<Record> {
        let mut held = self.held();
        let entry = held.get_mut(session).filter(|h| h.restoring)?;
        entry.restoring = false;
        Some(entry.record.clone())
    }

    /// A request of `session` arrived (the pass slides its TTL).
    pub(crate) fn touch(&self, session: &str) {
        if let Some(entry) = self.held().get_mut(session) {
            entry.used = true;
        }
    }

    /// Record a subscription (`on`) or its end, before it is acknowledged.
    pub(crate) async fn subscription(&self, session: &str, uri: &str, on: bool) {
        let field = format!("{}{uri}", record::field::SUB);
        if !self.edit(session, |r| {
            if on {
                r.subscriptions.insert(uri.to_owned())
            } else {
                r.subscriptions.remove(uri)
            }
        }) {
            return;
        }
        let name = self.record_key(session);
        let answer = self
            .run(async |conn| {
                if on {
                    redis::cmd("HSET")
                        .arg(&name)
                        .arg(&field)
                        .arg("1")
                        .exec_async(conn)
                        .await
                } else {
                    redis::cmd("HDEL")
                        .arg(&name)
                        .arg(&field)
                        .exec_async(conn)
                        .await
                }
            })
            .await;
        self.written(session, answer);
    }

    /// Record a `logging/setLevel` choice.
    pub(crate) async fn level(&self, session: &str, level: LoggingLevel) {
        if !self.edit(session, |r| r.level.replace(level) != Some(level)) {
            return;
        }
        let name = self.record_key(session);
        let answer = self
            .run(async |conn| {
                redis::cmd("HSET")
                    .arg(&name)
                    .arg(record::field::LEVEL)
                    .arg(record::level_json(level))
                    .exec_async(conn)
                    .await
            })
            .await;
        self.written(session, answer);
    }

    /// Edit the held record of `session`; whether Redis needs the change now (the
    /// record is there and the edit changed something).
    fn edit(&self, session: &str, change: impl FnOnce(&mut Record) -> bool) -> bool {
        let mut held = self.held();
        let Some(entry) = held.get_mut(session) else {
            return false;
        };
        change(&mut entry.record) && entry.persisted
    }

    /// A write of `session`'s state failed: the pass rewrites the whole record.
    fn written(&self, session: &str, answer: Result<(), StoreError>) {
        if let Err(e) = answer {
            tracing::debug!(error = %e, "a session's state waits for Redis");
            if let Some(entry) = self.held().get_mut(session) {
                entry.persisted = false;
            }
        }
    }

    /// The client deleted `session`: its record goes, and a tombstone keeps any
    /// replica from writing it back.
    pub(crate) async fn deleted(&self, session: &str) {
        self.held().remove(session);
        let mut invocation = self.delete.prepare_invoke();
        invocation
            .key(self.record_key(session))
            .key(self.store.key(&format!("session-deleted:{session}")))
            .arg(session)
            .arg(ms(TOMBSTONE))
            .arg(self.zset_prefix());
        if let Err(e) = self
            .run(async |conn| invocation.invoke_async::<i64>(conn).await)
            .await
        {
            tracing::warn!(error = %e, "a deleted Legacy session stays in Redis until its TTL");
        }
    }
}

/// `shared` as rmcp's `session_store`.
pub(crate) fn rmcp_store(
    shared: Arc<SharedSessions>,
) -> Arc<dyn rmcp::transport::streamable_http_server::session::SessionStore> {
    Arc::new(rmcp_store::RmcpStore(shared))
}

/// What the `WRITE` script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persisted {
    Written,
    Full,
    Deleted,
}
