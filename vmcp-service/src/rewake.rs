//! [`Rewake`]: wakes a future gives itself while it is being polled, answered by
//! polling it again at once rather than through the runtime's scheduler.
//!
//! A forwarded call runs hyper's client inside the request's own task (see
//! `backend::http_clients`): handing the request to the connection, the answer back
//! to the caller and each body frame are channel sends whose receiver is that same
//! task, so each wakes the task while it runs. Tokio reschedules such a task as a
//! yield and wakes a parked worker to share the work; that worker finds nothing to
//! do and parks again. On two cores those futex wake-ups and context switches were a
//! large part of a call's added latency at one client (`docs/benchmarks.md`). Here a
//! wake that arrives while the future is being polled only sets a flag, and the
//! future is polled again before returning; a wake at any other time (the socket
//! became readable) goes to the task as usual.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// How many times in a row a future that keeps waking itself is polled again before
/// it goes back to the scheduler like any other task.
const MAX_AGAIN: usize = 8;

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;

pin_project_lite::pin_project! {
    /// `future`, with the wakes it gives itself during its own poll absorbed: such a
    /// wake polls it again at once (up to a few times in a row, and not once tokio's
    /// cooperative budget is spent) instead of rescheduling the task, which on a
    /// multi-thread runtime also wakes a second worker for nothing.
    ///
    /// [`VmcpService`](crate::VmcpService) wraps each request's future in it, and
    /// [`serve`](crate::serve) each connection's task; wrap the connection futures of
    /// your own hyper accept loop the same way.
    ///
    /// ```
    /// # async fn run() {
    /// let answer = vmcp_service::Rewake::new(async { 42 }).await;
    /// assert_eq!(answer, 42);
    /// # }
    /// ```
    pub struct Rewake<F> {
        #[pin]
        future: F,
        state: Arc<State>,
        waker: Waker,
    }
}

struct State {
    phase: AtomicU8,
    task: AtomicWaker,
}

impl Wake for State {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // While polled: note it, the poll loop polls again. Otherwise: the task's.
        match self
            .phase
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

impl<F: Future> Rewake<F> {
    /// Wrap `future`.
    pub fn new(future: F) -> Self {
        let state = Arc::new(State {
            phase: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Self {
            future,
            waker: Waker::from(state.clone()),
            state,
        }
    }
}

impl<F: Future> Future for Rewake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        this.state.task.register(cx.waker());
        let mut inner = Context::from_waker(this.waker);
        for _ in 0..MAX_AGAIN {
            this.state.phase.store(POLLING, Ordering::Release);
            let poll = this.future.as_mut().poll(&mut inner);
            let woken = this.state.phase.swap(IDLE, Ordering::AcqRel) == WOKEN;
            if poll.is_ready() || !woken {
                return poll;
            }
            // A resource out of tokio's cooperative budget wakes at once; polling
            // again would only spin.
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts the wakes that reach the task.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Count {
        fn wakes(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Pending `times` polls, each time waking the waker it was polled with, then ready.
    struct WakesItself {
        times: usize,
        polls: usize,
    }

    impl Future for WakesItself {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.times {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    #[test]
    fn wakes_during_the_poll_poll_again_without_reaching_the_task() {
        let (count, waker) = task();
        let mut future = std::pin::pin!(Rewake::new(WakesItself { times: 3, polls: 0 }));
        let poll = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert_eq!(
            poll,
            Poll::Ready(4),
            "ready within the one poll of the task"
        );
        assert_eq!(count.wakes(), 0, "the task was never woken");
    }

    #[test]
    fn a_future_that_always_wakes_itself_goes_back_to_the_scheduler() {
        let (count, waker) = task();
        let mut future = std::pin::pin!(Rewake::new(WakesItself {
            times: usize::MAX,
            polls: 0,
        }));
        let poll = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(poll.is_pending());
        assert_eq!(
            future.future.polls, MAX_AGAIN,
            "polled again a bounded number of times"
        );
        assert_eq!(count.wakes(), 1, "then the task is woken, once");
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_task() {
        let (count, waker) = task();
        let (tx, rx) = futures::channel::oneshot::channel::<u8>();
        let mut future = std::pin::pin!(Rewake::new(rx));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        tx.send(7).unwrap();
        assert_eq!(count.wakes(), 1, "the send woke the task");
        let poll = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert_eq!(poll, Poll::Ready(Ok(7)));
    }

    /// Wakes from another thread racing the poll are never lost: each of many
    /// exchanges between two tasks on a multi-thread runtime completes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_from_other_threads_racing_the_poll_are_not_lost() {
        let (to_echo, mut echo_rx) = tokio::sync::mpsc::channel::<u32>(1);
        let (to_caller, mut caller_rx) = tokio::sync::mpsc::channel::<u32>(1);
        let echo = tokio::spawn(Rewake::new(async move {
            while let Some(n) = echo_rx.recv().await {
                if to_caller.send(n).await.is_err() {
                    break;
                }
            }
        }));
        let caller = tokio::spawn(Rewake::new(async move {
            for n in 0..20_000u32 {
                to_echo.send(n).await.unwrap();
                assert_eq!(caller_rx.recv().await, Some(n));
            }
        }));
        tokio::time::timeout(std::time::Duration::from_secs(60), caller)
            .await
            .expect("a lost wake would stall an exchange")
            .unwrap();
        echo.await.unwrap();
    }
}
