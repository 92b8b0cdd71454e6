//! What a backend connection authenticates with when that changes over time (an
//! exchanged or client-credentials token), and how its HTTP client is built.

use std::sync::{Arc, Mutex};

use http::HeaderMap;
use vmcp_layers::context::SubjectToken;
use vmcp_layers::tls::CaBundle;

use super::exchange::{ExchangeError, TokenExchanger};
use super::http_clients::BackendHttp;

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
            exchanger.evict(
                identity,
                headers.and_then(|h| h.get(http::header::AUTHORIZATION)),
            );
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
    /// A client sending `extra` (and the static headers) on every request. A static
    /// header (the strategy's `header_injection`) wins over a caller's value of the
    /// same name: a passed-through header never replaces the operator's secret.
    pub(crate) fn build(&self, extra: &HeaderMap) -> BackendHttp {
        let mut headers = self.headers.clone();
        for (name, value) in extra {
            if self.headers.contains_key(name) {
                tracing::debug!(header = %name, "a passed-through header is set by the backend's strategy; the strategy's value is sent");
                continue;
            }
            let mut value = value.clone();
            value.set_sensitive(true);
            headers.insert(name.clone(), value);
        }
        BackendHttp::build(self.bundle.as_ref(), headers).unwrap_or_else(|e| {
            tracing::error!("{e}; this backend connection uses reqwest's default client");
            BackendHttp::plain()
        })
    }
}
