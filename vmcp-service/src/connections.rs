//! The client connections of [`serve`](crate::serve): a cap, a header-read timeout
//! and an idle timeout, without a timer per connection or per request.
//!
//! Each connection has a [`Conn`] of a few atomics: how many requests it has in
//! flight, since when it waits for a request head (accept, or the first byte of a
//! kept-alive connection's next head), and since when it is idle. A request costs
//! two atomic additions and one clock read. A sweeper visits every connection a few
//! times per timeout and closes those past theirs; nothing is armed per request.
//!
//! **Fair refusal.** At `maxConnections` a new connection is not refused while an
//! older one is merely waiting: the connection that has waited longest for a
//! request head is closed (a client that connected and sent nothing, or sends its
//! headers slowly), else the one idle longest since its last answer. Only when
//! every connection has a request in flight is the new one answered 503 and closed.
//! A legitimate client's connection is in flight or freshly idle, so a flood of
//! idle or slow-header connections is evicted before it; a client whose request
//! head arrives promptly is always served.
//!
//! Eviction and a request's start race on one atomic word: a connection is closed
//! only while nothing is in flight on it, and a request arriving on a connection
//! already chosen is answered 503 (`Connection: close`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::ConnectionLimits;

/// Set in [`Conn::word`] once the connection is chosen to close (or has ended).
const CLOSED: u32 = 1 << 31;
/// The requests-in-flight part of [`Conn::word`].
const IN_FLIGHT: u32 = CLOSED - 1;

/// Sweeps at least this often (so a timeout is honoured within a quarter of it)...
const SWEEP_AT_MOST_EVERY: Duration = Duration::from_secs(1);
/// ...and at most this often.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_millis(50);

/// One client connection's state.
pub(crate) struct Conn {
    /// Requests in flight (a request holds one from the service's call to the end
    /// of its response body), and [`CLOSED`].
    word: AtomicU32,
    /// Milliseconds (from the tracker's epoch, plus one) since the connection waits
    /// for a request head: its accept, or the first byte of a kept-alive
    /// connection's next head. 0: not waiting for a head (idle or in flight).
    head_since: AtomicU64,
    /// Milliseconds (as above) since the connection is idle after its last answer.
    idle_since: AtomicU64,
    /// Wakes the connection's task to close it.
    waker: AtomicWaker,
    epoch: Instant,
}

impl Conn {
    fn now(&self) -> u64 {
        millis(self.epoch)
    }

    fn in_flight(&self) -> bool {
        self.word.load(Ordering::Relaxed) & IN_FLIGHT != 0
    }

    /// Close it if nothing is in flight: true if this call chose it.
    fn evict(&self) -> bool {
        let chosen = self
            .word
            .compare_exchange(0, CLOSED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if chosen {
            self.waker.wake();
        }
        chosen
    }

    /// Record bytes read: the first while it waits idle starts its head's clock.
    fn on_read(&self) {
        if self.head_since.load(Ordering::Relaxed) == 0 && !self.in_flight() {
            self.head_since.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A request starts: `None` if the connection is being closed.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<InFlight> {
        let before = self.word.fetch_add(1, Ordering::AcqRel);
        // Its head is whole: no head clock while in flight.
        self.head_since.store(0, Ordering::Relaxed);
        let guard = InFlight(self.clone());
        (before & CLOSED == 0).then_some(guard)
    }
}

/// Milliseconds since `epoch`, plus one (0 means "not set").
fn millis(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Held by a request from the service's call to the end of its response body.
pub(crate) struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let conn = &self.0;
        conn.idle_since.store(conn.now(), Ordering::Relaxed);
        conn.word.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which waiting connection goes first at the cap: a head awaited longest, then
/// the longest idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Waiting {
    Head(u64),
    Idle(u64),
}

/// Every open connection of one [`serve`](crate::serve).
pub(crate) struct Tracker {
    limits: ConnectionLimits,
    epoch: Instant,
    /// Open connections not chosen to close.
    open: AtomicUsize,
    /// The connections, in slots reused after they end.
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    conns: Vec<Option<Arc<Conn>>>,
    free: Vec<usize>,
}

/// What [`Tracker::admit`] decided for a new connection.
pub(crate) enum Admission {
    /// Serve it; drop the [`Registered`] when it ends.
    Serve(Registered),
    /// Every connection has a request in flight: answer 503 and close it.
    Refuse,
}

/// A connection's place in the tracker; frees it when dropped.
pub(crate) struct Registered {
    tracker: Arc<Tracker>,
    slot: usize,
    pub(crate) conn: Arc<Conn>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Counted out once: here, or when it was chosen to close.
        if self.conn.word.fetch_or(CLOSED, Ordering::AcqRel) & CLOSED == 0 {
            self.tracker.open.fetch_sub(1, Ordering::AcqRel);
        }
        let mut slots = self.tracker.slots();
        if let Some(entry) = slots.conns.get_mut(self.slot) {
            *entry = None;
            slots.free.push(self.slot);
        }
    }
}

impl Tracker {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            epoch: Instant::now(),
            open: AtomicUsize::new(0),
            slots: Mutex::new(Slots::default()),
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open connections (not counting those chosen to close).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Admit a new connection, closing a waiting one first at the cap (see the
    /// module docs).
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let now = millis(self.epoch);
        let mut slots = self.slots();
        if self.open.load(Ordering::Acquire) >= self.limits.max_connections {
            let victim = slots
                .conns
                .iter()
                .flatten()
                .filter_map(|conn| waiting(conn).map(|w| (w, conn)))
                .min_by_key(|(w, _)| *w);
            match victim {
                Some((_, conn)) if conn.evict() => {
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    tracing::debug!(
                        "connection cap reached: closed the longest-waiting connection"
                    );
                }
                _ => {
                    tracing::debug!("connection cap reached, every connection busy: refused one");
                    return Admission::Refuse;
                }
            }
        }
        let conn = Arc::new(Conn {
            word: AtomicU32::new(0),
            head_since: AtomicU64::new(now),
            idle_since: AtomicU64::new(now),
            waker: AtomicWaker::new(),
            epoch: self.epoch,
        });
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.conns[slot] = Some(conn.clone());
                slot
            }
            None => {
                slots.conns.push(Some(conn.clone()));
                slots.conns.len() - 1
            }
        };
        self.open.fetch_add(1, Ordering::AcqRel);
        Admission::Serve(Registered {
            tracker: self.clone(),
            slot,
            conn,
        })
    }

    /// Close the connections past their header-read or idle timeout, every so often,
    /// until the tracker is dropped elsewhere.
    pub(crate) async fn sweep(self: Arc<Self>) {
        let shortest = self
            .limits
            .header_read_timeout
            .min(self.limits.idle_timeout);
        let every = (shortest / 4).clamp(SWEEP_AT_LEAST_EVERY, SWEEP_AT_MOST_EVERY);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let header = duration_millis(self.limits.header_read_timeout);
        let idle = duration_millis(self.limits.idle_timeout);
        loop {
            tick.tick().await;
            if Arc::strong_count(&self) == 1 {
                return;
            }
            let now = millis(self.epoch);
            let mut closed = 0usize;
            for conn in self.slots().conns.iter().flatten() {
                let expired = match waiting(conn) {
                    Some(Waiting::Head(since)) => now.saturating_sub(since) >= header,
                    Some(Waiting::Idle(since)) => now.saturating_sub(since) >= idle,
                    None => false,
                };
                if expired && conn.evict() {
                    closed += 1;
                }
            }
            if closed > 0 {
                self.open.fetch_sub(closed, Ordering::AcqRel);
                tracing::debug!(
                    closed,
                    "closed connections past their header-read or idle timeout"
                );
            }
        }
    }
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What `conn` is waiting for, if it waits at all (not in flight, not closing).
fn waiting(conn: &Conn) -> Option<Waiting> {
    if conn.word.load(Ordering::Acquire) != 0 {
        return None;
    }
    match conn.head_since.load(Ordering::Relaxed) {
        0 => Some(Waiting::Idle(conn.idle_since.load(Ordering::Relaxed))),
        since => Some(Waiting::Head(since)),
    }
}

pin_project_lite::pin_project! {
    /// A connection's future, ended (dropping the connection, so closing its
    /// socket) once the tracker chooses it to close.
    pub(crate) struct Closable<F> {
        #[pin]
        future: F,
        conn: Arc<Conn>,
    }
}

impl<F> Closable<F> {
    pub(crate) fn new(future: F, conn: Arc<Conn>) -> Self {
        Self { future, conn }
    }
}

impl<F: Future<Output = ()>> Future for Closable<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        this.conn.waker.register(cx.waker());
        // Chosen only while nothing is in flight: dropping loses no request.
        if this.conn.word.load(Ordering::Acquire) & CLOSED != 0 && !this.conn.in_flight() {
            return Poll::Ready(());
        }
        this.future.poll(cx)
    }
}

pin_project_lite::pin_project! {
    /// A connection's IO, noting when the bytes of a request head start to arrive.
    pub(crate) struct Io<T> {
        #[pin]
        inner: T,
        conn: Arc<Conn>,
    }
}

impl<T> Io<T> {
    pub(crate) fn new(inner: T, conn: Arc<Conn>) -> Self {
        Self { inner, conn }
    }
}

impl<T: AsyncRead> AsyncRead for Io<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let poll = this.inner.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.conn.on_read();
        }
        poll
    }
}

impl<T: AsyncWrite> AsyncWrite for Io<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The answer to a connection over the cap when every other has a request in
/// flight, and to a request on a connection being closed.
pub(crate) const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(max: usize) -> Arc<Tracker> {
        Tracker::new(ConnectionLimits {
            max_connections: max,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        })
    }

    fn serve(admission: Admission) -> Registered {
        match admission {
            Admission::Serve(registered) => registered,
            Admission::Refuse => panic!("refused"),
        }
    }

    #[test]
    fn at_the_cap_a_head_awaited_goes_before_an_idle_one_and_busy_ones_stay() {
        let tracker = tracker(3);
        let served = serve(tracker.admit());
        drop(served.conn.enter().expect("a request"));
        let busy = serve(tracker.admit());
        let _call = busy.conn.enter().expect("a request");
        let silent = serve(tracker.admit());
        assert_eq!(tracker.open(), 3);

        // The silent one (waiting for its first head) goes first...
        let fourth = serve(tracker.admit());
        assert_ne!(silent.conn.word.load(Ordering::Acquire) & CLOSED, 0);
        assert!(silent.conn.enter().is_none(), "a request on it is refused");
        // ...then the idle one...
        let _fourth_call = fourth.conn.enter().expect("a request");
        let fifth = serve(tracker.admit());
        assert_ne!(served.conn.word.load(Ordering::Acquire) & CLOSED, 0);
        assert_eq!(busy.conn.word.load(Ordering::Acquire) & CLOSED, 0);
        // ...and when every connection has a request in flight, a new one is refused.
        drop(fifth);
        assert_eq!(tracker.open(), 2);
        let sixth = serve(tracker.admit());
        let _sixth_call = sixth.conn.enter().expect("a request");
        assert!(matches!(tracker.admit(), Admission::Refuse), "all busy");
    }
}
