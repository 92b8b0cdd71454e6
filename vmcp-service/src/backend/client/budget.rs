//! The time budget of one backend request, and whose request it is.

use std::time::Duration;

use crate::backend::health::CallerKey;

/// How long a backend request may take, and the caller it is made for (so the
/// health model can tell one caller's slow calls from a backend that stopped
/// answering). A bare [`Duration`] is a request of vmcp's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBudget {
    /// The deadline, from `operational.timeouts`.
    pub timeout: Duration,
    /// The caller, if the request is made for one.
    pub caller: Option<CallerKey>,
}

impl CallBudget {
    /// `timeout` on behalf of `caller`.
    pub fn for_caller(timeout: Duration, caller: Option<CallerKey>) -> Self {
        Self { timeout, caller }
    }
}

impl From<Duration> for CallBudget {
    fn from(timeout: Duration) -> Self {
        Self {
            timeout,
            caller: None,
        }
    }
}
