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
use std::sync::{Arc, Mutex};

use aws_lc_rs::hmac;
use http::{HeaderValue, Request, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use vmcp_layers::Identity;

use crate::sessions::Sessions;

/// The Legacy session header.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// The caller identities of live Legacy sessions, keyed by `Mcp-Session-Id`.
pub(crate) struct SessionBindings {
    key: hmac::Key,
    bound: Mutex<HashMap<String, hmac::Tag>>,
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
    /// Another caller: treat the session as unknown.
    Stranger,
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

    fn bound(&self) -> std::sync::MutexGuard<'_, HashMap<String, hmac::Tag>> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The message hashed for `identity`: anonymous callers share one binding.
    fn message(identity: Option<&Identity>) -> Vec<u8> {
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

    /// Bind a new session to its creator.
    pub(crate) fn bind(&self, session: &str, identity: Option<&Identity>) {
        let tag = hmac::sign(&self.key, &Self::message(identity));
        self.bound().insert(session.to_owned(), tag);
    }

    /// Forget a session (deleted or expired).
    pub(crate) fn unbind(&self, session: &str) {
        self.bound().remove(session);
    }

    /// Whether `identity` may use `session`.
    pub(crate) fn verdict(&self, session: &str, identity: Option<&Identity>) -> Verdict {
        let Some(tag) = self.bound().get(session).cloned() else {
            return Verdict::Owner;
        };
        match hmac::verify(&self.key, &Self::message(identity), tag.as_ref()) {
            Ok(()) => Verdict::Owner,
            Err(_) => Verdict::Stranger,
        }
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

/// How often sessions rmcp has expired are looked for.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Forget the bindings and listeners of sessions rmcp no longer has (idle expiry),
/// until `stop` or until the service is gone.
pub(crate) async fn sweep(
    manager: std::sync::Weak<LocalSessionManager>,
    bindings: std::sync::Weak<SessionBindings>,
    sessions: std::sync::Weak<Sessions>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (Some(manager), Some(bindings)) = (manager.upgrade(), bindings.upgrade()) else {
            return;
        };
        let live: std::collections::HashSet<String> = manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        // Only this service's sessions: another mount of the same gateway has its own.
        let gone = bindings.retain(|session| live.contains(session));
        if let Some(sessions) = sessions.upgrade() {
            for session in gone {
                sessions.remove_legacy(&session);
            }
        }
    }
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

    #[test]
    fn only_the_creator_matches() {
        let bindings = SessionBindings::new();
        let alice = who("https://idp", "alice");
        bindings.bind("s1", Some(&alice));
        assert_eq!(bindings.verdict("s1", Some(&alice)), Verdict::Owner);
        // Same subject from another issuer, another subject, and anonymous.
        for other in [who("https://other", "alice"), who("https://idp", "bob")] {
            assert_eq!(bindings.verdict("s1", Some(&other)), Verdict::Stranger);
        }
        assert_eq!(bindings.verdict("s1", None), Verdict::Stranger);
        // Issuer "a\0" + subject "b" must not collide with "a" + "\0b".
        bindings.bind("s2", Some(&who("a\0", "b")));
        assert_eq!(
            bindings.verdict("s2", Some(&who("a", "\0b"))),
            Verdict::Stranger
        );
    }

    #[test]
    fn anonymous_sessions_refuse_a_token() {
        let bindings = SessionBindings::new();
        bindings.bind("anon", Some(&Identity::anonymous()));
        assert_eq!(bindings.verdict("anon", None), Verdict::Owner);
        assert_eq!(
            bindings.verdict("anon", Some(&Identity::anonymous())),
            Verdict::Owner
        );
        assert_eq!(
            bindings.verdict("anon", Some(&who("https://idp", "alice"))),
            Verdict::Stranger
        );
        bindings.unbind("anon");
        assert_eq!(bindings.len(), 0);
    }
}
