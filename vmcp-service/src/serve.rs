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

use std::future::{Future, IntoFuture, Pending};
use std::io;

use axum::serve::Listener;
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt;

use crate::rewake::Rewake;

/// Serve `app` on `listener` until the process ends, or with
/// [`Serve::with_graceful_shutdown`] until a signal: a drop-in for `axum::serve`
/// with fewer thread wake-ups per request, for apps without HTTP upgrades (see the
/// module docs).
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
///     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
///     .await
/// # }
/// ```
pub fn serve<L: Listener>(listener: L, app: axum::Router) -> Serve<L, Pending<()>> {
    Serve {
        listener,
        app,
        signal: std::future::pending(),
    }
}

/// The future of [`serve`]: await it (it is [`IntoFuture`]).
#[must_use = "a server does nothing until awaited"]
pub struct Serve<L, F> {
    listener: L,
    app: axum::Router,
    signal: F,
}

impl<L, F> std::fmt::Debug for Serve<L, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve").finish_non_exhaustive()
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
        }
    }
}

impl<L, F> IntoFuture for Serve<L, F>
where
    L: Listener,
    F: Future<Output = ()> + Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = BoxFuture<'static, io::Result<()>>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            mut listener,
            app,
            signal,
        } = self;
        Box::pin(async move {
            let graceful = hyper_util::server::graceful::GracefulShutdown::new();
            let mut signal = std::pin::pin!(signal);
            let http = hyper::server::conn::http1::Builder::new();
            loop {
                let io = tokio::select! {
                    (io, _) = listener.accept() => io,
                    () = &mut signal => break,
                };
                let service = app
                    .clone()
                    .map_request(|req: http::Request<Incoming>| req.map(axum::body::Body::new));
                let connection =
                    http.serve_connection(TokioIo::new(io), TowerToHyperService::<_>::new(service));
                let connection = graceful.watch(connection);
                tokio::spawn(Rewake::new(async move {
                    if let Err(error) = connection.await {
                        tracing::trace!(%error, "connection ended with an error");
                    }
                }));
            }
            drop(listener);
            graceful.shutdown().await;
            Ok::<(), io::Error>(())
        })
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
