//! Counting caps on a long-lived resource (Modern `subscriptions/listen` streams):
//! a total and one per caller, keyed like the Legacy session caps
//! ([`Caller`]: issuer and subject, anonymous callers by address). Over either cap
//! the new one is refused; nothing held by another caller is taken away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session_binding::Caller;

/// How many of the resource each caller holds.
#[derive(Debug, Default)]
pub(crate) struct CallerCaps {
    held: Mutex<HashMap<Caller, usize>>,
}

/// One unit held by a caller, given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    caps: Arc<CallerCaps>,
    caller: Caller,
}

/// Which cap refused a new unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The caller holds its own cap.
    PerCaller,
    /// All callers together hold the total cap.
    Total,
}

impl CallerCaps {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Caller, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take one unit for `caller` unless it holds `per_caller` or all hold `total`.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        caller: Caller,
        per_caller: usize,
        total: usize,
    ) -> Result<Permit, Refused> {
        let mut held = self.held();
        let mine = held.get(&caller).copied().unwrap_or(0);
        if mine >= per_caller {
            return Err(Refused::PerCaller);
        }
        if held.values().sum::<usize>() >= total {
            return Err(Refused::Total);
        }
        *held.entry(caller.clone()).or_default() += 1;
        Ok(Permit {
            caps: self.clone(),
            caller,
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut held = self.caps.held();
        if let Some(count) = held.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn at(last: u8) -> Caller {
        Caller::Address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    #[test]
    fn per_caller_then_total_and_released_on_drop() {
        let caps = Arc::new(CallerCaps::default());
        let a1 = caps.acquire(at(1), 2, 3).expect("a1");
        let _a2 = caps.acquire(at(1), 2, 3).expect("a2");
        assert_eq!(caps.acquire(at(1), 2, 3).unwrap_err(), Refused::PerCaller);
        let _b1 = caps.acquire(at(2), 2, 3).expect("b1");
        assert_eq!(caps.acquire(at(3), 2, 3).unwrap_err(), Refused::Total);
        drop(a1);
        caps.acquire(at(1), 2, 3).expect("a's slot is free again");
    }
}
