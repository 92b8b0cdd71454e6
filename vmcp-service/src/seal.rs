//! Sealed state: bytes the gateway hands to a client and must take back unchanged.
//!
//! A 2026-07-28 `input_required` answer carries a `requestState` the client returns
//! on its retry. When the gateway is the one that needs that state (a parked Legacy
//! backend call, a composite workflow waiting for an answer), the client must not be
//! able to read it, forge it, replay it after it expired, or hand it to another
//! caller. So it is sealed: AES-256-GCM under a per-process random key, with the
//! expiry inside the ciphertext and the purpose and the caller bound as associated
//! data. Every way of failing to open is one error to the client (`-32602`); the
//! variants exist for logs and tests.
//!
//! The key lives in memory only: state sealed by one process does not open in
//! another, so a retry must reach the replica that sealed it (docs/forwarding.md).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Tokens longer than this are refused before decoding (a sealed state is small).
const MAX_TOKEN_LEN: usize = 64 * 1024;
/// Version tag bound into the associated data, so a future format cannot be confused.
const VERSION: &[u8] = b"vmcp-seal-v1";

/// Why a sealed token did not open. A client sees the same `-32602` for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SealError {
    /// Not base64url, too short or too long.
    #[error("the state is malformed")]
    Malformed,
    /// Authentication failed: forged, altered, sealed by another process, for another
    /// purpose or for another caller (AES-GCM cannot tell these apart, by design).
    #[error("the state was not sealed by this gateway for this caller")]
    Forged,
    /// Genuine, but past its expiry.
    #[error("the state has expired")]
    Expired,
}

/// Seals and opens state with one per-process key. Cheap to share behind an `Arc`.
pub(crate) struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Default for Sealer {
    fn default() -> Self {
        Self::new()
    }
}

impl Sealer {
    /// A sealer with a fresh random key.
    pub(crate) fn new() -> Self {
        let rng = SystemRandom::new();
        let mut key = [0u8; 32];
        rng.fill(&mut key)
            .expect("the system random generator is available");
        Self::with_key(&key, rng)
    }

    fn with_key(key: &[u8; 32], rng: SystemRandom) -> Self {
        let key = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key fits AES-256-GCM");
        Self {
            key: LessSafeKey::new(key),
            rng,
        }
    }

    /// Seal `payload` for `caller` (any stable bytes naming the caller, e.g. its
    /// issuer and subject) and `purpose` (which kind of state this is), valid for
    /// `ttl`. The result is URL-safe base64 without padding.
    pub(crate) fn seal(
        &self,
        purpose: &str,
        caller: &[u8],
        ttl: Duration,
        payload: &[u8],
    ) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .expect("the system random generator is available");
        let expires = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut buffer = Vec::with_capacity(NONCE_LEN + 8 + payload.len() + 16);
        buffer.extend_from_slice(&nonce);
        buffer.extend_from_slice(&expires.to_be_bytes());
        buffer.extend_from_slice(payload);
        let mut body = buffer.split_off(NONCE_LEN);
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(purpose, caller)),
                &mut body,
            )
            .expect("sealing a bounded buffer cannot fail");
        buffer.extend_from_slice(&body);
        URL_SAFE_NO_PAD.encode(buffer)
    }

    /// Open a token made by [`Sealer::seal`] with the same `purpose` and `caller`.
    pub(crate) fn open(
        &self,
        purpose: &str,
        caller: &[u8],
        token: &str,
    ) -> Result<Vec<u8>, SealError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(SealError::Malformed);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| SealError::Malformed)?;
        if raw.len() < NONCE_LEN + 8 + AES_256_GCM.tag_len() {
            return Err(SealError::Malformed);
        }
        let (nonce, body) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad(purpose, caller)), &mut body)
            .map_err(|_| SealError::Forged)?;
        let (expires, payload) = plain.split_at(8);
        let expires = u64::from_be_bytes(expires.try_into().map_err(|_| SealError::Malformed)?);
        if now_ms() >= expires {
            return Err(SealError::Expired);
        }
        Ok(payload.to_vec())
    }
}

/// The caller bytes a state is sealed for: an authenticated caller's whole identity
/// (whether it has an issuer, the issuer, the subject; length-prefixed, so no split
/// collides with another), one marker for every anonymous caller. An authenticated
/// caller is never sealed as the anonymous one, with or without an issuer.
pub(crate) fn caller_of(identity: Option<&vmcp_layers::Identity>) -> Vec<u8> {
    let Some(identity) = identity.filter(|i| !i.is_anonymous()) else {
        return b"a".to_vec();
    };
    let mut bytes = vec![b't'];
    match &identity.issuer {
        Some(issuer) => {
            bytes.push(1);
            bytes.extend_from_slice(
                &u32::try_from(issuer.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            bytes.extend_from_slice(issuer.as_bytes());
        }
        None => bytes.push(0),
    }
    bytes.extend_from_slice(identity.subject.as_bytes());
    bytes
}

/// Version, purpose and caller, each length-prefixed so no two pairs collide.
fn aad(purpose: &str, caller: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(VERSION.len() + purpose.len() + caller.len() + 8);
    aad.extend_from_slice(VERSION);
    for part in [purpose.as_bytes(), caller] {
        aad.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        aad.extend_from_slice(part);
    }
    aad
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn round_trip_for_the_same_purpose_and_caller() {
        let sealer = Sealer::new();
        let token = sealer.seal("park", b"iss\0alice", MINUTE, b"{\"id\":7}");
        assert_eq!(
            sealer.open("park", b"iss\0alice", &token).unwrap(),
            b"{\"id\":7}"
        );
        // The payload is not readable in the token.
        assert!(!token.contains("id"));
    }

    #[test]
    fn another_caller_purpose_or_process_cannot_open_it() {
        let sealer = Sealer::new();
        let token = sealer.seal("park", b"iss\0alice", MINUTE, b"state");
        assert_eq!(
            sealer.open("park", b"iss\0bob", &token),
            Err(SealError::Forged)
        );
        assert_eq!(
            sealer.open("workflow", b"iss\0alice", &token),
            Err(SealError::Forged)
        );
        assert_eq!(
            Sealer::new().open("park", b"iss\0alice", &token),
            Err(SealError::Forged)
        );
    }

    #[test]
    fn altered_tokens_are_refused() {
        let sealer = Sealer::new();
        let token = sealer.seal("park", b"c", MINUTE, b"state");
        let mut raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 1;
            let altered = URL_SAFE_NO_PAD.encode(&raw);
            assert_eq!(
                sealer.open("park", b"c", &altered),
                Err(SealError::Forged),
                "byte {i}"
            );
            raw[i] ^= 1;
        }
        assert_eq!(
            sealer.open("park", b"c", "not base64!"),
            Err(SealError::Malformed)
        );
        assert_eq!(sealer.open("park", b"c", "AAAA"), Err(SealError::Malformed));
        assert_eq!(
            sealer.open("park", b"c", &"A".repeat(MAX_TOKEN_LEN + 1)),
            Err(SealError::Malformed)
        );
    }

    #[test]
    fn every_authenticated_caller_is_its_own() {
        use vmcp_layers::Identity;
        let who = |issuer: Option<&str>, subject: &str| {
            let mut identity = Identity::anonymous();
            identity.issuer = issuer.map(str::to_owned);
            identity.subject = subject.to_owned();
            caller_of(Some(&identity))
        };
        let callers = [
            who(Some("https://idp"), "alice"),
            who(Some("https://idp"), "bob"),
            who(Some("https://other"), "alice"),
            who(Some("https://idpa"), "lice"),
            who(Some(""), "anonymous"),
            // Authenticated without an issuer (an embedder's own layer): still not
            // the anonymous marker, and not another issuer's subject.
            who(None, "alice"),
            who(None, "bob"),
            who(Some(""), "alice"),
            caller_of(None),
        ];
        for (i, a) in callers.iter().enumerate() {
            for b in &callers[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(caller_of(Some(&Identity::anonymous())), caller_of(None));
    }

    #[test]
    fn expired_tokens_are_refused() {
        let sealer = Sealer::new();
        let token = sealer.seal("park", b"c", Duration::ZERO, b"state");
        assert_eq!(sealer.open("park", b"c", &token), Err(SealError::Expired));
    }
}
