//! The HTTP clients of a backend connection.
//!
//! rmcp's transports (connecting, lists, sessions, event streams) take a
//! `reqwest::Client`. The direct path (`client/direct.rs`, forwarded 2026-07-28
//! calls) sends one POST per call and needs none of reqwest's machinery: its
//! redirect layer alone re-parses the request's URI into a `Url` on every request
//! (reqwest's `TowerRedirectPolicy::on_request`, whatever the policy), and with its
//! retry layer and request builder that was about 25 k instructions of a forwarded
//! call's 215 k. So the direct path gets a bare hyper client with the same TLS
//! rules, timeouts and default headers, and a pool of its own ([`DirectClient`]):
//! at most 64 idle connections per backend, each kept until the backend closes it
//! (its keep-alive timeout) or the client is dropped (a reload that changes the
//! backend's TLS roots or headers, or a per-caller connection retired).

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;
use std::pin::Pin;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use vmcp_layers::tls::{CaBundle, TlsError};

/// Bound on one TCP (and TLS) connect to a backend.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keep-alive, so a peer that vanished is noticed on idle streams.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Idle connections kept per backend.
const MAX_IDLE_PER_HOST: usize = 64;

/// Proxy variables reqwest honours. Only reqwest does: with one of them set, calls
/// stay on rmcp's path (through the proxy) instead of the direct one.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The clients one backend connection uses, sharing TLS rules and default headers.
#[derive(Clone)]
pub(crate) struct BackendHttp {
    /// For rmcp's transports.
    pub(crate) reqwest: reqwest::Client,
    /// For the direct path; `None` when the environment names a proxy.
    pub(crate) direct: Option<DirectClient>,
}

impl BackendHttp {
    /// Clients trusting the default roots plus `extra`, sending `headers` on every
    /// request. No total or read timeout: backend event streams (Legacy GET,
    /// `subscriptions/listen`) are long-lived and may be idle for minutes; every
    /// request carries its own deadline (`operational.timeouts`) instead.
    pub(crate) fn build(extra: Option<&CaBundle>, headers: HeaderMap) -> Result<Self, TlsError> {
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(TCP_KEEPALIVE)
            .default_headers(headers.clone());
        let reqwest = vmcp_layers::tls::http_client(builder, extra)?;
        let direct = (!proxy_configured()).then(|| DirectClient::new(extra, headers));
        Ok(Self { reqwest, direct })
    }

    /// reqwest's defaults and no direct client (tests, and the fallback when the
    /// configured TLS rules cannot be built).
    pub(crate) fn plain() -> Self {
        Self {
            reqwest: reqwest::Client::new(),
            direct: None,
        }
    }
}

fn proxy_configured() -> bool {
    names_a_proxy(|name| std::env::var_os(name))
}

/// Whether `var` gives a non-empty value for one of reqwest's proxy variables.
fn names_a_proxy(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    PROXY_VARIABLES
        .iter()
        .any(|name| var(name).is_some_and(|v| !v.is_empty()))
}

/// A bare hyper HTTP/1.1 client (plain or rustls TLS) with its own connection
/// pool, and the headers every request carries.
///
/// Its own pool rather than hyper-util's: hyper-util's client spawns a task per
/// request to put the connection back once it is idle, a task spawn and a
/// wake-up (on two cores, often a thread wake-up) per forwarded call. Here the
/// answer's body puts its connection back when it ends. Each connection is
/// driven by one task for its whole life, which also notices a backend closing
/// it while idle.
#[derive(Clone)]
pub(crate) struct DirectClient {
    connector: hyper_rustls::HttpsConnector<HttpConnector>,
    idle: Arc<Idle>,
    headers: Arc<HeaderMap>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type PoolKey = (http::uri::Scheme, http::uri::Authority);

/// Idle connections by scheme and authority, at most [`MAX_IDLE_PER_HOST`] each.
#[derive(Default)]
struct Idle(std::sync::Mutex<HashMap<PoolKey, Vec<Sender>>>);

impl Idle {
    fn take(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.get_mut(key)?;
        while let Some(sender) = senders.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, key: PoolKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.entry(key).or_default();
        senders.retain(|s| !s.is_closed());
        if senders.len() < MAX_IDLE_PER_HOST {
            senders.push(sender);
        }
    }
}

/// Why a direct request failed below HTTP.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DirectHttpError {
    /// The URI has no scheme or authority.
    #[error("not an absolute http(s) URI")]
    Uri,
    /// Connecting (TCP, TLS) failed.
    #[error("connect: {0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The HTTP exchange failed.
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

impl std::fmt::Debug for DirectClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the headers: they may be credentials.
        f.debug_struct("DirectClient").finish_non_exhaustive()
    }
}

impl DirectClient {
    /// A client trusting the default roots plus `extra`, sending `headers` on
    /// every request.
    pub(crate) fn new(extra: Option<&CaBundle>, headers: HeaderMap) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        // reqwest's default too; an MCP request leaves in one write, but its answer
        // must not wait for a delayed ACK.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        let tls = (*vmcp_layers::tls::client_config(extra)).clone();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let mut headers = headers;
        for value in headers.values_mut() {
            value.set_sensitive(true);
        }
        Self {
            connector,
            idle: Arc::default(),
            headers: Arc::new(headers),
        }
    }

    /// POST `body` to `uri` with `headers`, plus the default headers it does not
    /// set itself (reqwest's rule for default headers).
    pub(crate) async fn post(
        &self,
        uri: &http::Uri,
        mut headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<http::Response<PooledBody>, DirectHttpError> {
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(DirectHttpError::Uri);
        };
        let key: PoolKey = (scheme.clone(), authority.clone());
        for (name, value) in self.headers.iter() {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        if !headers.contains_key(http::header::HOST)
            && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
        {
            headers.insert(http::header::HOST, host);
        }
        let body = Bytes::from(body);
        let request = |headers: HeaderMap| {
            let mut request = http::Request::new(Full::new(body.clone()));
            *request.method_mut() = http::Method::POST;
            // Origin form on the wire, as a client not talking to a proxy sends it.
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = uri.path_and_query().cloned();
            *request.uri_mut() = http::Uri::from_parts(parts).unwrap_or_default();
            *request.headers_mut() = headers;
            request
        };
        // A pooled connection the backend closed before our request reached it
        // fails with `is_canceled`: nothing was sent, so once more on a new one.
        if let Some(mut sender) = self.idle.take(&key)
            && sender.ready().await.is_ok()
        {
            match sender.send_request(request(headers.clone())).await {
                Ok(response) => return Ok(self.pooled(response, sender, key)),
                Err(error) if !error.is_canceled() => return Err(error.into()),
                Err(_) => {}
            }
        }
        let mut sender = self.connect(uri).await?;
        let response = sender.send_request(request(headers)).await?;
        Ok(self.pooled(response, sender, key))
    }

    async fn connect(&self, uri: &http::Uri) -> Result<Sender, DirectHttpError> {
        use tower::ServiceExt;
        let io = self
            .connector
            .clone()
            .oneshot(uri.clone())
            .await
            .map_err(DirectHttpError::Connect)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!("a direct backend connection ended: {error}");
            }
        });
        Ok(sender)
    }

    fn pooled(
        &self,
        response: http::Response<Incoming>,
        sender: Sender,
        key: PoolKey,
    ) -> http::Response<PooledBody> {
        response.map(|inner| PooledBody {
            inner,
            home: Some((sender, key, Arc::downgrade(&self.idle))),
        })
    }
}

pin_project_lite::pin_project! {
    /// An answer's body; its connection goes back to the pool when it ends (or is
    /// dropped: a connection whose body was not read to the end closes, and the
    /// pool skips closed connections).
    pub(crate) struct PooledBody {
        #[pin]
        inner: Incoming,
        home: Option<(Sender, PoolKey, std::sync::Weak<Idle>)>,
    }

    impl PinnedDrop for PooledBody {
        fn drop(this: Pin<&mut Self>) {
            if let Some(home) = this.project().home.take() {
                go_home(home);
            }
        }
    }
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody").finish_non_exhaustive()
    }
}

fn go_home((sender, key, idle): (Sender, PoolKey, std::sync::Weak<Idle>)) {
    if let Some(idle) = idle.upgrade() {
        idle.put(key, sender);
    }
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none()
            && let Some(home) = this.home.take()
        {
            go_home(home);
        }
        std::task::Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn default_headers_do_not_override_the_requests_own() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while !seen.ends_with(b"{}") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(seen).unwrap().to_ascii_lowercase()
        });
        let mut defaults = HeaderMap::new();
        defaults.insert("authorization", "Bearer static".parse().unwrap());
        defaults.insert("x-tenant", "default".parse().unwrap());
        let client = DirectClient::new(None, defaults);
        let mut own = HeaderMap::new();
        own.insert("x-tenant", "mine".parse().unwrap());
        let response = client.post(&uri, own, b"{}".to_vec()).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::NO_CONTENT);
        let request = server.await.unwrap();
        assert!(request.starts_with("post /mcp http/1.1\r\n"), "{request}");
        assert!(
            request.contains("authorization: bearer static\r\n"),
            "{request}"
        );
        assert!(request.contains("x-tenant: mine\r\n"), "{request}");
        assert!(!request.contains("x-tenant: default"), "{request}");
        assert!(request.contains("content-length: 2\r\n"), "{request}");
    }

    /// A keep-alive HTTP/1.1 server answering `{}` bodies with 200 `ok`; it
    /// closes each connection after `per_connection` answers, the last one saying
    /// `connection: close`. Returns its URI and how many connections it accepted.
    async fn counting_server(
        per_connection: usize,
    ) -> (http::Uri, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    for answered in 1..=per_connection {
                        let mut seen = Vec::new();
                        while !seen.ends_with(b"{}") {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        let answer: &[u8] = if answered == per_connection {
                            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
                        } else {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                        };
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (uri, accepted)
    }

    async fn post_ok(client: &DirectClient, uri: &http::Uri) {
        use http_body_util::BodyExt;
        let response = client
            .post(uri, HeaderMap::new(), b"{}".to_vec())
            .await
            .unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
    }

    #[tokio::test]
    async fn a_read_answer_returns_its_connection_to_the_pool() {
        let (uri, accepted) = counting_server(usize::MAX).await;
        let client = DirectClient::new(None, HeaderMap::new());
        for _ in 0..5 {
            post_ok(&client, &uri).await;
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Two at once need two connections; both are kept.
        let (a, b) = tokio::join!(
            client.post(&uri, HeaderMap::new(), b"{}".to_vec()),
            client.post(&uri, HeaderMap::new(), b"{}".to_vec()),
        );
        drop((a.unwrap(), b.unwrap()));
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_the_backend_closed_is_replaced() {
        // One answer per connection, then the server closes it.
        let (uri, accepted) = counting_server(1).await;
        let client = DirectClient::new(None, HeaderMap::new());
        for round in 1..=3 {
            post_ok(&client, &uri).await;
            assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn an_unreachable_backend_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri: http::Uri = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let client = DirectClient::new(None, HeaderMap::new());
        let error = client
            .post(&uri, HeaderMap::new(), b"{}".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(error, DirectHttpError::Connect(_)), "{error:?}");
        let relative: http::Uri = "/mcp".parse().unwrap();
        assert!(matches!(
            client.post(&relative, HeaderMap::new(), Vec::new()).await,
            Err(DirectHttpError::Uri)
        ));
    }

    #[test]
    fn any_proxy_variable_keeps_calls_on_reqwest() {
        assert!(!names_a_proxy(|_| None));
        assert!(!names_a_proxy(|_| Some("".into())));
        for variable in PROXY_VARIABLES {
            assert!(names_a_proxy(|name| {
                (name == variable).then(|| "http://proxy:3128".into())
            }));
        }
        // NO_PROXY alone names no proxy.
        assert!(!names_a_proxy(
            |name| (name == "NO_PROXY").then(|| "*".into())
        ));
    }

    #[test]
    fn headers_are_never_in_debug_output() {
        let mut defaults = HeaderMap::new();
        defaults.insert("authorization", "Bearer s3cret".parse().unwrap());
        let client = DirectClient::new(None, defaults);
        assert!(!format!("{client:?}").contains("s3cret"));
    }
}
