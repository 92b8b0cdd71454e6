//! Backend connections per caller: for backends whose credentials depend on who
//! calls (`token_exchange`, `passthroughHeaders`), and for Legacy backends, per
//! client capability set.
//!
//! A [`CallerPool`] keeps one [`BackendClient`] per key. The key is the caller's
//! credential identity (issuer and subject plus the values of its passed-through
//! headers; empty for a backend whose credentials do not depend on the caller) and
//! the client capabilities the connection declares ([`ClientCaps`]: a 2025-11-25
//! backend learns them once, at `initialize`). Each has its own HTTP connection
//! pool and, on a Legacy backend, its own MCP session. Unused connections are closed
//! after `idleTimeout`; at most `maxPerBackend` are kept (the least recently used is
//! closed to make room). The backend's shared connection (listings, health checks,
//! subscriptions, and the calls of callers with no bridgeable capability on a backend
//! whose credentials do not depend on the caller) stays as it was and authenticates
//! as the gateway itself ([`Credentials::Service`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::{HeaderMap, HeaderName};
use tokio::sync::broadcast;
use tokio::time::Instant;
use vmcp_layers::context::SubjectToken;

use super::bridge::ClientCaps;
use super::client::BackendClient;
use super::credentials::{Credentials, HttpFactory};
use super::exchange::TokenExchanger;
use super::health::HealthSettings;
use super::http_clients::BackendHttp;
use crate::config::{BackendConfig, CallerConnectionsConfig};

/// Who is calling, as far as backend credentials are concerned.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Issuer and subject of the validated identity (`anonymous` without one).
    pub identity: Arc<str>,
    /// The validated incoming token, if any.
    pub subject: Option<SubjectToken>,
    /// The allowed headers of the caller's request.
    pub passthrough: HeaderMap,
}

impl Caller {
    /// The caller behind `identity` (`None`: anonymous), with its token and the
    /// headers of `request` named in `allowed`.
    pub fn new(
        identity: Option<&vmcp_layers::context::Identity>,
        subject: Option<SubjectToken>,
        request: &HeaderMap,
        allowed: &[HeaderName],
    ) -> Self {
        // Length-prefixed: no issuer/subject split reads as another, and no
        // authenticated caller reads as "anonymous".
        let identity = match identity {
            Some(i) if !i.is_anonymous() => match &i.issuer {
                Some(issuer) => format!("{}:{issuer}{}", issuer.len(), i.subject),
                None => format!("-:{}", i.subject),
            },
            _ => "anonymous".to_owned(),
        };
        let mut passthrough = HeaderMap::new();
        for name in allowed {
            let values = request.get_all(name);
            // Never an ambiguous credential: which of two tokens the door checked
            // and which one the backend would take need not be the same.
            if name == http::header::AUTHORIZATION && values.iter().nth(1).is_some() {
                continue;
            }
            for value in values {
                passthrough.append(name.clone(), value.clone());
            }
        }
        Self {
            identity: identity.into(),
            subject,
            passthrough,
        }
    }

    /// The gateway itself (no caller credentials), for connections of backends whose
    /// credentials do not depend on the caller.
    pub(crate) fn gateway() -> Self {
        Self {
            identity: "anonymous".into(),
            subject: None,
            passthrough: HeaderMap::new(),
        }
    }

    /// The credential part of the pool key: the identity plus the passed-through
    /// names and values, each length-prefixed so that no two callers share a key
    /// (a subject may hold any character, a header value any byte).
    fn key(&self) -> Vec<u8> {
        let mut key = Vec::new();
        let mut part = |bytes: &[u8]| {
            key.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            key.extend_from_slice(bytes);
        };
        part(self.identity.as_bytes());
        for (name, value) in &self.passthrough {
            part(name.as_str().as_bytes());
            part(value.as_bytes());
        }
        key
    }
}

/// `/status` `caller_connections` of a backend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallerConnections {
    /// Open now.
    pub open: usize,
    /// Opened since the backend was (re)configured.
    pub opened: u64,
    /// Requests to the token endpoint (exchanges), for `token_exchange`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchanges: Option<u64>,
}

struct Entry {
    client: Arc<BackendClient>,
    subject: Arc<Mutex<Option<SubjectToken>>>,
    last_used: Instant,
}

/// The per-caller connections of one backend.
pub(crate) struct CallerPool {
    config: BackendConfig,
    /// Whether credentials depend on the caller; if not, only capabilities key.
    per_caller: bool,
    /// The backend's own HTTP client, for connections without caller credentials.
    shared_http: BackendHttp,
    exchanger: Option<Arc<TokenExchanger>>,
    http: HttpFactory,
    health: HealthSettings,
    settings: CallerConnectionsConfig,
    entries: Mutex<HashMap<(Vec<u8>, ClientCaps), Entry>>,
    opened: std::sync::atomic::AtomicU64,
    /// Per-caller connections report nothing upward: the shared connection owns
    /// the backend's events.
    events: broadcast::Sender<super::BackendEvent>,
}

impl std::fmt::Debug for CallerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerPool")
            .field("backend", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl CallerPool {
    /// A pool for `config`'s callers (keyed by credentials only when `per_caller`);
    /// its sweeper closes idle connections until the pool is dropped.
    pub(crate) fn new(
        config: BackendConfig,
        per_caller: bool,
        shared_http: BackendHttp,
        exchanger: Option<Arc<TokenExchanger>>,
        http: HttpFactory,
        health: HealthSettings,
        settings: CallerConnectionsConfig,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            config,
            per_caller,
            shared_http,
            exchanger,
            http,
            health,
            settings,
            entries: Mutex::new(HashMap::new()),
            opened: Default::default(),
            events: broadcast::channel(1).0,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Whether this backend's credentials depend on the caller.
    pub(crate) fn per_caller(&self) -> bool {
        self.per_caller
    }

    /// Run `op` on `caller`'s connection declaring `caps`, for a request whose
    /// backend's shared client is `shared`: the one way both the handler and the
    /// fast path call through a pool.
    ///
    /// On a per-caller connection, a 401/403 from the backend means it refused the
    /// exchanged token without running the request: the token is evicted and the
    /// call retried once with a fresh exchange. The outcome feeds `shared`'s health
    /// (for `key`, the caller as the health model counts it), except what the
    /// caller's own credentials caused (an exchange refused, a token the backend
    /// refuses).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        shared: &BackendClient,
        caller: &Caller,
        caps: ClientCaps,
        key: super::CallerKey,
        op: F,
    ) -> Result<T, super::BackendError>
    where
        F: Fn(Arc<BackendClient>) -> Fut,
        Fut: Future<Output = Result<T, super::BackendError>>,
    {
        shared.admit()?;
        let started = std::time::Instant::now();
        let client = self.client(caller, caps);
        let mut result = Box::pin(op(client.clone())).await;
        if let Err(e) = &result
            && e.credentials_refused()
            && self.exchanger.is_some()
        {
            tracing::info!(backend = %shared.name(), "backend refused the caller's exchanged token; exchanging again and retrying once");
            client.refuse_credentials().await;
            result = Box::pin(op(client)).await;
        }
        // A backend refusing this caller's own credentials (after a fresh exchange)
        // refused the caller, not the gateway: the backend works.
        let callers_own =
            self.per_caller && result.as_ref().is_err_and(|e| e.credentials_refused());
        if !callers_own {
            shared.record_call(Some(key), &result, started.elapsed());
        }
        result
    }

    /// How many per-caller connections are open now, how many were ever opened, and
    /// how many token exchanges were made.
    pub(crate) fn counts(&self) -> CallerConnections {
        CallerConnections {
            open: self.lock().len(),
            opened: self.opened.load(std::sync::atomic::Ordering::Relaxed),
            exchanges: self.exchanger.as_ref().map(|e| e.exchanges()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Vec<u8>, ClientCaps), Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection of `caller` declaring `caps`, opened on first use.
    pub(crate) fn client(&self, caller: &Caller, caps: ClientCaps) -> Arc<BackendClient> {
        let key = (
            if self.per_caller {
                caller.key()
            } else {
                Vec::new()
            },
            caps,
        );
        let mut entries = self.lock();
        let now = Instant::now();
        if let Some(entry) = entries.get_mut(&key) {
            entry.last_used = now;
            *entry.subject.lock().unwrap_or_else(|e| e.into_inner()) = caller.subject.clone();
            return entry.client.clone();
        }
        if entries.len() >= self.settings.max_per_backend
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            && let Some(evicted) = entries.remove(&oldest)
        {
            tracing::debug!(backend = %self.config.name, "caller connection cap reached; closing the least recently used");
            close(evicted.client);
        }
        let subject = Arc::new(Mutex::new(caller.subject.clone()));
        let client = if self.per_caller {
            let credentials = Credentials::Caller {
                exchanger: self.exchanger.clone(),
                identity: caller.identity.clone(),
                subject: subject.clone(),
                passthrough: caller.passthrough.clone(),
            };
            BackendClient::new(
                self.config.clone(),
                BackendHttp::plain(),
                self.events.clone(),
                self.health.clone(),
            )
            .with_credentials(credentials, self.http.clone())
        } else {
            BackendClient::new(
                self.config.clone(),
                self.shared_http.clone(),
                self.events.clone(),
                self.health.clone(),
            )
        };
        let client = Arc::new(client.with_client_caps(caps));
        self.opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        entries.insert(
            key,
            Entry {
                client: client.clone(),
                subject,
                last_used: now,
            },
        );
        client
    }

    /// Close connections unused for `idleTimeout` (not those with calls in flight).
    fn close_idle(&self) {
        let now = Instant::now();
        let idle = self.settings.idle_timeout;
        let mut closed = Vec::new();
        self.lock().retain(|_, e| {
            let keep = now.duration_since(e.last_used) < idle || Arc::strong_count(&e.client) > 1;
            if !keep {
                closed.push(e.client.clone());
            }
            keep
        });
        for client in closed {
            tracing::debug!(backend = %self.config.name, "closing an idle caller connection");
            close(client);
        }
    }

    /// Close every connection (the backend was removed or replaced).
    pub(crate) fn close_all(&self) {
        for (_, entry) in self.lock().drain() {
            close(entry.client);
        }
    }
}

fn close(client: Arc<BackendClient>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { client.close().await });
    }
}

async fn sweep(pool: Weak<CallerPool>) {
    let every = match pool.upgrade() {
        Some(p) => {
            (p.settings.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30))
        }
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        match pool.upgrade() {
            Some(pool) => pool.close_idle(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(per_caller: bool) -> Arc<CallerPool> {
        CallerPool::new(
            BackendConfig {
                name: "b".into(),
                url: "http://127.0.0.1:9/mcp".into(),
                ..Default::default()
            },
            per_caller,
            BackendHttp::plain(),
            None,
            HttpFactory::default(),
            HealthSettings::default(),
            CallerConnectionsConfig::default(),
        )
    }

    fn caller(identity: &str) -> Caller {
        Caller {
            identity: identity.into(),
            subject: None,
            passthrough: HeaderMap::new(),
        }
    }

    #[test]
    fn keys_are_injective() {
        use vmcp_layers::context::Identity;
        let who = |issuer: Option<&str>, subject: &str, headers: &[(&str, &str)]| {
            let mut identity = Identity::anonymous();
            identity.issuer = issuer.map(str::to_owned);
            identity.subject = subject.to_owned();
            let mut request = HeaderMap::new();
            let mut allowed = Vec::new();
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
                request.append(name.clone(), value.parse().unwrap());
                allowed.push(name);
            }
            Caller::new(Some(&identity), None, &request, &allowed).key()
        };
        let keys = [
            // A subject holding the old separator and a header's rendering.
            who(Some("https://idp"), "alice", &[("x-tenant", "acme")]),
            who(Some("https://idp"), "alice\0x-tenant=acme", &[]),
            who(Some("https://idp\0alice"), "", &[]),
            who(Some("https://idp"), "\0alice", &[]),
            who(None, "alice", &[]),
            who(Some(""), "alice", &[]),
            who(Some("https://idp"), "anonymous", &[]),
            Caller::gateway().key(),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn two_authorization_values_pass_neither() {
        let mut request = HeaderMap::new();
        request.append(
            http::header::AUTHORIZATION,
            "Bearer checked".parse().unwrap(),
        );
        let allowed = [http::header::AUTHORIZATION];
        let one = Caller::new(None, None, &request, &allowed);
        assert_eq!(one.passthrough.len(), 1);
        request.append(http::header::AUTHORIZATION, "Bearer other".parse().unwrap());
        let two = Caller::new(None, None, &request, &allowed);
        assert!(two.passthrough.is_empty(), "{:?}", two.passthrough);
    }

    #[tokio::test]
    async fn one_keying_by_credentials_and_capability_set() {
        let sampling = ClientCaps {
            sampling: true,
            ..Default::default()
        };
        let roots = ClientCaps {
            roots: true,
            ..Default::default()
        };
        // Per caller: identity and capability set both select the connection.
        let p = pool(true);
        let a = p.client(&caller("alice"), sampling);
        assert!(Arc::ptr_eq(&a, &p.client(&caller("alice"), sampling)));
        assert!(!Arc::ptr_eq(&a, &p.client(&caller("alice"), roots)));
        assert!(!Arc::ptr_eq(&a, &p.client(&caller("bob"), sampling)));
        assert_eq!(p.counts().open, 3);
        // Not per caller: only the capability set does.
        let p = pool(false);
        let a = p.client(&caller("alice"), sampling);
        assert!(Arc::ptr_eq(&a, &p.client(&caller("bob"), sampling)));
        assert!(!Arc::ptr_eq(&a, &p.client(&caller("bob"), roots)));
        assert_eq!(p.counts().open, 2);
    }
}
