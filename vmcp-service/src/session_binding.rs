//! Legacy sessions bound to the caller that created them.
//!
//! A 2025-11-25 `Mcp-Session-Id` is a bearer secret: whoever holds it can post to
//! the session, take over its GET stream (and the answers parked for it), or
//! DELETE it. So at `initialize` the caller's identity is recorded, as an HMAC
//! (random per-process key) of `issuer \0 subject` rather than in plaintext, and
//! every later request carrying the id (POST, GET, DELETE) must present the same
//! identity, compared in constant time. A refreshed token of the same subject
//! matches; a token presented on an anonymous session does not (no upgrade).
//!
//! A mismatch is not answered here: the request goes on to rmcp with a session id
//! that cannot exist, so the caller gets exactly rmcp's unknown-session answer and
//! cannot tell "not yours" from "no such session".

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use http::{HeaderValue, Request, Response};
use vmcp_layers::Identity;

use crate::config::SessionLimits;

/// The Legacy session header.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// A busy session with only calls in flight frees up when they end: retry soon.
const RETRY_AFTER_CALLS: Duration = Duration::from_secs(1);
/// One with an open GET stream frees up when its client closes it, which nothing
/// here can predict: check back in a minute (or at its end of life, if sooner).
const RETRY_AFTER_STREAM: Duration = Duration::from_secs(60);

/// Who a session counts against for the per-caller caps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Caller {
    /// An authenticated caller, by the HMAC of its issuer and subject.
    Identity(Vec<u8>),
    /// Anonymous callers from one address (an IPv6 address: its /64).
    Address(IpAddr),
    /// Anonymous callers whose address the server did not give (no `ConnectInfo`).
    Anonymous,
}

impl Caller {
    /// `identity` keyed by `key` (bytes unique to its issuer and subject), or, when
    /// anonymous, by `address`.
    pub(crate) fn of(
        identity: Option<&Identity>,
        key: impl FnOnce() -> Vec<u8>,
        address: Option<IpAddr>,
    ) -> Self {
        match identity.filter(|i| !i.is_anonymous()) {
            Some(_) => Self::Identity(key()),
            None => Self::anonymous_at(address),
        }
    }

    fn anonymous_at(address: Option<IpAddr>) -> Self {
        match address {
            None => Self::Anonymous,
            Some(IpAddr::V4(v4)) => Self::Address(IpAddr::V4(v4)),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Address(IpAddr::V4(v4)),
                // One host usually holds a whole /64.
                None => Self::Address(IpAddr::V6(std::net::Ipv6Addr::from(
                    u128::from(v6) & !((1u128 << 64) - 1),
                ))),
            },
        }
    }
}

/// The per-caller caps of one kind of resource: per identity, per address.
pub(crate) trait PerCaller {
    /// The cap for an authenticated caller.
    fn per_identity(&self) -> usize;
    /// The cap for anonymous callers from one address.
    fn per_address(&self) -> usize;
    /// The cap that applies to `caller`.
    fn per_caller(&self, caller: &Caller) -> usize {
        match caller {
            Caller::Identity(_) => self.per_identity(),
            Caller::Address(_) | Caller::Anonymous => self.per_address(),
        }
    }
}

impl PerCaller for SessionLimits {
    fn per_identity(&self) -> usize {
        self.max_per_identity
    }
    fn per_address(&self) -> usize {
        self.max_per_address
    }
}

impl PerCaller for crate::config::ListenLimits {
    fn per_identity(&self) -> usize {
        self.max_per_identity
    }
    fn per_address(&self) -> usize {
        self.max_per_address
    }
}

impl PerCaller for crate::config::ParkedLimits {
    fn per_identity(&self) -> usize {
        self.max_per_identity
    }
    fn per_address(&self) -> usize {
        self.max_per_address
    }
}

/// What binding a new session decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Bound; `evicted` is an idle session chosen to close to make room.
    Bound { evicted: Option<String> },
    /// Over a cap with no idle session to close: answer 503, retry after this.
    Full { retry_after: Duration },
}

/// One live Legacy session: who created it, and what its lifetime policy needs.
struct Entry {
    tag: hmac::Tag,
    /// Whom it counts against for the per-caller caps.
    caller: Caller,
    created: Instant,
    /// The start or end of its latest request (the sliding idle TTL counts from here).
    last_seen: Instant,
    /// POST responses still streaming: a call in flight keeps the session.
    calls: u32,
    /// Open GET streams: a client listening is not idle.
    streams: u32,
    /// Chosen for closing: takes no new requests.
    closing: bool,
}

impl Entry {
    /// A session bound at `now`, with nothing in flight.
    fn new(tag: hmac::Tag, caller: Caller, now: Instant) -> Self {
        Self {
            tag,
            caller,
            created: now,
            last_seen: now,
            calls: 0,
            streams: 0,
            closing: false,
        }
    }

    /// Whether `limits` retire this session at `now` (and it may be closed now).
    fn expired(&self, limits: &SessionLimits, now: Instant) -> bool {
        let idle = self.calls == 0
            && self.streams == 0
            && now.saturating_duration_since(self.last_seen) >= limits.ttl;
        idle || (self.calls == 0 && self.too_old(limits, now))
    }

    fn too_old(&self, limits: &SessionLimits, now: Instant) -> bool {
        limits
            .max_lifetime
            .is_some_and(|max| now.saturating_duration_since(self.created) >= max)
    }

    fn idle(&self) -> bool {
        self.calls == 0 && self.streams == 0
    }

    /// How soon this busy session could be closed to make room (see the consts).
    fn frees_in(&self, limits: &SessionLimits, now: Instant) -> Duration {
        let by_use = if self.streams == 0 {
            RETRY_AFTER_CALLS
        } else {
            RETRY_AFTER_STREAM
        };
        limits.max_lifetime.map_or(by_use, |max| {
            (self.created + max)
                .saturating_duration_since(now)
                .min(by_use)
        })
    }
}

/// The caller identities and lifetimes of live Legacy sessions, keyed by
/// `Mcp-Session-Id`.
pub(crate) struct SessionBindings {
    key: hmac::Key,
    bound: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for SessionBindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBindings")
            .field("sessions", &self.len())
            .finish_non_exhaustive()
    }
}

/// What a request carrying a session id is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its caller created the session (or the session is unknown here: rmcp answers).
    Owner,
    /// Another caller, or a session past its lifetime: treat the session as unknown.
    Stranger,
}

/// What a request holds on its session while its response is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// A POST: a call in flight.
    Call,
    /// A GET stream: a client listening.
    Stream,
    /// Anything else (DELETE): refreshes the idle clock only.
    Touch,
}

/// Held while a request's response is open; releases its use of the session and
/// restarts the idle clock when dropped.
pub(crate) struct InUse {
    bindings: Arc<SessionBindings>,
    session: String,
    kind: Use,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut bound = self.bindings.bound();
        if let Some(entry) = bound.get_mut(&self.session) {
            match self.kind {
                Use::Call => entry.calls = entry.calls.saturating_sub(1),
                Use::Stream => entry.streams = entry.streams.saturating_sub(1),
                Use::Touch => {}
            }
            entry.last_seen = Instant::now();
        }
    }
}

impl SessionBindings {
    /// A fresh binding table with a random key.
    pub(crate) fn new() -> Self {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, uuid_bytes().as_slice()));
        Self {
            key,
            bound: Mutex::new(HashMap::new()),
        }
    }

    fn bound(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The message hashed for `identity`: anonymous callers share one binding.
    pub(crate) fn message(identity: Option<&Identity>) -> Vec<u8> {
        match identity.filter(|i| !i.is_anonymous()) {
            None => b"\x01anonymous".to_vec(),
            Some(identity) => {
                // Length-prefixed rather than `iss\0sub`, so no pair of strings can
                // collide with another.
                let issuer = identity.issuer.as_deref().unwrap_or_default();
                let mut message = Vec::with_capacity(issuer.len() + identity.subject.len() + 9);
                message.push(0);
                message.extend_from_slice(&(issuer.len() as u64).to_be_bytes());
                message.extend_from_slice(issuer.as_bytes());
                message.extend_from_slice(identity.subject.as_bytes());
                message
            }
        }
    }

    /// Whom `identity` (anonymous: at `address`) counts against for the per-caller
    /// caps: of Legacy sessions, and of Modern listen streams.
    pub(crate) fn caller(&self, identity: Option<&Identity>, address: Option<IpAddr>) -> Caller {
        let tag = hmac::sign(&self.key, &Self::message(identity));
        self.caller_of(&tag, identity, address)
    }

    fn caller_of(
        &self,
        tag: &hmac::Tag,
        identity: Option<&Identity>,
        address: Option<IpAddr>,
    ) -> Caller {
        Caller::of(identity, || tag.as_ref().to_vec(), address)
    }

    /// Bind a new session to its creator (anonymous: to `address`), within the caps
    /// of `limits`. Over the caller's own cap, its least recently used idle session
    /// makes room; over the total, that of the caller holding the most sessions (the
    /// caller's own if no one holds more than it). The session chosen is marked
    /// closing (the caller closes it); with no idle one to choose, `Full`.
    pub(crate) fn bind(
        &self,
        session: &str,
        identity: Option<&Identity>,
        address: Option<IpAddr>,
        limits: &SessionLimits,
    ) -> Admit {
        let tag = hmac::sign(&self.key, &Self::message(identity));
        let caller = self.caller_of(&tag, identity, address);
        let cap = limits.per_caller(&caller);
        let now = Instant::now();
        let mut bound = self.bound();
        let victim = {
            let live = || bound.values().filter(|e| !e.closing);
            let mut counts: HashMap<&Caller, usize> = HashMap::new();
            for entry in live() {
                *counts.entry(&entry.caller).or_default() += 1;
            }
            let mine = counts.get(&caller).copied().unwrap_or(0);
            let total: usize = counts.values().sum();
            let count = |c: &Caller| counts.get(c).copied().unwrap_or(0);
            // Over its own cap only its own sessions; at the total cap also those of
            // callers holding more than it.
            let own_only = mine >= cap;
            let eligible = |e: &Entry| e.caller == caller || (!own_only && count(&e.caller) > mine);
            match own_only || total >= limits.max_sessions {
                false => None,
                true => {
                    let chosen = bound
                        .iter()
                        .filter(|(_, e)| !e.closing && e.idle() && eligible(e))
                        .max_by_key(|(_, e)| (count(&e.caller), std::cmp::Reverse(e.last_seen)))
                        .map(|(id, _)| id.clone());
                    match chosen {
                        Some(id) => Some(id),
                        None => {
                            let retry_after = live()
                                .filter(|e| eligible(e))
                                .map(|e| e.frees_in(limits, now))
                                .min()
                                .unwrap_or(RETRY_AFTER_CALLS);
                            return Admit::Full { retry_after };
                        }
                    }
                }
            }
        };
        if let Some(entry) = victim.as_ref().and_then(|id| bound.get_mut(id)) {
            entry.closing = true;
        }
        bound.insert(session.to_owned(), Entry::new(tag, caller, now));
        Admit::Bound { evicted: victim }
    }

    /// Bind a session another replica created, restored here after its record's
    /// owner matched `identity` (the caps were counted where it was created).
    pub(crate) fn adopt(&self, session: &str, identity: Option<&Identity>) {
        let tag = hmac::sign(&self.key, &Self::message(identity));
        let caller = self.caller_of(&tag, identity, None);
        let now = Instant::now();
        self.bound()
            .entry(session.to_owned())
            .or_insert(Entry::new(tag, caller, now));
    }

    /// Forget a session (deleted or expired).
    pub(crate) fn unbind(&self, session: &str) {
        self.bound().remove(session);
    }

    /// Whether `identity` may use `session` now. An owner's request past the
    /// session's lifetime is a stranger's too: the session is as good as gone.
    pub(crate) fn verdict(
        &self,
        session: &str,
        identity: Option<&Identity>,
        limits: &SessionLimits,
    ) -> Verdict {
        let (tag, retired) = {
            let bound = self.bound();
            let Some(entry) = bound.get(session) else {
                return Verdict::Owner;
            };
            let now = Instant::now();
            let retired = entry.closing || entry.expired(limits, now) || entry.too_old(limits, now);
            (entry.tag, retired)
        };
        // Verify even when retired, so both answers cost the same.
        let owner = hmac::verify(&self.key, &Self::message(identity), tag.as_ref()).is_ok();
        if owner && !retired {
            Verdict::Owner
        } else {
            Verdict::Stranger
        }
    }

    /// Record the start of an owner's request on `session`; the guard ends it.
    pub(crate) fn enter(self: &Arc<Self>, session: &str, kind: Use) -> Option<InUse> {
        let mut bound = self.bound();
        let entry = bound.get_mut(session)?;
        match kind {
            Use::Call => entry.calls += 1,
            Use::Stream => entry.streams += 1,
            Use::Touch => {}
        }
        entry.last_seen = Instant::now();
        Some(InUse {
            bindings: self.clone(),
            session: session.to_owned(),
            kind,
        })
    }

    /// Mark the sessions `limits` retire now as closing; their ids.
    pub(crate) fn retire(&self, limits: &SessionLimits) -> Vec<String> {
        let now = Instant::now();
        let mut bound = self.bound();
        bound
            .iter_mut()
            .filter(|(_, entry)| !entry.closing && entry.expired(limits, now))
            .map(|(session, entry)| {
                entry.closing = true;
                session.clone()
            })
            .collect()
    }

    /// Drop the bindings of sessions for which `alive` is false; the dropped ids.
    pub(crate) fn retain(&self, mut alive: impl FnMut(&str) -> bool) -> Vec<String> {
        let mut gone = Vec::new();
        self.bound().retain(|session, _| {
            let keep = alive(session);
            if !keep {
                gone.push(session.clone());
            }
            keep
        });
        gone
    }

    /// Whether `session` is bound here.
    pub(crate) fn contains(&self, session: &str) -> bool {
        self.bound().contains_key(session)
    }

    /// Number of bound sessions.
    pub(crate) fn len(&self) -> usize {
        self.bound().len()
    }
}

fn uuid_bytes() -> Vec<u8> {
    let mut bytes = uuid::Uuid::new_v4().as_bytes().to_vec();
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes
}

/// The session id a request carries, if any.
pub(crate) fn session_of<B>(req: &Request<B>) -> Option<String> {
    req.headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The session id a response created, if any.
pub(crate) fn created_by<B>(response: &Response<B>) -> Option<String> {
    response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Point the request at a session that cannot exist, so rmcp answers it exactly as
/// it answers any unknown session.
pub(crate) fn redirect_to_nowhere<B>(req: &mut Request<B>) {
    let nowhere = format!("vmcp-unbound-{}", uuid::Uuid::new_v4());
    if let Ok(value) = HeaderValue::from_str(&nowhere) {
        req.headers_mut().insert(SESSION_HEADER, value);
    }
}

/// The caller's identity, as the auth layer inserted it.
pub(crate) fn identity_of<B>(req: &Request<B>) -> Option<Arc<Identity>> {
    req.extensions().get::<Arc<Identity>>().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(issuer: &str, subject: &str) -> Identity {
        Identity {
            subject: subject.to_owned(),
            issuer: Some(issuer.to_owned()),
            ..Identity::default()
        }
    }

    fn limits() -> SessionLimits {
        SessionLimits::default()
    }

    fn bind(bindings: &SessionBindings, session: &str, identity: Option<&Identity>) {
        let admit = bindings.bind(session, identity, None, &limits());
        assert_eq!(admit, Admit::Bound { evicted: None });
    }

    fn caps(total: usize, per_caller: usize) -> SessionLimits {
        SessionLimits {
            max_sessions: total,
            max_per_identity: per_caller,
            max_per_address: per_caller,
            ..SessionLimits::default()
        }
    }

    #[test]
    fn over_a_cap_the_heaviest_callers_idle_session_makes_room() {
        let bindings = Arc::new(SessionBindings::new());
        let (a, b) = (
            Some("10.0.0.1".parse().unwrap()),
            Some("10.0.0.2".parse().unwrap()),
        );
        let limits = caps(4, 3);
        for id in ["a1", "a2", "a3"] {
            assert_eq!(
                bindings.bind(id, None, a, &limits),
                Admit::Bound { evicted: None }
            );
        }
        // Over its own cap: its least recently used idle session goes.
        let _busy = bindings.enter("a1", Use::Call);
        assert_eq!(
            bindings.bind("a4", None, a, &limits),
            Admit::Bound {
                evicted: Some("a2".into())
            }
        );
        assert_eq!(
            bindings.verdict("a2", None, &limits),
            Verdict::Stranger,
            "closing"
        );
        bindings.unbind("a2");
        // Another caller at the total cap: the heavier caller's idle session goes.
        assert_eq!(
            bindings.bind("b1", None, b, &limits),
            Admit::Bound { evicted: None }
        );
        assert_eq!(
            bindings.bind("b2", None, b, &limits),
            Admit::Bound {
                evicted: Some("a3".into())
            }
        );
        bindings.unbind("a3");
        // Equal holders (a: a1, a4; b: b1, b2): b takes from itself, not from a.
        assert_eq!(
            bindings.bind("b3", None, b, &limits),
            Admit::Bound {
                evicted: Some("b1".into())
            }
        );
        bindings.unbind("b1");
        // All of a caller's sessions busy: 503, retry when a call ends.
        let _s1 = bindings.enter("a4", Use::Stream);
        let _s2 = bindings.enter("b2", Use::Stream);
        let _s3 = bindings.enter("b3", Use::Call);
        assert_eq!(
            bindings.bind("b4", None, b, &limits),
            Admit::Full {
                retry_after: RETRY_AFTER_CALLS
            }
        );
        // Authenticated callers are counted by identity, wherever they come from.
        let alice = who("https://idp", "alice");
        let limits = caps(100, 1);
        assert_eq!(
            bindings.bind("x1", Some(&alice), a, &limits),
            Admit::Bound { evicted: None }
        );
        assert_eq!(
            bindings.bind("x2", Some(&alice), b, &limits),
            Admit::Bound {
                evicted: Some("x1".into())
            }
        );
    }

    #[test]
    fn only_the_creator_matches() {
        let bindings = SessionBindings::new();
        let limits = &limits();
        let alice = who("https://idp", "alice");
        bind(&bindings, "s1", Some(&alice));
        assert_eq!(bindings.verdict("s1", Some(&alice), limits), Verdict::Owner);
        // Same subject from another issuer, another subject, and anonymous.
        for other in [who("https://other", "alice"), who("https://idp", "bob")] {
            assert_eq!(
                bindings.verdict("s1", Some(&other), limits),
                Verdict::Stranger
            );
        }
        assert_eq!(bindings.verdict("s1", None, limits), Verdict::Stranger);
        // Issuer "a\0" + subject "b" must not collide with "a" + "\0b".
        bind(&bindings, "s2", Some(&who("a\0", "b")));
        assert_eq!(
            bindings.verdict("s2", Some(&who("a", "\0b")), limits),
            Verdict::Stranger
        );
    }

    #[test]
    fn anonymous_sessions_refuse_a_token() {
        let bindings = SessionBindings::new();
        let limits = &limits();
        bind(&bindings, "anon", Some(&Identity::anonymous()));
        assert_eq!(bindings.verdict("anon", None, limits), Verdict::Owner);
        assert_eq!(
            bindings.verdict("anon", Some(&Identity::anonymous()), limits),
            Verdict::Owner
        );
        assert_eq!(
            bindings.verdict("anon", Some(&who("https://idp", "alice")), limits),
            Verdict::Stranger
        );
        bindings.unbind("anon");
        assert_eq!(bindings.len(), 0);
    }
}
