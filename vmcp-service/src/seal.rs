//! Sealed state: bytes the gateway hands to a client and must take back unchanged.
//!
//! A 2026-07-28 `input_required` answer carries a `requestState` the client returns
//! on its retry. When the gateway is the one that needs that state (a parked Legacy
//! backend call, a composite workflow waiting for an answer), the client must not be
//! able to read it, forge it, replay it after it expired, or hand it to another
//! caller. So it is sealed: AES-256-GCM, with the expiry inside the ciphertext and
//! the format, the key's id, the purpose and the caller bound as associated data.
//! Every way of failing to open is one error to the client (`-32602`); the variants
//! exist for logs and tests.
//!
//! The key is the configured `sealing` key, which every replica shares, or without
//! one a random key per process (a state then opens only in the process that sealed
//! it). A token (`vmcp-seal-v2`) names its key by an id derived from the key, so the
//! previous keys of a rotation still open what they sealed, and a token of a key no
//! longer configured is refused as such.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::config::SealingKeys;

/// Tokens longer than this are refused before decoding (a sealed state is small).
const MAX_TOKEN_LEN: usize = 64 * 1024;
/// Version tag bound into the associated data, so another format cannot be confused.
const VERSION: &[u8] = b"vmcp-seal-v2";
/// The first byte of every v2 token.
const FORMAT: u8 = 2;
/// Bytes of a key's id.
const KEY_ID_LEN: usize = 8;
/// Format byte, key id, nonce, expiry, tag: the shortest token.
const MIN_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN + 8 + 16;

/// Why a sealed token did not open. A client sees the same `-32602` for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SealError {
    /// Not base64url, too short or too long, or not a v2 token.
    #[error("the state is malformed")]
    Malformed,
    /// Sealed with a key this gateway does not hold (removed by a rotation, another
    /// deployment's, or another process's random key).
    #[error("the state was sealed with a key this gateway does not hold")]
    UnknownKey,
    /// Authentication failed: forged, altered, for another purpose or for another
    /// caller (AES-GCM cannot tell these apart, by design).
    #[error("the state was not sealed by this gateway for this caller")]
    Forged,
    /// Genuine, but past its expiry.
    #[error("the state has expired")]
    Expired,
}

/// One AES-256-GCM key and its id.
struct Key {
    id: [u8; KEY_ID_LEN],
    key: LessSafeKey,
}

impl Key {
    /// The key for configured `secret`: the AES key and its id are two SHA-256
    /// digests of it under different labels, so the id says nothing of the key.
    fn derive(secret: &[u8]) -> Self {
        let labelled = |label: &[u8]| {
            let mut input = label.to_vec();
            input.extend_from_slice(secret);
            digest(&SHA256, &input)
        };
        let aes = labelled(b"vmcp-seal-key\0");
        let id = labelled(b"vmcp-seal-key-id\0");
        let mut key_id = [0u8; KEY_ID_LEN];
        key_id.copy_from_slice(&id.as_ref()[..KEY_ID_LEN]);
        Self::new(key_id, aes.as_ref())
    }

    fn new(id: [u8; KEY_ID_LEN], key: &[u8]) -> Self {
        let key = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key fits AES-256-GCM");
        Self {
            id,
            key: LessSafeKey::new(key),
        }
    }
}

/// Seals with one key and opens with it or a previous one. Cheap to share behind an
/// `Arc`.
pub(crate) struct Sealer {
    current: Key,
    previous: Vec<Key>,
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
    /// A sealer with a fresh random key (and a random id).
    pub(crate) fn new() -> Self {
        let rng = SystemRandom::new();
        let mut key = [0u8; 32];
        let mut id = [0u8; KEY_ID_LEN];
        rng.fill(&mut key)
            .expect("the system random generator is available");
        rng.fill(&mut id)
            .expect("the system random generator is available");
        Self {
            current: Key::new(id, &key),
            previous: Vec::new(),
            rng,
        }
    }

    /// A sealer with the configured keys (`sealing`).
    pub(crate) fn with_keys(keys: &SealingKeys) -> Self {
        Self {
            current: Key::derive(&keys.current),
            previous: keys.previous.iter().map(|k| Key::derive(k)).collect(),
            rng: SystemRandom::new(),
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
        let key = &self.current;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .expect("the system random generator is available");
        let expires = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut body = Vec::with_capacity(8 + payload.len() + 16);
        body.extend_from_slice(&expires.to_be_bytes());
        body.extend_from_slice(payload);
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(&key.id, purpose, caller)),
                &mut body,
            )
            .expect("sealing a bounded buffer cannot fail");
        let mut token = Vec::with_capacity(1 + KEY_ID_LEN + NONCE_LEN + body.len());
        token.push(FORMAT);
        token.extend_from_slice(&key.id);
        token.extend_from_slice(&nonce);
        token.extend_from_slice(&body);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// Open a token made by [`Sealer::seal`] with the same `purpose` and `caller`,
    /// under the current key or a previous one.
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
        if raw.len() < MIN_LEN || raw[0] != FORMAT {
            return Err(SealError::Malformed);
        }
        let (id, rest) = raw[1..].split_at(KEY_ID_LEN);
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
            .ok_or(SealError::UnknownKey)?;
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut body = body.to_vec();
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(aad(&key.id, purpose, caller)), &mut body)
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

/// Version, key id, purpose and caller, the last two length-prefixed so no two
/// pairs collide.
fn aad(id: &[u8; KEY_ID_LEN], purpose: &str, caller: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(VERSION.len() + KEY_ID_LEN + purpose.len() + caller.len() + 8);
    aad.extend_from_slice(VERSION);
    aad.extend_from_slice(id);
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
        // The payload is not readable in the token: its eight bytes appear
        // nowhere in the decoded token (by chance: about 2^-60).
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        assert!(!raw.windows(8).any(|w| w == b"{\"id\":7}"));
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
            Err(SealError::UnknownKey)
        );
    }

    fn keys(current: &str, previous: &[&str]) -> SealingKeys {
        SealingKeys {
            current: current.as_bytes().to_vec(),
            previous: previous.iter().map(|k| k.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn replicas_with_one_configured_key_open_each_others_tokens() {
        let a = Sealer::with_keys(&keys("k1-0123456789abcdef0123456789abcdef", &[]));
        let b = Sealer::with_keys(&keys("k1-0123456789abcdef0123456789abcdef", &[]));
        let token = a.seal("park", b"c", MINUTE, b"state");
        assert_eq!(b.open("park", b"c", &token).unwrap(), b"state");
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        assert_eq!(raw[0], FORMAT);
        // The id is derived, not the key: the key's bytes are not in the token.
        assert!(!raw.windows(8).any(|w| w == b"k1-01234"));
        // Another key opens nothing, and says which failure it is.
        let other = Sealer::with_keys(&keys("k2-0123456789abcdef0123456789abcdef", &[]));
        assert_eq!(other.open("park", b"c", &token), Err(SealError::UnknownKey));
    }

    #[test]
    fn a_rotation_opens_the_previous_keys_tokens_until_the_key_is_removed() {
        let (old, new) = (
            "old-0123456789abcdef0123456789abcdef",
            "new-0123456789abcdef0123456789abcdef",
        );
        let before = Sealer::with_keys(&keys(old, &[]));
        let during = Sealer::with_keys(&keys(new, &[old]));
        let after = Sealer::with_keys(&keys(new, &[]));
        let sealed_old = before.seal("park", b"c", MINUTE, b"old");
        let sealed_new = during.seal("park", b"c", MINUTE, b"new");
        assert_eq!(during.open("park", b"c", &sealed_old).unwrap(), b"old");
        // During the rotation new tokens are sealed with the new key only.
        assert_eq!(
            before.open("park", b"c", &sealed_new),
            Err(SealError::UnknownKey)
        );
        assert_eq!(after.open("park", b"c", &sealed_new).unwrap(), b"new");
        assert_eq!(
            after.open("park", b"c", &sealed_old),
            Err(SealError::UnknownKey)
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
            // The format byte and the key id select the key; every other byte is
            // authenticated.
            let expected = match i {
                0 => SealError::Malformed,
                1..=KEY_ID_LEN => SealError::UnknownKey,
                _ => SealError::Forged,
            };
            assert_eq!(
                sealer.open("park", b"c", &altered),
                Err(expected),
                "byte {i}"
            );
            raw[i] ^= 1;
        }
        assert_eq!(
            sealer.open("park", b"c", "not base64!"),
            Err(SealError::Malformed)
        );
        assert_eq!(sealer.open("park", b"c", "AAAA"), Err(SealError::Malformed));
        // A v1 token (no format byte, no key id) is not read as v2.
        raw[0] = 1;
        assert_eq!(
            sealer.open("park", b"c", &URL_SAFE_NO_PAD.encode(&raw)),
            Err(SealError::Malformed)
        );
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
