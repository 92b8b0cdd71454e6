//! Counting panics in this test process: a test that drives the gateway through a
//! fault (Redis killed, a backend gone) asserts that none of the gateway's tasks
//! panicked, which a caught panic in a spawned task would otherwise hide.

use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

static PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();

/// The panics of this process since [`PanicCount::start`] (the previous hook still
/// prints each one).
pub struct PanicCount {
    at_start: usize,
}

impl PanicCount {
    /// Install the counting hook (once per process) and start counting.
    pub fn start() -> Self {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                PANICS.fetch_add(1, Ordering::SeqCst);
                previous(info);
            }));
        });
        Self {
            at_start: PANICS.load(Ordering::SeqCst),
        }
    }

    /// How many panics happened since `start`.
    pub fn since(&self) -> usize {
        PANICS.load(Ordering::SeqCst) - self.at_start
    }
}
