//! The time budget of one backend request, and whose request it is.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::health::CallerKey;

/// How long a backend request may take, from when, and the caller it is made for
/// (so the health model can tell one caller's slow calls from a backend that
/// stopped answering). A bare [`Duration`] is a request of vmcp's own, timed from
/// now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBudget {
    /// The deadline, from `operational.timeouts`.
    pub timeout: Duration,
    /// The caller, if the request is made for one.
    pub caller: Option<CallerKey>,
    /// When the clock started: when the gateway received the client's request, so
    /// the time spent before the backend call (and acquiring its connection) counts.
    pub since: Instant,
}

impl CallBudget {
    /// `timeout` on behalf of `caller`, from now.
    pub fn for_caller(timeout: Duration, caller: Option<CallerKey>) -> Self {
        Self {
            timeout,
            caller,
            since: Instant::now(),
        }
    }

    /// The same budget, timed from `received` (when the gateway got the request).
    pub fn since(self, received: Instant) -> Self {
        Self {
            since: received,
            ..self
        }
    }

    /// When the request must have been answered.
    pub fn deadline(&self) -> Instant {
        self.since + self.timeout
    }
}

impl From<Duration> for CallBudget {
    fn from(timeout: Duration) -> Self {
        Self::for_caller(timeout, None)
    }
}

/// When the gateway received a request: an `http::Request` extension set by
/// `VmcpService` (rmcp hands the request's parts, extensions included, to the
/// handler), from which backend deadlines are timed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received(pub(crate) Instant);

impl Received {
    /// The receipt time recorded in `extensions`, or now if there is none.
    pub(crate) fn of(extensions: &http::Extensions) -> Instant {
        extensions
            .get::<Self>()
            .map_or_else(Instant::now, |received| received.0)
    }
}
