//! The Redis connection every replica shares (`sessionStorage.provider: redis`).
//!
//! One multiplexed, self-reconnecting connection per process (redis' lazy
//! `ConnectionManager`): it is opened on first use, so a gateway starts while Redis
//! is down, and each command fails fast (1 s) instead of queueing behind a dead
//! server. A probe pings every second and keeps [`RedisStore::is_up`] true to what
//! Redis answers, which `/readyz` reports; the change is logged once each way.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::watch;

use crate::config::{REDIS_PASSWORD_ENV, SessionStorageConfig};

/// How long a command (and a connection attempt) may take before it fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the probe pings.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Why the shared store could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The configuration names no usable Redis (see `config::validate`).
    #[error("sessionStorage: {0}")]
    Config(String),
    /// The CA bundle could not be read or is not a PEM bundle of CAs.
    #[error("sessionStorage.caBundlePath: {0}")]
    CaBundle(vmcp_layers::tls::TlsError),
    /// Redis did not answer in time.
    #[error("redis did not answer within {}s", COMMAND_TIMEOUT.as_secs())]
    Timeout,
    /// Redis refused, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl StoreError {
    /// Whether the error is Redis being unreachable or slow (as opposed to a
    /// command Redis refused): the caller's fail mode decides what happens.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
            }
            StoreError::Timeout => true,
            _ => false,
        }
    }
}

/// The shared Redis of a replica set.
pub struct RedisStore {
    prefix: String,
    /// `host:port` only: what logs and `/status` may show.
    display: String,
    conn: ConnectionManager,
    /// For connections of their own (a subscriber cannot share the multiplexed one).
    client: redis::Client,
    up: watch::Sender<bool>,
    /// Whether the probe has run once.
    probed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.display)
            .field("prefix", &self.prefix)
            .field("up", &*self.up.borrow())
            .finish()
    }
}

impl RedisStore {
    /// Open the store `config` names (no connection is made yet) and start its
    /// probe. The password comes from `VMCP_SESSION_REDIS_PASSWORD` (`password`,
    /// or `user:password` for an ACL user). Must run inside a tokio runtime.
    pub fn open(config: &SessionStorageConfig) -> Result<Arc<Self>, StoreError> {
        let password = std::env::var(REDIS_PASSWORD_ENV)
            .ok()
            .filter(|p| !p.is_empty());
        Self::open_with_password(config, password.as_deref())
    }

    /// [`RedisStore::open`] with the password given (tests, embedders).
    pub fn open_with_password(
        config: &SessionStorageConfig,
        password: Option<&str>,
    ) -> Result<Arc<Self>, StoreError> {
        let address = config.redis_address().map_err(StoreError::Config)?;
        let mut info = redis::IntoConnectionInfo::into_connection_info(address.url.as_str())?;
        let mut settings = info.redis_settings().clone();
        if let Some(password) = password {
            settings = match password.split_once(':') {
                Some((user, pass)) if !user.is_empty() => {
                    settings.set_username(user).set_password(pass)
                }
                _ => settings.set_password(password),
            };
        }
        info = info.set_redis_settings(settings);
        // rediss:// trusts what every other client of the gateway trusts: the
        // platform and Mozilla roots, plus caBundlePath (a private CA) when set.
        let client = if address.tls {
            let extra = match &config.ca_bundle_path {
                Some(path) => {
                    Some(vmcp_layers::tls::CaBundle::load(path).map_err(StoreError::CaBundle)?)
                }
                None => None,
            };
            redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(vmcp_layers::tls::roots_pem(extra.as_ref())),
                },
            )?
        } else {
            redis::Client::open(info)?
        };
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)?;
        let display = address
            .url
            .rsplit_once('/')
            .map_or(address.url.as_str(), |(head, _)| head)
            .to_string();
        let (up, _) = watch::channel(false);
        let store = Arc::new(Self {
            prefix: config.key_prefix().to_string(),
            display,
            conn,
            client,
            up,
            probed: Default::default(),
        });
        tokio::spawn(probe(Arc::downgrade(&store)));
        Ok(store)
    }

    /// `prefix` + `name`: every key vmcp writes.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The connection (a cheap clone of the multiplexed one).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A new subscriber connection (`SUBSCRIBE` needs one of its own), opened
    /// within the command timeout.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        match tokio::time::timeout(COMMAND_TIMEOUT, self.client.get_async_pubsub()).await {
            Ok(pubsub) => pubsub.map_err(Into::into),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// One `PING`, bounded by the command timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.connection();
        match tokio::time::timeout(
            COMMAND_TIMEOUT,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        {
            Ok(answer) => answer.map(drop).map_err(Into::into),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Whether a probe has run and Redis did not answer it (before the first probe
    /// nothing is known: commands are tried).
    pub fn is_known_down(&self) -> bool {
        self.probed.load(std::sync::atomic::Ordering::Relaxed) && !self.is_up()
    }

    /// Whether Redis answered the last probe.
    pub fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    /// Changes of [`RedisStore::is_up`].
    pub fn watch_up(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// `scheme://host:port` (no credentials, no database).
    pub fn address(&self) -> &str {
        &self.display
    }

    /// Note a command's failure: an unreachable Redis marks the store down at once
    /// (the probe marks it up again), so readiness does not lag a second behind.
    pub fn note_failure(&self, error: &StoreError) {
        if error.is_unavailable() {
            self.set_up(false, Some(error));
        }
    }

    fn set_up(&self, up: bool, error: Option<&StoreError>) {
        let changed = self
            .up
            .send_if_modified(|now| std::mem::replace(now, up) != up);
        if !changed {
            return;
        }
        if up {
            tracing::info!(address = %self.display, "session storage: redis is reachable");
        } else {
            let reason = error.map(ToString::to_string).unwrap_or_default();
            tracing::warn!(address = %self.display, error = %reason, "session storage: redis is unreachable; shared state waits until it is back");
        }
    }
}

async fn probe(store: Weak<RedisStore>) {
    let mut first = true;
    loop {
        let Some(s) = store.upgrade() else { return };
        let answer = s.ping().await;
        match answer {
            Ok(_) => s.set_up(true, None),
            // Down from the start: say so once (the default is down, so set_up is silent).
            Err(e) if first => {
                tracing::warn!(address = %s.display, error = %e, "session storage: redis is unreachable; shared state waits until it is back");
            }
            Err(e) => s.set_up(false, Some(&e)),
        }
        first = false;
        s.probed.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(s);
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}
