//! The HTTP clients of a backend connection.
//!
//! rmcp's transports (connecting, lists, sessions, event streams) take a
//! `reqwest::Client`. The direct path (`client/direct/`, forwarded 2026-07-28
//! calls) sends one POST per call and needs none of reqwest's machinery: its
//! redirect layer alone re-parses the request's URI into a `Url` on every request
//! (reqwest's `TowerRedirectPolicy::on_request`, whatever the policy), and with its
//! retry layer and request builder that was about 25 k instructions of a forwarded
//! call's 215 k. So the direct path gets a bare hyper client with the same TLS
//! rules, timeouts and default headers, and a pool of its own ([`DirectClient`]):
//! at most 64 idle connections per backend, each kept until the backend closes it
//! (its keep-alive timeout) or the client is dropped (a reload that changes the
//! backend's TLS roots or headers, or a per-caller connection retired).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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
/// Its own pool rather than hyper-util's, whose client hands each request to a
/// task per connection and spawns another per request to put the connection back
/// once idle: two task hand-offs and a spawn per forwarded call, on two cores
/// often thread wake-ups, in the latency of every call. Here an HTTP/1.1
/// connection, which carries one request at a time anyway, is checked out by the
/// calling task, which drives it while its request and answer are in flight; the
/// answer's body puts it back when it ends. An idle connection is driven by no
/// one: the next checkout first polls it once, which finds a connection the
/// backend has closed, and skips it.
#[derive(Clone)]
pub(crate) struct DirectClient {
    connector: hyper_rustls::HttpsConnector<HttpConnector>,
    idle: Arc<Idle>,
    headers: Arc<HeaderMap>,
}

type Io = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;
type Connection = hyper::client::conn::http1::Connection<Io, Full<Bytes>>;
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type PoolKey = (http::uri::Scheme, http::uri::Authority);

/// One connection: its request handle and the state machine the holder drives.
struct Pooled {
    sender: Sender,
    connection: Driven,
}

/// A connection's state machine, polled by whoever holds it, never after it ended.
struct Driven {
    connection: Pin<Box<Connection>>,
    ended: bool,
}

impl Driven {
    /// Drive the connection once; `false` once it has ended (closed by the
    /// backend, or failed).
    fn drive(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        if !self.ended {
            self.ended = self.connection.as_mut().poll(cx).is_ready();
        }
        !self.ended
    }

    /// Run `future` (a request on this connection) while driving the connection;
    /// `None` if the connection ended before the future did.
    async fn driving<F: Future>(&mut self, future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| {
            let open = self.drive(cx);
            match future.as_mut().poll(cx) {
                std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
                std::task::Poll::Pending if open => std::task::Poll::Pending,
                std::task::Poll::Pending => std::task::Poll::Ready(None),
            }
        })
        .await
    }
}

impl Pooled {
    /// Whether an idle connection is still open: one poll without a waker reads
    /// any close the backend sent meanwhile.
    fn alive(&mut self) -> bool {
        !self.sender.is_closed()
            && self
                .connection
                .drive(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }
}

/// Idle connections by scheme and authority, at most [`MAX_IDLE_PER_HOST`] each.
/// A list, not a map: a client posts to its backend's one URL (two, at most, across
/// a redirect), and hashing an `Authority` hashes it byte by byte.
#[derive(Default)]
struct Idle(std::sync::Mutex<Vec<(PoolKey, Vec<Pooled>)>>);

impl Idle {
    fn take(&self, key: &PoolKey) -> Option<Pooled> {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (_, connections) = idle.iter_mut().find(|(k, _)| k == key)?;
        while let Some(mut connection) = connections.pop() {
            if connection.alive() {
                return Some(connection);
            }
        }
        None
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        idle.iter().map(|(_, connections)| connections.len()).sum()
    }

    fn put(&self, key: PoolKey, connection: Pooled) {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = match idle.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                idle.push((key, Vec::new()));
                idle.len() - 1
            }
        };
        let connections = &mut idle[at].1;
        if connections.len() < MAX_IDLE_PER_HOST {
            connections.push(connection);
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
    /// The connection ended before the answer.
    #[error("the connection closed before the answer")]
    Closed,
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

    /// How many connections wait in the pool.
    #[cfg(test)]
    pub(crate) fn idle_connections(&self) -> usize {
        self.idle.len()
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
            let mut request = http::Request::new(Full::new(body));
            *request.method_mut() = http::Method::POST;
            // Origin form on the wire, as a client not talking to a proxy sends it.
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = uri.path_and_query().cloned();
            *request.uri_mut() = http::Uri::from_parts(parts).unwrap_or_default();
            *request.headers_mut() = headers;
            request
        };
        // A pooled connection the backend closed before our request reached it is
        // not ready, or gives the request back unsent (hyper's `try_send_request`):
        // nothing was sent, so once more on a new connection.
        let mut request = request(headers);
        if let Some(mut pooled) = self.idle.take(&key)
            && let Some(Ok(())) = pooled
                .connection
                .driving(std::future::poll_fn(|cx| pooled.sender.poll_ready(cx)))
                .await
        {
            let sent = pooled.sender.try_send_request(request);
            match pooled.connection.driving(sent).await {
                Some(Ok(response)) => return Ok(self.pooled(response, pooled, key)),
                Some(Err(mut error)) => match error.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(error.into_error().into()),
                },
                // Perhaps sent: a call is never repeated on a guess.
                None => return Err(DirectHttpError::Closed),
            }
        }
        // Boxed: connecting (TCP, TLS, handshake) is the rare path, and its future
        // inline would make every call's future kilobytes larger, moved each time.
        let mut pooled = Box::pin(self.connect(uri)).await?;
        let sent = pooled.sender.send_request(request);
        match pooled.connection.driving(sent).await {
            Some(response) => Ok(self.pooled(response?, pooled, key)),
            None => Err(DirectHttpError::Closed),
        }
    }

    async fn connect(&self, uri: &http::Uri) -> Result<Pooled, DirectHttpError> {
        use tower::ServiceExt;
        let io = self
            .connector
            .clone()
            .oneshot(uri.clone())
            .await
            .map_err(DirectHttpError::Connect)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        Ok(Pooled {
            sender,
            connection: Driven {
                connection: Box::pin(connection),
                ended: false,
            },
        })
    }

    fn pooled(
        &self,
        response: http::Response<Incoming>,
        connection: Pooled,
        key: PoolKey,
    ) -> http::Response<PooledBody> {
        response.map(|inner| PooledBody {
            inner,
            connection: Some(connection),
            home: Some((key, Arc::downgrade(&self.idle))),
        })
    }
}

pin_project_lite::pin_project! {
    /// An answer's body. Reading it drives its connection, which goes back to the
    /// pool when the body ends; a body dropped before its end closes the
    /// connection (it cannot carry another request).
    pub(crate) struct PooledBody {
        #[pin]
        inner: Incoming,
        // Until the body ends.
        connection: Option<Pooled>,
        home: Option<(PoolKey, std::sync::Weak<Idle>)>,
    }
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody").finish_non_exhaustive()
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
        // The connection first: it moves what the socket has into the body.
        if let Some(pooled) = this.connection.as_mut() {
            pooled.connection.drive(cx);
        }
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none()
            && let Some(mut pooled) = this.connection.take()
            && let Some((key, idle)) = this.home.take()
            // Once more, so it takes the end of the answer in and is ready again.
            && pooled.connection.drive(cx)
            && let Some(idle) = idle.upgrade()
        {
            idle.put(key, pooled);
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
    async fn connections_are_kept_per_authority() {
        let ((one, one_accepted), (two, two_accepted)) =
            tokio::join!(counting_server(usize::MAX), counting_server(usize::MAX));
        let client = DirectClient::new(None, HeaderMap::new());
        for _ in 0..3 {
            post_ok(&client, &one).await;
            post_ok(&client, &two).await;
        }
        // Each server saw one connection: neither's was taken for the other.
        assert_eq!(one_accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(two_accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(client.idle.len(), 2);
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
