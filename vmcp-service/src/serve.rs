//! [`serve`]: `axum::serve` with each connection's task polled through [`Rewake`].
//!
//! A request's body is handed from hyper's connection to the service through a
//! channel, and taking it wakes the connection, which is the same task: tokio then
//! reschedules the task as a yield and wakes a second worker, which finds nothing
//! and parks again (a futex wake and two context switches per request). The
//! service's own future absorbs the wakes it causes itself ([`VmcpService`] does),
//! but this one is the connection's; only the task's outermost future can absorb it.
//! `axum::serve` spawns that future itself, so this is the same loop with the
//! connection wrapped: one HTTP/1.1 connection per task, graceful shutdown as
//! `axum::serve`'s (stop accepting, let requests in flight finish, close idle
//! connections, wait for all), the same [`Listener`]s (`tap_io` included).
//!
//! Unlike `axum::serve` it does not hand connections over to HTTP upgrades: an app
//! with WebSocket routes keeps `axum::serve` (MCP itself never upgrades).
//!
//! [`VmcpService`]: crate::VmcpService

use std::convert::Infallible;
use std::future::{Future, IntoFuture, Pending};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use bytes::Bytes;
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tower::ServiceExt;
use tower::util::Oneshot;

use crate::config::ConnectionLimits;
use crate::connections::{self, Admission, Closable, Conn, InFlight, Tracker};
use crate::rewake::Rewake;

/// How long the 503 to a connection over the cap may take to write.
const REFUSAL_WRITE: Duration = Duration::from_millis(200);

/// Serve `app` on `listener` until the process ends, or with
/// [`Serve::with_graceful_shutdown`] until a signal: a drop-in for `axum::serve`
/// with fewer thread wake-ups per request, for apps without HTTP upgrades (see the
/// module docs).
///
/// Connections are capped and timed out as [`ConnectionLimits::default`] says
/// (change it with [`Serve::with_limits`]; see the `connections` section of
/// docs/configuration.md), and each request carries the peer's address as axum's
/// [`ConnectInfo`] (the per-address session cap of anonymous callers reads it).
///
/// ```no_run
/// # async fn run(gateway: vmcp_service::Vmcp) -> std::io::Result<()> {
/// use axum::serve::ListenerExt;
///
/// let app = axum::Router::new().nest_service("/mcp", gateway.service());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080")
///     .await?
///     .tap_io(|tcp| {
///         let _ = tcp.set_nodelay(true);
///     });
/// vmcp_service::serve(listener, app)
///     .with_limits(gateway.aggregator().config().operational.connections.limits())
///     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
///     .await
/// # }
/// ```
pub fn serve<L: Listener>(listener: L, app: axum::Router) -> Serve<L, Pending<()>> {
    Serve {
        listener,
        app,
        signal: std::future::pending(),
        limits: None,
    }
}

/// The future of [`serve`]: await it (it is [`IntoFuture`]).
#[must_use = "a server does nothing until awaited"]
pub struct Serve<L, F> {
    listener: L,
    app: axum::Router,
    signal: F,
    limits: Option<ConnectionLimits>,
}

impl<L, F> std::fmt::Debug for Serve<L, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl<L, F> Serve<L, F> {
    /// Cap connections and time them out as `limits` says (instead of
    /// [`ConnectionLimits::default`]).
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = Some(limits);
        self
    }
}

impl<L: Listener> Serve<L, Pending<()>> {
    /// Stop accepting when `signal` completes, let the requests in flight finish,
    /// close idle connections, and complete once every connection has closed.
    pub fn with_graceful_shutdown<F>(self, signal: F) -> Serve<L, F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Serve {
            listener: self.listener,
            app: self.app,
            signal,
            limits: self.limits,
        }
    }
}

impl<L, F> IntoFuture for Serve<L, F>
where
    L: Listener,
    L::Addr: Clone + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = BoxFuture<'static, io::Result<()>>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            mut listener,
            app,
            signal,
            limits,
        } = self;
        Box::pin(async move {
            let tracker = Tracker::new(limits.unwrap_or_default());
            tokio::spawn(tracker.clone().sweep());
            let graceful = hyper_util::server::graceful::GracefulShutdown::new();
            let mut signal = std::pin::pin!(signal);
            let http = hyper::server::conn::http1::Builder::new();
            loop {
                let (io, addr) = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = &mut signal => break,
                };
                let registered = match tracker.admit() {
                    Admission::Serve(registered) => registered,
                    Admission::Refuse => {
                        tokio::spawn(refuse(io));
                        continue;
                    }
                };
                let conn = registered.conn.clone();
                let service = PerConnection {
                    app: app.clone(),
                    conn: conn.clone(),
                    addr,
                };
                let io = TokioIo::new(connections::Io::new(io, conn.clone()));
                let connection = graceful.watch(http.serve_connection(io, service));
                tokio::spawn(Rewake::new(async move {
                    let _registered = registered;
                    Closable::new(
                        async move {
                            if let Err(error) = connection.await {
                                tracing::trace!(%error, "connection ended with an error");
                            }
                        },
                        conn,
                    )
                    .await;
                }));
            }
            drop(listener);
            drop(tracker);
            graceful.shutdown().await;
            Ok::<(), io::Error>(())
        })
    }
}

/// Answer a connection over the cap 503 and close it.
async fn refuse<I: tokio::io::AsyncWrite + Unpin>(mut io: I) {
    use tokio::io::AsyncWriteExt;
    let _ = tokio::time::timeout(REFUSAL_WRITE, io.write_all(connections::REFUSAL)).await;
}

/// The app as one connection's hyper service: each request holds the connection in
/// flight until its response body ends, and carries the peer's address.
struct PerConnection<A> {
    app: axum::Router,
    conn: Arc<Conn>,
    addr: A,
}

impl<A: Clone + Send + Sync + 'static> hyper::service::Service<http::Request<Incoming>>
    for PerConnection<A>
{
    type Response = http::Response<Tracked>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: http::Request<Incoming>) -> Answer {
        let Some(guard) = self.conn.enter() else {
            return Answer::Refused;
        };
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(ConnectInfo(self.addr.clone()));
        Answer::Serving {
            future: self.app.clone().oneshot(req),
            guard: Some(guard),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of one request of [`PerConnection`].
    #[project = AnswerProj]
    enum Answer {
        Serving {
            #[pin]
            future: Oneshot<axum::Router, http::Request<Body>>,
            guard: Option<InFlight>,
        },
        Refused,
    }
}

impl Future for Answer {
    type Output = Result<http::Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AnswerProj::Serving { future, guard } => {
                let Ok(response) = std::task::ready!(future.poll(cx));
                let guard = guard.take();
                Poll::Ready(Ok(response.map(|body| Tracked {
                    body,
                    _guard: guard,
                })))
            }
            AnswerProj::Refused => {
                let mut response = http::Response::new(Tracked {
                    body: Body::empty(),
                    _guard: None,
                });
                *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                let headers = response.headers_mut();
                headers.insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
                headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(1u32));
                Poll::Ready(Ok(response))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body holding its connection in flight until it is dropped; the
    /// body's size is kept.
    struct Tracked {
        #[pin]
        body: Body,
        _guard: Option<InFlight>,
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(20);

    async fn get(stream: &mut TcpStream, path: &str) {
        let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
    }

    /// Read one response whose body is `body` (short, so it arrives whole).
    async fn read_response(stream: &mut TcpStream, body: &str) -> String {
        let mut response = Vec::new();
        let mut buf = [0u8; 1024];
        while !response.ends_with(body.as_bytes()) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the response: {response:?}");
            response.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(response).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn graceful_shutdown_finishes_requests_in_flight_and_closes_idle_connections() {
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
        let entered = std::sync::Arc::new(std::sync::Mutex::new(Some(entered_tx)));
        let release = std::sync::Arc::new(tokio::sync::Notify::new());
        let released = release.clone();
        let app = axum::Router::new()
            .route("/fast", axum::routing::get(|| async { "fast-answer" }))
            .route(
                "/slow",
                axum::routing::get(move || async move {
                    let tx = entered.lock().unwrap().take();
                    if let Some(tx) = tx {
                        let _ = tx.send(());
                    }
                    released.notified().await;
                    "slow-answer"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .into_future(),
        );

        // An idle keep-alive connection, after one answered request.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        get(&mut idle, "/fast").await;
        let first = read_response(&mut idle, "fast-answer").await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        // A request in flight.
        let mut busy = TcpStream::connect(addr).await.unwrap();
        get(&mut busy, "/slow").await;
        tokio::time::timeout(LIMIT, entered_rx)
            .await
            .unwrap()
            .unwrap();

        stop_tx.send(()).unwrap();
        // The idle connection is closed: its next read sees the end.
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(LIMIT, idle.read(&mut buf))
            .await
            .expect("the idle connection was not closed")
            .unwrap_or(0);
        assert_eq!(n, 0, "nothing but the close on the idle connection");
        assert!(!server.is_finished(), "a request is still in flight");

        release.notify_one();
        let answer = tokio::time::timeout(LIMIT, read_response(&mut busy, "slow-answer"))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::timeout(LIMIT, server)
            .await
            .expect("serve did not end after its last connection")
            .unwrap()
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
