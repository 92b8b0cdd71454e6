//! The HTTP clients of a backend connection.
//!
//! rmcp's transports (connecting, lists, sessions, event streams) take a
//! `reqwest::Client`. The direct path (`client/direct.rs`, forwarded 2026-07-28
//! calls) sends one POST per call and needs none of reqwest's machinery: its
//! redirect layer alone re-parses the request's URI into a `Url` on every request
//! (reqwest's `TowerRedirectPolicy::on_request`, whatever the policy), and with its
//! retry layer and request builder that was about 25 k instructions of a forwarded
//! call's 215 k. So the direct path gets a bare hyper client with the same TLS
//! rules, timeouts and default headers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
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

/// A bare hyper client (HTTP/1.1, plain or rustls TLS) and the headers every
/// request carries.
#[derive(Clone)]
pub(crate) struct DirectClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    headers: Arc<HeaderMap>,
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
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        let mut headers = headers;
        for value in headers.values_mut() {
            value.set_sensitive(true);
        }
        Self {
            client,
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
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        for (name, value) in self.headers.iter() {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        let mut request = http::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = headers;
        self.client.request(request).await
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
