//! The load client: raw HTTP/1.1 over hyper's connection API, one keep-alive TCP
//! connection per simulated client, request bodies and headers built ahead of time.
//! It is deliberately thin so that what is measured is the server; its own CPU time
//! is reported next to the servers' (see `throughput.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The MCP revision a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25: one `initialize`d session per client, `Mcp-Session-Id` on every request.
    Legacy,
    /// 2026-07-28: stateless requests with per-request `_meta`.
    Modern,
}

impl Revision {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Revision::Legacy => "legacy",
            Revision::Modern => "modern",
        }
    }
}

/// The operation a load run repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `tools/call` of the target's tool with `{"text": "hello"}`.
    Call,
    /// `tools/list` (first page).
    List,
}

impl Op {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Op::Call => "tools/call",
            Op::List => "tools/list",
        }
    }
}

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The server's address (loopback).
    pub addr: SocketAddr,
    /// The name of the tool `Op::Call` calls, as this target advertises it.
    pub tool: String,
    /// Headers added to every request (for example `Authorization`).
    pub extra_headers: HeaderMap,
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"vmcp-bench","version":"0"}}"#;

/// One prepared request: fixed headers and a body split around the JSON-RPC id.
#[derive(Clone)]
pub struct Prepared {
    uri: Uri,
    headers: HeaderMap,
    head: Bytes,
    tail: Bytes,
}

impl Prepared {
    fn new(
        target: &Target,
        revision: Revision,
        method: &str,
        params: &str,
        name: Option<&str>,
    ) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            HOST,
            HeaderValue::from_str(&target.addr.to_string()).expect("addr"),
        );
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let version = match revision {
            Revision::Legacy => "2025-11-25",
            Revision::Modern => "2026-07-28",
        };
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static(version),
        );
        if revision == Revision::Modern {
            headers.insert(
                HeaderName::from_static("mcp-method"),
                HeaderValue::from_str(method).expect("method"),
            );
            if let Some(name) = name {
                headers.insert(
                    HeaderName::from_static("mcp-name"),
                    HeaderValue::from_str(name).expect("name"),
                );
            }
        }
        for (k, v) in &target.extra_headers {
            headers.insert(k.clone(), v.clone());
        }
        Self {
            uri: Uri::from_static("/mcp"),
            headers,
            head: Bytes::from(r#"{"jsonrpc":"2.0","id":"#.to_owned()),
            tail: Bytes::from(format!(r#","method":"{method}","params":{params}}}"#)),
        }
    }

    /// A `tools/call` of the target's tool with `arguments` (a JSON object).
    pub fn call(target: &Target, revision: Revision, arguments: &str) -> Self {
        Self::with_arguments(target, revision, Op::Call, None, arguments)
    }

    fn op(target: &Target, revision: Revision, op: Op, cursor: Option<&str>) -> Self {
        Self::with_arguments(target, revision, op, cursor, r#"{"text":"hello"}"#)
    }

    fn with_arguments(
        target: &Target,
        revision: Revision,
        op: Op,
        cursor: Option<&str>,
        arguments: &str,
    ) -> Self {
        let meta = match revision {
            Revision::Legacy => String::new(),
            Revision::Modern => format!(r#""_meta":{META}"#),
        };
        let join = |parts: &[String]| {
            let parts: Vec<&str> = parts
                .iter()
                .map(String::as_str)
                .filter(|p| !p.is_empty())
                .collect();
            format!("{{{}}}", parts.join(","))
        };
        match op {
            Op::Call => {
                let params = join(&[
                    format!(r#""name":{}"#, json!(target.tool)),
                    format!(r#""arguments":{arguments}"#),
                    meta,
                ]);
                Self::new(target, revision, "tools/call", &params, Some(&target.tool))
            }
            Op::List => {
                let cursor = cursor
                    .map(|c| format!(r#""cursor":{}"#, json!(c)))
                    .unwrap_or_default();
                let params = join(&[cursor, meta]);
                Self::new(target, revision, "tools/list", &params, None)
            }
        }
    }

    fn request(&self, id: u64, session: Option<&HeaderValue>) -> Request<Full<Bytes>> {
        let mut body = BytesMut::with_capacity(self.head.len() + self.tail.len() + 20);
        body.put_slice(&self.head);
        body.put_slice(id.to_string().as_bytes());
        body.put_slice(&self.tail);
        let mut request = Request::new(Full::new(body.freeze()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        if let Some(session) = session {
            request
                .headers_mut()
                .insert(HeaderName::from_static("mcp-session-id"), session.clone());
        }
        request
    }
}

/// One client connection (and, for Legacy, its session).
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    session: Option<HeaderValue>,
    next_id: u64,
}

impl Client {
    /// Open a connection to `target`; for Legacy, also `initialize` a session.
    pub async fn connect(target: &Target, revision: Revision) -> anyhow::Result<Self> {
        let mut client = Self::open(target).await?;
        if revision == Revision::Legacy {
            client.initialize(target).await?;
        }
        Ok(client)
    }

    /// Open a connection to `target` that sends the Legacy session `session` (one
    /// opened elsewhere, for example on another replica), without `initialize`.
    pub async fn resume(target: &Target, session: HeaderValue) -> anyhow::Result<Self> {
        let mut client = Self::open(target).await?;
        client.session = Some(session);
        Ok(client)
    }

    /// The Legacy session id, once initialized.
    pub fn session(&self) -> Option<&HeaderValue> {
        self.session.as_ref()
    }

    async fn open(target: &Target) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("connect {}", target.addr))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self {
            sender,
            session: None,
            next_id: 1,
        })
    }

    /// Run the 2025-11-25 handshake on this connection and keep the session id.
    pub async fn initialize(&mut self, target: &Target) -> anyhow::Result<()> {
        let init = Prepared::new(
            target,
            Revision::Legacy,
            "initialize",
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"vmcp-bench","version":"0"}}"#,
            None,
        );
        let mut request = init.request(0, None);
        request.headers_mut().remove("mcp-protocol-version");
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let session = response
            .headers()
            .get("mcp-session-id")
            .cloned()
            .context("initialize answered without Mcp-Session-Id")?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK || memchr::memmem::find(&body, b"\"result\"").is_none() {
            bail!(
                "initialize failed: {status} {}",
                String::from_utf8_lossy(&body)
            );
        }
        let mut note = Request::new(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )));
        *note.method_mut() = Method::POST;
        *note.uri_mut() = init.uri.clone();
        *note.headers_mut() = init.headers.clone();
        note.headers_mut()
            .insert(HeaderName::from_static("mcp-session-id"), session.clone());
        self.sender.ready().await?;
        let response = self.sender.send_request(note).await?;
        let status = response.status();
        let _ = response.into_body().collect().await?;
        if status != StatusCode::ACCEPTED {
            bail!("notifications/initialized answered {status}");
        }
        self.session = Some(session);
        Ok(())
    }

    /// Send `prepared`; the body of a 200 answer carrying a `"result"`, else `Err`.
    pub async fn send(&mut self, prepared: &Prepared) -> anyhow::Result<Bytes> {
        let request = prepared.request(self.next_id, self.session.as_ref());
        self.next_id += 1;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK || memchr::memmem::find(&body, b"\"result\"").is_none() {
            bail!("{status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }

    /// One request of `op`; returns the response body (JSON or SSE).
    pub async fn once(
        &mut self,
        target: &Target,
        revision: Revision,
        op: Op,
    ) -> anyhow::Result<Bytes> {
        self.send(&Prepared::op(target, revision, op, None)).await
    }

    /// Every page of `tools/list`, following `nextCursor`; returns the tool count
    /// and the number of pages.
    pub async fn list_all(
        &mut self,
        target: &Target,
        revision: Revision,
    ) -> anyhow::Result<(usize, usize)> {
        let mut cursor: Option<String> = None;
        let (mut tools, mut pages) = (0, 0);
        loop {
            let prepared = Prepared::op(target, revision, Op::List, cursor.as_deref());
            let body = self.send(&prepared).await?;
            let page = list_page(&body)?;
            tools += page.result.tools.len();
            pages += 1;
            match page.result.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok((tools, pages)),
            }
        }
    }
}

/// One `tools/list` answer, read as a client that wants the tools and the cursor
/// would: typed, the whole body parsed and checked, but without building a
/// `Value` tree of the page (which cost the load client more than the gateway
/// spent serving the 5,000-tool pages).
#[derive(serde::Deserialize)]
struct ListPage {
    result: ListPageResult,
}

#[derive(serde::Deserialize)]
struct ListPageResult {
    tools: Vec<serde::de::IgnoredAny>,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<String>,
}

/// A `tools/list` answer in a JSON or SSE body.
fn list_page(body: &[u8]) -> anyhow::Result<ListPage> {
    if let Ok(page) = serde_json::from_slice::<ListPage>(body) {
        return Ok(page);
    }
    let text = std::str::from_utf8(body)?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str::<ListPage>(d.trim()).ok())
        .context("no tools/list answer in the body")
}

/// The JSON-RPC response in a JSON or SSE body.
pub fn jsonrpc_message(body: &[u8]) -> anyhow::Result<Value> {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        return Ok(value);
    }
    let text = std::str::from_utf8(body)?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .context("no JSON-RPC response in the body")
}

/// Is `message` a real success of `op`: the echoed text of a call (not a tool
/// error), a non-empty tool list?
fn succeeded(message: &Value, op: Op) -> bool {
    let result = &message["result"];
    match op {
        Op::Call => {
            result["isError"] != true
                && result["content"][0]["text"]
                    .as_str()
                    .is_some_and(|text| text.ends_with(": hello"))
        }
        Op::List => result["tools"].as_array().is_some_and(|t| !t.is_empty()),
    }
}

/// What one load run measured.
#[derive(Debug, Default)]
pub struct LoadResult {
    /// Latency of every request started in the measurement window, in nanoseconds.
    pub latencies: Vec<u64>,
    /// Length of the measurement window.
    pub window: Duration,
}

/// `clients` connections repeat `op` back to back: `warmup` unmeasured, then
/// `window` measured. The first response is checked in full (see [`succeeded`]),
/// every other one for status 200 and a `"result"`. Fails on the first failed
/// request.
pub async fn load(
    target: &Target,
    revision: Revision,
    op: Op,
    clients: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<LoadResult> {
    let prepared = Prepared::op(target, revision, op, None);
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(Client::connect(target, revision).await?);
    }
    // Validate once, fully, before timing anything.
    let body = connected[0].send(&prepared).await?;
    let message = jsonrpc_message(&body)?;
    if !succeeded(&message, op) {
        bail!("unexpected answer: {message}");
    }
    let measure_from = Instant::now() + warmup;
    let stop_at = measure_from + window;
    let mut tasks = tokio::task::JoinSet::new();
    for mut client in connected {
        let prepared = prepared.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            loop {
                let start = Instant::now();
                if start >= stop_at {
                    break;
                }
                client.send(&prepared).await?;
                if start >= measure_from {
                    latencies.push(start.elapsed().as_nanos() as u64);
                }
            }
            anyhow::Ok(latencies)
        });
    }
    let mut result = LoadResult {
        window,
        ..Default::default()
    };
    while let Some(joined) = tasks.join_next().await {
        result.latencies.extend(joined??);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_pages_are_read_from_json_and_event_streams() {
        let json = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b"}],"nextCursor":"c2"}}"#;
        let page = list_page(json).unwrap();
        assert_eq!(page.result.tools.len(), 2);
        assert_eq!(page.result.next_cursor.as_deref(), Some("c2"));
        let sse = b"id: 0\ndata: \n\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{}]}}\n\n";
        let page = list_page(sse).unwrap();
        assert_eq!(page.result.tools.len(), 1);
        assert_eq!(page.result.next_cursor, None);
        assert!(
            list_page(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#)
                .is_err()
        );
        assert!(list_page(br#"{"result":{"tools":[1,2,]}}"#).is_err());
    }
}
