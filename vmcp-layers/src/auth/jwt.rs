//! JWT bearer validation against an OIDC issuer's JWKS.
//!
//! - Keys come from `jwksUrl`, or from the issuer's
//!   `/.well-known/openid-configuration` (`jwks_uri`, with the document's `issuer`
//!   checked against the configured one).
//! - The key set is cached; a token with an unknown `kid` triggers one refetch (at
//!   most one per `refresh_min_interval`, shared by concurrent requests), which is how
//!   key rotation is picked up. The set is also refetched when older than `jwks_ttl`.
//! - The algorithm is pinned to the key: the JWK's `alg` when it has one, else the
//!   algorithms of its key type. Symmetric (`oct`) keys in a JWKS are ignored, so an
//!   `HS256` token "signed" with a public key, or an `alg: none` token, never verifies.
//! - `iss` must be one string equal to the configured issuer (not an array holding
//!   it); `aud`, `exp` and `nbf` are checked with a small leeway; `sub` is required.
//! - A validated token's identity is cached until the token expires, so a repeated
//!   token costs a hash lookup instead of a signature check.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::context::Identity;

/// How a [`JwtValidator`] validates tokens.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// The expected `iss`.
    pub issuer: String,
    /// The expected `aud` (one of the token's audiences).
    pub audience: String,
    /// Where the keys are.
    pub jwks: JwksSource,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim holding group names (`Identity::groups`).
    pub group_claim: String,
    /// The least time between two key-set fetches.
    pub refresh_min_interval: Duration,
    /// How long a fetched key set is used before it is fetched again.
    pub jwks_ttl: Duration,
    /// The most validated tokens kept in the identity cache.
    pub cache_capacity: usize,
}

impl JwtSettings {
    /// Settings for `issuer` and `audience` with defaults: 30 s leeway, `groups`
    /// claim, refetch at most every 10 s, key set used for 1 h, 10 000 cached tokens.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks: JwksSource::Discover,
            leeway: Duration::from_secs(30),
            group_claim: "groups".to_owned(),
            refresh_min_interval: Duration::from_secs(10),
            jwks_ttl: Duration::from_secs(3600),
            cache_capacity: 10_000,
        }
    }
}

/// Where a [`JwtValidator`] finds the issuer's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum JwksSource {
    /// The `jwks_uri` of the issuer's `/.well-known/openid-configuration`.
    #[default]
    Discover,
    /// This JWKS URL, skipping discovery.
    Url(String),
}

/// Why a token was refused. The text is safe to show the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// No bearer token was sent.
    #[error("a bearer token is required")]
    Missing,
    /// The token is not a well-formed JWT, or its algorithm is not accepted.
    #[error("malformed token or unsupported algorithm")]
    Malformed,
    /// No key with the token's `kid`, even after refetching the key set.
    #[error("unknown signing key")]
    UnknownKey,
    /// The token's algorithm does not belong to its key.
    #[error("algorithm not allowed for this key")]
    AlgorithmMismatch,
    /// Signature, issuer, audience, or time checks failed.
    #[error("{0}")]
    Invalid(&'static str),
    /// The key set could not be fetched.
    #[error("signing keys are unavailable")]
    KeysUnavailable,
}

#[derive(Clone)]
struct Key {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Key>,
    without_kid: Vec<Key>,
    fetched_at: Option<Instant>,
}

struct FetchState {
    last_attempt: Option<Instant>,
    jwks_uri: Option<String>,
}

struct Cached {
    identity: Arc<Identity>,
    exp: u64,
    nbf: u64,
}

/// Validates bearer tokens; share one per issuer (`Arc`).
pub struct JwtValidator {
    settings: JwtSettings,
    http: reqwest::Client,
    keys: RwLock<KeySet>,
    fetch: tokio::sync::Mutex<FetchState>,
    /// By token. foldhash, not SipHash: the key is the whole token (about 800 bytes
    /// for RS256), hashed on every request; its per-map random seed keeps chosen
    /// keys from colliding, and only validated tokens are ever inserted.
    identities: DashMap<String, Cached, foldhash::fast::RandomState>,
    fetches: std::sync::atomic::AtomicU64,
    /// Keys given at construction: never fetched.
    fixed: bool,
}

impl std::fmt::Debug for JwtValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtValidator")
            .field("issuer", &self.settings.issuer)
            .finish_non_exhaustive()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn algorithms_of(jwk: &jsonwebtoken::jwk::Jwk) -> Vec<Algorithm> {
    use jsonwebtoken::jwk::EllipticCurve;
    if let Some(alg) = jwk.common.key_algorithm {
        return Algorithm::try_from(alg)
            .ok()
            .filter(|a| a.family() != jsonwebtoken::AlgorithmFamily::Hmac)
            .into_iter()
            .collect();
    }
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => vec![],
        },
        AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
        // Symmetric keys never verify bearer tokens from a JWKS.
        _ => vec![],
    }
}

fn key_set(set: &JwkSet) -> KeySet {
    let mut fresh = KeySet {
        fetched_at: Some(Instant::now()),
        ..KeySet::default()
    };
    for jwk in &set.keys {
        let algorithms = algorithms_of(jwk);
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        if algorithms.is_empty() {
            continue;
        }
        let key = Key { key, algorithms };
        match &jwk.common.key_id {
            Some(kid) => {
                fresh.by_kid.insert(kid.clone(), key);
            }
            None => fresh.without_kid.push(key),
        }
    }
    fresh
}

impl JwtValidator {
    /// A validator; keys are fetched on first use.
    pub fn new(settings: JwtSettings, http: reqwest::Client) -> Self {
        Self {
            fetch: tokio::sync::Mutex::new(FetchState {
                last_attempt: None,
                jwks_uri: match &settings.jwks {
                    JwksSource::Discover => None,
                    JwksSource::Url(url) => Some(url.clone()),
                },
            }),
            fixed: false,
            settings,
            http,
            keys: RwLock::new(KeySet::default()),
            identities: DashMap::default(),
            fetches: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A validator with a fixed key set that is never fetched (keys distributed
    /// out of band, tests, benchmarks).
    pub fn with_keys(settings: JwtSettings, keys: &JwkSet) -> Self {
        let mut validator = Self::new(settings, reqwest::Client::new());
        validator.keys = RwLock::new(key_set(keys));
        validator.fixed = true;
        validator
    }

    /// The settings.
    pub fn settings(&self) -> &JwtSettings {
        &self.settings
    }

    /// How many times the key set was fetched (for tests and metrics).
    pub fn key_fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The identity of `token` if it was validated before and is still within its
    /// lifetime (`exp`, `nbf`, with the leeway): what [`Self::validate`] answers
    /// first, without waiting.
    pub fn cached(&self, token: &str) -> Option<Arc<Identity>> {
        let now = now_secs();
        let leeway = self.settings.leeway.as_secs();
        let hit = self.identities.get(token)?;
        (now <= hit.exp + leeway && now + leeway >= hit.nbf).then(|| hit.identity.clone())
    }

    /// Validate `token` and return the caller's identity.
    pub async fn validate(&self, token: &str) -> Result<Arc<Identity>, JwtError> {
        if let Some(identity) = self.cached(token) {
            return Ok(identity);
        }
        self.identities.remove(token);
        let now = now_secs();
        let leeway = self.settings.leeway.as_secs();
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::Malformed)?;
        if header.alg.family() == jsonwebtoken::AlgorithmFamily::Hmac {
            return Err(JwtError::AlgorithmMismatch);
        }
        let stale = self
            .keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fetched_at
            .is_none_or(|t| t.elapsed() > self.settings.jwks_ttl)
            && !self.fixed;
        if stale {
            self.refresh().await;
        }
        let key = match self.find(header.kid.as_deref(), header.alg) {
            Some(key) => key,
            None => {
                self.refresh().await;
                self.find(header.kid.as_deref(), header.alg)
                    .ok_or_else(|| {
                        if self
                            .keys
                            .read()
                            .unwrap_or_else(|e| e.into_inner())
                            .fetched_at
                            .is_none()
                        {
                            JwtError::KeysUnavailable
                        } else {
                            JwtError::UnknownKey
                        }
                    })?
            }
        };
        if !key.algorithms.contains(&header.alg) {
            return Err(JwtError::AlgorithmMismatch);
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = leeway;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind;
                JwtError::Invalid(match e.kind() {
                    ErrorKind::ExpiredSignature => "token expired",
                    ErrorKind::ImmatureSignature => "token not yet valid",
                    ErrorKind::InvalidAudience => "wrong audience",
                    ErrorKind::InvalidIssuer => "wrong issuer",
                    ErrorKind::InvalidSignature => "bad signature",
                    ErrorKind::MissingRequiredClaim(_) => "missing required claim",
                    _ => "invalid token",
                })
            })?;
        let claims = data.claims;
        // jsonwebtoken accepts an `iss` array holding the issuer; an identity has
        // one issuer (its required `sub` is already a string).
        if claims.get("iss").and_then(Value::as_str) != Some(self.settings.issuer.as_str()) {
            return Err(JwtError::Invalid("wrong issuer"));
        }
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let nbf = claims.get("nbf").and_then(Value::as_u64).unwrap_or(0);
        let identity = Arc::new(self.identity(claims));
        if self.identities.len() >= self.settings.cache_capacity {
            self.identities.retain(|_, c| c.exp + leeway >= now);
            if self.identities.len() >= self.settings.cache_capacity {
                self.identities.clear();
            }
        }
        self.identities.insert(
            token.to_owned(),
            Cached {
                identity: identity.clone(),
                exp,
                nbf,
            },
        );
        Ok(identity)
    }

    fn identity(&self, claims: Map<String, Value>) -> Identity {
        let string = |key: &str| claims.get(key).and_then(Value::as_str).map(str::to_owned);
        let groups = match claims.get(&self.settings.group_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        Identity {
            subject: string("sub").unwrap_or_default(),
            issuer: string("iss"),
            groups,
            claims,
        }
    }

    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Key> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        match kid {
            Some(kid) => keys.by_kid.get(kid).cloned(),
            None => {
                let mut candidates = keys
                    .without_kid
                    .iter()
                    .chain(keys.by_kid.values())
                    .filter(|k| k.algorithms.contains(&alg));
                let first = candidates.next()?;
                // Without a kid, only an unambiguous key is used.
                candidates.next().is_none().then(|| first.clone())
            }
        }
    }

    /// Fetch the key set again unless that was done less than
    /// `refresh_min_interval` ago. Concurrent callers share one fetch.
    async fn refresh(&self) {
        let mut state = self.fetch.lock().await;
        if self.fixed
            || state
                .last_attempt
                .is_some_and(|t| t.elapsed() < self.settings.refresh_min_interval)
        {
            return;
        }
        state.last_attempt = Some(Instant::now());
        let uri = match state.jwks_uri.clone() {
            Some(uri) => uri,
            None => match self.discover().await {
                Ok(uri) => {
                    state.jwks_uri = Some(uri.clone());
                    uri
                }
                Err(e) => {
                    tracing::warn!(issuer = %self.settings.issuer, "OIDC discovery failed: {e}");
                    return;
                }
            },
        };
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.get_json::<JwkSet>(&uri).await {
            Ok(set) => {
                let mut fresh = KeySet {
                    fetched_at: Some(Instant::now()),
                    ..KeySet::default()
                };
                for jwk in &set.keys {
                    let algorithms = algorithms_of(jwk);
                    let Ok(key) = DecodingKey::from_jwk(jwk) else {
                        continue;
                    };
                    if algorithms.is_empty() {
                        continue;
                    }
                    let key = Key { key, algorithms };
                    match &jwk.common.key_id {
                        Some(kid) => {
                            fresh.by_kid.insert(kid.clone(), key);
                        }
                        None => fresh.without_kid.push(key),
                    }
                }
                tracing::debug!(
                    keys = fresh.by_kid.len() + fresh.without_kid.len(),
                    "JWKS fetched"
                );
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            }
            Err(e) => tracing::warn!(%uri, "JWKS fetch failed: {e}"),
        }
    }

    async fn discover(&self) -> Result<String, String> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.settings.issuer.trim_end_matches('/')
        );
        let document: Value = self.get_json(&url).await?;
        let issuer = document.get("issuer").and_then(Value::as_str);
        if issuer != Some(self.settings.issuer.as_str()) {
            return Err(format!(
                "discovery document names issuer {issuer:?}, expected {:?}",
                self.settings.issuer
            ));
        }
        document
            .get("jwks_uri")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| "discovery document has no jwks_uri".to_owned())
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_identity_answers_only_within_its_lifetime() {
        let validator = JwtValidator::with_keys(
            JwtSettings::new("https://idp", "vmcp"),
            &jsonwebtoken::jwk::JwkSet { keys: Vec::new() },
        );
        let leeway = validator.settings.leeway.as_secs();
        let now = now_secs();
        let cache = |token: &str, exp: u64, nbf: u64| {
            let identity = Arc::new(Identity {
                subject: token.into(),
                ..Identity::default()
            });
            validator
                .identities
                .insert(token.into(), Cached { identity, exp, nbf });
        };
        cache("fresh", now + 60, now - 60);
        cache("expired", now - leeway - 5, now - 120);
        cache("early", now + 120, now + leeway + 60);
        assert_eq!(validator.cached("fresh").unwrap().subject, "fresh");
        assert!(validator.cached("expired").is_none());
        assert!(validator.cached("early").is_none());
        assert!(validator.cached("never-seen").is_none());
    }
}
