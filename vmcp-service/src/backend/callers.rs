//! Backend connections per caller, for backends whose credentials depend on who
//! calls (`token_exchange`, `passthroughHeaders`).
//!
//! A [`CallerPool`] keeps one [`BackendClient`] per (backend, credential identity):
//! the caller's issuer and subject plus the values of its passed-through headers.
//! Each has its own HTTP connection pool and, on a Legacy backend, its own MCP
//! session. Unused connections are closed after `idleTimeout`; at most
//! `maxPerBackend` are kept (the least recently used is closed to make room). The
//! backend's shared connection (listings, health checks, subscriptions) stays as it
//! was and authenticates as the gateway itself ([`Credentials::Service`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::{HeaderMap, HeaderName};
use tokio::sync::broadcast;
use tokio::time::Instant;
use vmcp_layers::context::SubjectToken;
use vmcp_layers::tls::CaBundle;

use super::client::BackendClient;
use super::exchange::{ExchangeError, TokenExchanger};
use super::health::HealthSettings;
use crate::config::{BackendConfig, CallerConnectionsConfig};

/// What a backend connection adds to every request, beyond the static headers.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// The gateway itself: a client-credentials token when the exchange has a
    /// client id and secret, else nothing.
    Service(Arc<TokenExchanger>),
    /// One caller: its exchanged token and its passed-through headers.
    Caller {
        exchanger: Option<Arc<TokenExchanger>>,
        /// Issuer and subject: the exchange cache key.
        identity: Arc<str>,
        /// The caller's latest validated token (refreshed on every use).
        subject: Arc<Mutex<Option<SubjectToken>>>,
        passthrough: HeaderMap,
    },
}

impl Credentials {
    /// The headers for the next connection; a changed set means a new connection.
    pub(crate) async fn headers(&self) -> Result<HeaderMap, ExchangeError> {
        match self {
            Credentials::Service(exchanger) => {
                let mut headers = HeaderMap::new();
                if let Some(token) = exchanger.service_token().await? {
                    headers.insert(http::header::AUTHORIZATION, token);
                }
                Ok(headers)
            }
            Credentials::Caller {
                exchanger,
                identity,
                subject,
                passthrough,
            } => {
                let mut headers = passthrough.clone();
                if let Some(exchanger) = exchanger {
                    let subject = subject.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let token = exchanger.exchanged(identity, subject.as_ref()).await?;
                    headers.insert(http::header::AUTHORIZATION, token);
                }
                Ok(headers)
            }
        }
    }

    /// The backend refused `headers` (`None`: whatever is cached): forget the
    /// exchanged token in them.
    pub(crate) fn refused(&self, headers: Option<&HeaderMap>) {
        if let Credentials::Caller {
            exchanger: Some(exchanger),
            identity,
            ..
        } = self
        {
            exchanger.evict(identity, headers.and_then(|h| h.get(http::header::AUTHORIZATION)));
        }
    }
}

/// Builds a backend's HTTP clients: its trust anchors and static headers plus the
/// headers of one set of credentials.
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpFactory {
    pub(crate) bundle: Option<CaBundle>,
    pub(crate) headers: HeaderMap,
}

impl HttpFactory {
    /// A client sending `extra` (and the static headers) on every request.
    pub(crate) fn build(&self, extra: &HeaderMap) -> reqwest::Client {
        let mut headers = self.headers.clone();
        for (name, value) in extra {
            let mut value = value.clone();
            value.set_sensitive(true);
            headers.insert(name.clone(), value);
        }
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .default_headers(headers);
        vmcp_layers::tls::http_client(builder, self.bundle.as_ref()).unwrap_or_else(|e| {
            tracing::error!("{e}; this backend connection uses reqwest's default client");
            reqwest::Client::new()
        })
    }
}

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
        let identity = match identity {
            Some(i) if !i.is_anonymous() => format!(
                "{}\0{}",
                i.issuer.as_deref().unwrap_or_default(),
                i.subject
            ),
            _ => "anonymous".to_owned(),
        };
        let mut passthrough = HeaderMap::new();
        for name in allowed {
            for value in request.get_all(name) {
                passthrough.append(name.clone(), value.clone());
            }
        }
        Self {
            identity: identity.into(),
            subject,
            passthrough,
        }
    }

    /// The pool key: the identity plus the passed-through values.
    fn key(&self) -> String {
        let mut key = self.identity.to_string();
        for (name, value) in &self.passthrough {
            key.push('\0');
            key.push_str(name.as_str());
            key.push('=');
            key.push_str(&String::from_utf8_lossy(value.as_bytes()));
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
    exchanger: Option<Arc<TokenExchanger>>,
    http: HttpFactory,
    health: HealthSettings,
    settings: CallerConnectionsConfig,
    entries: Mutex<HashMap<String, Entry>>,
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
    /// A pool for `config`'s callers; its sweeper closes idle connections until
    /// the pool is dropped.
    pub(crate) fn new(
        config: BackendConfig,
        exchanger: Option<Arc<TokenExchanger>>,
        http: HttpFactory,
        health: HealthSettings,
        settings: CallerConnectionsConfig,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            config,
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

    /// The exchanger of this backend, if its strategy is `token_exchange`.
    pub(crate) fn exchanger(&self) -> Option<&Arc<TokenExchanger>> {
        self.exchanger.as_ref()
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection of `caller`, opened on first use.
    pub(crate) fn client(&self, caller: &Caller) -> Arc<BackendClient> {
        let key = caller.key();
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
        let credentials = Credentials::Caller {
            exchanger: self.exchanger.clone(),
            identity: caller.identity.clone(),
            subject: subject.clone(),
            passthrough: caller.passthrough.clone(),
        };
        let client = Arc::new(
            BackendClient::new(
                self.config.clone(),
                reqwest::Client::new(),
                self.events.clone(),
                self.health.clone(),
            )
            .with_credentials(credentials, self.http.clone()),
        );
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
        Some(p) => (p.settings.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30)),
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
