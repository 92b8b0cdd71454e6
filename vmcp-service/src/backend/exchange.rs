//! RFC 8693 token exchange for `outgoingAuth` `token_exchange`: the caller's
//! validated token is traded at the authorization server for one meant for this
//! backend, and the answer is cached.
//!
//! One [`TokenExchanger`] per backend, so its cache key is (backend, audience,
//! scopes) fixed plus the caller's identity: the issuer and subject of the validated
//! token. A cached token is used until its `expires_in` minus a skew (a tenth of
//! the lifetime, at most 30 s); without `expires_in`, for 60 s. Concurrent requests
//! for one key wait for one exchange (single-flight); a failure is not cached, so
//! the next call tries again. Tokens and secrets never reach a log line: errors say
//! what failed in words and carry at most the server's OAuth `error` code.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use tokio::time::Instant;
use vmcp_layers::context::SubjectToken;

use super::reason::FailureReason;
use crate::config::{Secret, TokenExchangeConfig};

const GRANT_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// At most this long before expiry a cached token is replaced.
const MAX_SKEW: Duration = Duration::from_secs(30);
/// How long a token without `expires_in` is used.
const NO_EXPIRY_TTL: Duration = Duration::from_secs(60);
/// Above this many keys, expired entries are swept on insert.
const SWEEP_ABOVE: usize = 1024;
/// The token endpoint's answer is read up to this size.
const MAX_ANSWER: usize = 64 * 1024;

/// Why no token could be had for a backend request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExchangeError {
    /// The caller presented no validated token (incoming authentication is off).
    #[error(
        "token exchange needs the caller's validated token (incomingAuth must authenticate callers)"
    )]
    NoSubjectToken,
    /// The token endpoint could not be reached.
    #[error("the token endpoint could not be reached: {0}")]
    Unreachable(String),
    /// The token endpoint refused: HTTP status and its OAuth `error` code.
    #[error("the token endpoint refused the request (HTTP {status}{})", .error.as_deref().map(|e| format!(", {e}")).unwrap_or_default())]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The OAuth error code (`invalid_client`, `invalid_grant`, …), if any.
        error: Option<String>,
    },
    /// The answer was not a token response.
    #[error("the token endpoint's answer is not a token response")]
    Malformed,
}

/// A token and when it stops being used.
#[derive(Clone)]
struct Cached {
    /// `Bearer <token>`, marked sensitive.
    value: HeaderValue,
    until: Instant,
}

type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// Exchanges and caches tokens for one backend.
pub(crate) struct TokenExchanger {
    backend: Arc<str>,
    config: TokenExchangeConfig,
    subject_type: &'static str,
    secret: Option<Secret>,
    http: reqwest::Client,
    cache: Mutex<HashMap<Arc<str>, Slot>>,
    service: Slot,
    exchanges: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for TokenExchanger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchanger")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(serde::Deserialize)]
struct ErrorResponse {
    error: String,
}

impl TokenExchanger {
    /// The exchanger of `backend`; `None` (logged, no value) if the configuration
    /// no longer resolves (validation checked it at load).
    pub(crate) fn new(backend: Arc<str>, config: &TokenExchangeConfig) -> Option<Self> {
        let field = format!("outgoingAuth.backends.{backend}.tokenExchange");
        let checked = config
            .client_secret(&field)
            .map(|secret| (config.subject_token_type_uri(), secret));
        let (subject_type, secret) = match checked {
            Ok(ok) => ok,
            Err(e) => {
                tracing::error!(backend = %backend, "{e}");
                return None;
            }
        };
        let bundle = match config
            .ca_bundle_path
            .as_deref()
            .map(vmcp_layers::tls::CaBundle::load)
        {
            Some(Ok(bundle)) => Some(bundle),
            Some(Err(e)) => {
                tracing::error!(backend = %backend, "{field}.caBundlePath: {e}");
                None
            }
            None => None,
        };
        let builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        let http = vmcp_layers::tls::http_client(builder, bundle.as_ref())
            .inspect_err(|e| tracing::error!(backend = %backend, "{e}"))
            .ok()?;
        Some(Self {
            backend,
            config: config.clone(),
            subject_type,
            secret,
            http,
            cache: Mutex::new(HashMap::new()),
            service: Slot::default(),
            exchanges: Default::default(),
        })
    }

    /// How many exchanges (requests to the token endpoint) this exchanger made.
    pub(crate) fn exchanges(&self) -> u64 {
        self.exchanges.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Bearer <exchanged token>` for the caller `key` (issuer and subject), from
    /// the cache or from one exchange shared by every concurrent request for `key`.
    pub(crate) async fn exchanged(
        &self,
        key: &Arc<str>,
        subject: Option<&SubjectToken>,
    ) -> Result<HeaderValue, ExchangeError> {
        let subject = subject.ok_or(ExchangeError::NoSubjectToken)?;
        let slot = self.slot(key);
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref()
            && Instant::now() < c.until
        {
            return Ok(c.value.clone());
        }
        let form = self.exchange_form(subject);
        let fresh = self.request(form).await?;
        *cached = Some(fresh.clone());
        Ok(fresh.value)
    }

    /// `Bearer <client-credentials token>` for the gateway's own requests (health
    /// checks, listings); `None` without a client id and secret.
    pub(crate) async fn service_token(&self) -> Result<Option<HeaderValue>, ExchangeError> {
        if self.secret.is_none() {
            return Ok(None);
        }
        let mut cached = self.service.lock().await;
        if let Some(c) = cached.as_ref()
            && Instant::now() < c.until
        {
            return Ok(Some(c.value.clone()));
        }
        let form = self.client_credentials_form();
        let fresh = self.request(form).await?;
        *cached = Some(fresh.clone());
        Ok(Some(fresh.value))
    }

    /// The body of an exchange of `subject` (built apart: the serializer is not `Send`).
    fn exchange_form(&self, subject: &SubjectToken) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", GRANT_TOKEN_EXCHANGE)
            .append_pair("subject_token", subject.expose())
            .append_pair("subject_token_type", self.subject_type)
            .append_pair(
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            );
        if let Some(audience) = &self.config.audience {
            form.append_pair("audience", audience);
        }
        if !self.config.scopes.is_empty() {
            form.append_pair("scope", &self.config.scopes.join(" "));
        }
        form.finish()
    }

    /// The body of a client-credentials request.
    fn client_credentials_form(&self) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if !self.config.scopes.is_empty() {
            form.append_pair("scope", &self.config.scopes.join(" "));
        }
        form.finish()
    }

    /// Forget the token of caller `key` if it is still `value` (any, for `None`):
    /// the backend refused it, so the next request exchanges again.
    pub(crate) fn evict(&self, key: &Arc<str>, value: Option<&HeaderValue>) {
        let slot = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        if let Some(slot) = slot
            && let Ok(mut cached) = slot.try_lock()
            && cached
                .as_ref()
                .is_some_and(|c| value.is_none_or(|v| c.value == v))
        {
            *cached = None;
        }
    }

    fn slot(&self, key: &Arc<str>) -> Slot {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = cache.get(key) {
            return slot.clone();
        }
        if cache.len() >= SWEEP_ABOVE {
            let now = Instant::now();
            // Busy slots (an exchange in flight) stay.
            cache.retain(|_, slot| {
                slot.try_lock()
                    .map(|c| c.as_ref().is_some_and(|c| now < c.until))
                    .unwrap_or(true)
            });
        }
        cache.entry(key.clone()).or_default().clone()
    }

    /// POST `form` to the token endpoint, authenticated as the gateway's client.
    async fn request(&self, form: String) -> Result<Cached, ExchangeError> {
        self.exchanges
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut request = self
            .http
            .post(&self.config.token_url)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(form);
        if let (Some(id), Some(secret)) = (&self.config.client_id, &self.secret) {
            // RFC 6749 §2.3.1: both parts form-urlencoded before Basic encoding.
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            request = request.basic_auth(enc(id), Some(enc(secret.expose())));
        }
        let started = Instant::now();
        let response = request
            .send()
            .await
            .map_err(|e| ExchangeError::Unreachable(FailureReason::of(&e).to_string()))?;
        let status = response.status();
        let body = read_limited(response).await?;
        if !status.is_success() {
            let error = serde_json::from_slice::<ErrorResponse>(&body)
                .ok()
                .map(|e| e.error)
                // Only an OAuth error code, never free text from the server.
                .filter(|e| {
                    e.len() <= 64 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                });
            return Err(ExchangeError::Refused {
                status: status.as_u16(),
                error,
            });
        }
        let token: TokenResponse =
            serde_json::from_slice(&body).map_err(|_| ExchangeError::Malformed)?;
        let mut value = HeaderValue::try_from(format!("Bearer {}", token.access_token))
            .map_err(|_| ExchangeError::Malformed)?;
        value.set_sensitive(true);
        let lifetime = token.expires_in.map(Duration::from_secs);
        let usable = match lifetime {
            Some(l) => l.saturating_sub((l / 10).min(MAX_SKEW)),
            None => NO_EXPIRY_TTL,
        };
        tracing::debug!(backend = %self.backend, elapsed = ?started.elapsed(), valid_for = ?usable, "token obtained");
        Ok(Cached {
            value,
            until: started + usable,
        })
    }
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, ExchangeError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ExchangeError::Unreachable(FailureReason::of(&e).to_string()))?
    {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(ExchangeError::Malformed);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A token endpoint counting its requests; tokens live `ttl` seconds.
    async fn endpoint(ttl: u64, fail: bool) -> (String, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let seen = count.clone();
        let app = axum::Router::new().route(
            "/token",
            axum::routing::post(move |body: String| {
                let seen = seen.clone();
                async move {
                    let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
                    // Slow enough that a burst overlaps.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    assert!(body.contains("subject_token=caller-token"), "{body}");
                    if fail {
                        return (
                            http::StatusCode::UNAUTHORIZED,
                            r#"{"error":"invalid_client","error_description":"secret s3cr3t wrong"}"#.to_owned(),
                        );
                    }
                    (
                        http::StatusCode::OK,
                        format!(r#"{{"access_token":"t{n}","token_type":"Bearer","expires_in":{ttl}}}"#),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, count)
    }

    fn exchanger(url: &str) -> Arc<TokenExchanger> {
        let config = TokenExchangeConfig {
            token_url: url.into(),
            client_id: Some("gw".into()),
            client_secret: Some(serde_json::from_str("\"s3cr3t\"").unwrap()),
            audience: Some("backend".into()),
            ..Default::default()
        };
        Arc::new(TokenExchanger::new("b".into(), &config).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_shares_one_exchange_and_callers_get_their_own() {
        let (url, count) = endpoint(300, false).await;
        let ex = exchanger(&url);
        let subject = SubjectToken::new("caller-token");
        let alice: Arc<str> = "iss\0alice".into();
        let burst = (0..50).map(|_| {
            let ex = ex.clone();
            let (alice, subject) = (alice.clone(), subject.clone());
            tokio::spawn(async move { ex.exchanged(&alice, Some(&subject)).await.unwrap() })
        });
        let tokens = futures::future::join_all(burst).await;
        assert!(tokens.iter().all(|t| t.as_ref().unwrap() == "Bearer t1"));
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let bob: Arc<str> = "iss\0bob".into();
        assert_eq!(
            ex.exchanged(&bob, Some(&subject)).await.unwrap(),
            "Bearer t2"
        );
        // Evicting the refused token makes the next call exchange again.
        ex.evict(&alice, Some(&HeaderValue::from_static("Bearer t1")));
        assert_eq!(
            ex.exchanged(&alice, Some(&subject)).await.unwrap(),
            "Bearer t3"
        );
        assert_eq!(ex.exchanges(), 3);
        assert!(matches!(
            ex.exchanged(&alice, None).await,
            Err(ExchangeError::NoSubjectToken)
        ));
    }

    #[tokio::test]
    async fn failures_are_not_cached_and_carry_only_the_error_code() {
        let (url, count) = endpoint(300, true).await;
        let ex = exchanger(&url);
        let subject = SubjectToken::new("caller-token");
        let key: Arc<str> = "k".into();
        for _ in 0..2 {
            let error = ex.exchanged(&key, Some(&subject)).await.unwrap_err();
            let text = error.to_string();
            assert_eq!(
                text,
                "the token endpoint refused the request (HTTP 401, invalid_client)"
            );
        }
        assert_eq!(count.load(Ordering::SeqCst), 2, "failures are not cached");
    }

    #[tokio::test]
    async fn an_expired_token_is_exchanged_again() {
        // expires_in 1 s: used for 0.9 s.
        let (url, count) = endpoint(1, false).await;
        let ex = exchanger(&url);
        let subject = SubjectToken::new("caller-token");
        let key: Arc<str> = "k".into();
        assert_eq!(
            ex.exchanged(&key, Some(&subject)).await.unwrap(),
            "Bearer t1"
        );
        assert_eq!(
            ex.exchanged(&key, Some(&subject)).await.unwrap(),
            "Bearer t1"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await; // the token's lifetime, not a sync
        assert_eq!(
            ex.exchanged(&key, Some(&subject)).await.unwrap(),
            "Bearer t2"
        );
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }
}
