//! Token buckets, in the GCRA form: a bucket is one instant, its "theoretical
//! arrival time" (TAT). A bucket of `maxTokens` refilled over `refillPeriod` emits a
//! token every `T = refillPeriod / maxTokens`; a request is allowed when, after
//! taking its token, the bucket owes at most `refillPeriod` (`max(TAT, now) + T - now
//! <= refillPeriod`). A bucket whose TAT is in the past is full, the same as a
//! bucket never seen, so it can be forgotten: that is what keeps memory bounded.
//!
//! Not `governor`: a request is checked against several buckets (global, caller,
//! tool, backend) and must take from all of them or from none (a request refused by
//! its per-user bucket must not drain the shared one). `governor` checks one
//! limiter at a time and takes as it checks; this store checks every bucket of a
//! request under one lock, then commits all or nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::session_binding::Caller;

/// A monotonic clock, as a duration since an origin of its own.
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Duration;
}

/// The process's monotonic clock.
pub(crate) struct Monotonic(std::time::Instant);

impl Default for Monotonic {
    fn default() -> Self {
        Self(std::time::Instant::now())
    }
}

impl Clock for Monotonic {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A bucket's size and refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) max_tokens: u32,
    pub(crate) refill: Duration,
}

impl Limit {
    /// The time one token takes to come back (at least a nanosecond).
    fn interval(self) -> Duration {
        (self.refill / self.max_tokens.max(1)).max(Duration::from_nanos(1))
    }
}

/// Which budget a bucket is (also the `bucket` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BucketKind {
    /// `rateLimiting.shared`: every `tools/call`.
    Shared,
    /// `rateLimiting.perUser`.
    PerUser,
    /// `rateLimiting.tools[].shared`.
    ToolShared,
    /// `rateLimiting.tools[].perUser`.
    ToolPerUser,
    /// `rateLimiting.verbs.<verb>.shared`.
    VerbShared,
    /// `rateLimiting.verbs.<verb>.perUser`.
    VerbPerUser,
    /// `rateLimiting.backends[].rate`.
    Backend,
}

impl BucketKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::PerUser => "perUser",
            Self::ToolShared => "tool.shared",
            Self::ToolPerUser => "tool.perUser",
            Self::VerbShared => "verb.shared",
            Self::VerbPerUser => "verb.perUser",
            Self::Backend => "backend",
        }
    }
}

/// One bucket: its kind, what it meters (a tool, a verb group, a backend; empty for
/// the global ones) and, for a per-user bucket, whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct BucketKey {
    pub(crate) kind: BucketKind,
    pub(crate) scope: Arc<str>,
    pub(crate) subject: Option<Caller>,
}

/// A token to take from a bucket.
#[derive(Debug, Clone)]
pub(crate) struct Charge {
    pub(crate) key: BucketKey,
    pub(crate) limit: Limit,
}

/// What a store decided for all the charges of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Every bucket had a token; each gave one.
    Allowed,
    /// Charge `bucket` (an index) had none; nothing was taken. `retry_after` is when
    /// every refusing bucket will have a token again.
    Limited {
        retry_after: Duration,
        bucket: usize,
    },
}

/// A store failed (a shared store's connection; the memory store cannot fail).
#[derive(Debug, thiserror::Error)]
#[error("rate-limit store: {0}")]
pub(crate) struct StoreError(pub(crate) String);

/// Where buckets live. The memory store is called directly (no future); a shared
/// store (Redis) implements this and answers asynchronously.
pub(crate) trait BucketStore: Send + Sync {
    fn take<'a>(&'a self, charges: &'a [Charge]) -> BoxFuture<'a, Result<Decision, StoreError>>;
}

/// Buckets kept before a sweep forgets the full ones.
const SWEEP_AT: usize = 10_000;
/// Buckets kept at most: past this, with nothing full to forget, a request that
/// needs a new bucket is refused (a flood of fresh identities cannot grow memory).
const HARD_CAP: usize = 200_000;
/// What a request refused for lack of room is told.
const FULL_RETRY: Duration = Duration::from_secs(1);

/// Buckets in this process's memory.
pub(crate) struct MemoryStore {
    clock: Box<dyn Clock>,
    state: std::sync::Mutex<State>,
    /// Whether the "store full" warning was logged.
    warned: AtomicBool,
}

struct State {
    tats: HashMap<BucketKey, Duration>,
    /// Sweep when this many buckets are held.
    sweep_at: usize,
    /// When the last sweep ran: at the hard cap, at most one sweep a second (a
    /// sweep walks every bucket under the lock).
    swept: Duration,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(Box::new(Monotonic::default()))
    }
}

impl MemoryStore {
    pub(crate) fn with_clock(clock: Box<dyn Clock>) -> Self {
        Self {
            clock,
            state: std::sync::Mutex::new(State {
                tats: HashMap::new(),
                sweep_at: SWEEP_AT,
                swept: Duration::ZERO,
            }),
            warned: AtomicBool::new(false),
        }
    }

    /// Take one token from each bucket of `charges`, or none.
    pub(crate) fn take_now(&self, charges: &[Charge]) -> Decision {
        let now = self.clock.now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut refused: Option<(usize, Duration)> = None;
        // The new TATs, on the stack, and how many buckets are new: one lookup of
        // each bucket here, one more to commit.
        let mut next: smallvec::SmallVec<[Duration; 5]> = smallvec::SmallVec::new();
        let mut fresh = 0;
        for (i, charge) in charges.iter().enumerate() {
            let known = state.tats.get(&charge.key).copied();
            fresh += usize::from(known.is_none());
            let tat = known.unwrap_or(now).max(now);
            let after = tat + charge.limit.interval();
            let owed = after - now;
            if owed > charge.limit.refill {
                let wait = owed - charge.limit.refill;
                if refused.is_none_or(|(_, w)| wait > w) {
                    refused = Some((i, wait));
                }
            }
            next.push(after);
        }
        if let Some((bucket, retry_after)) = refused {
            return Decision::Limited {
                retry_after,
                bucket,
            };
        }
        if fresh > 0 && state.tats.len() + fresh > state.sweep_at {
            let at_cap = state.tats.len() + fresh > HARD_CAP;
            if !at_cap || now.saturating_sub(state.swept) >= Duration::from_secs(1) {
                state.tats.retain(|_, tat| *tat > now);
                state.swept = now;
                // Sweep again when the map has doubled: a map of live buckets is
                // not swept on every request.
                state.sweep_at = (state.tats.len() * 2).clamp(SWEEP_AT, HARD_CAP);
            }
            if state.tats.len() + fresh > HARD_CAP {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "rate limiting: {HARD_CAP} buckets in use; requests needing a new bucket are refused until some refill"
                    );
                }
                return Decision::Limited {
                    retry_after: FULL_RETRY,
                    bucket: charges
                        .iter()
                        .position(|c| !state.tats.contains_key(&c.key))
                        .unwrap_or(0),
                };
            }
        }
        for (charge, tat) in charges.iter().zip(next) {
            match state.tats.get_mut(&charge.key) {
                Some(slot) => *slot = tat,
                None => {
                    state.tats.insert(charge.key.clone(), tat);
                }
            }
        }
        Decision::Allowed
    }

    /// How many buckets are held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tats
            .len()
    }
}

impl BucketStore for MemoryStore {
    fn take<'a>(&'a self, charges: &'a [Charge]) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(std::future::ready(Ok(self.take_now(charges))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[derive(Clone, Default)]
    struct Manual(Arc<AtomicU64>);

    impl Manual {
        fn advance(&self, by: Duration) {
            self.0
                .fetch_add(u64::try_from(by.as_nanos()).unwrap(), Ordering::SeqCst);
        }
    }

    impl Clock for Manual {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.0.load(Ordering::SeqCst))
        }
    }

    fn charge(kind: BucketKind, scope: &str, max_tokens: u32, refill_secs: u64) -> Charge {
        Charge {
            key: BucketKey {
                kind,
                scope: scope.into(),
                subject: None,
            },
            limit: Limit {
                max_tokens,
                refill: Duration::from_secs(refill_secs),
            },
        }
    }

    fn store() -> (MemoryStore, Manual) {
        let clock = Manual::default();
        // Not at zero: a bucket is full when its TAT is in the past.
        clock.advance(Duration::from_secs(1000));
        (MemoryStore::with_clock(Box::new(clock.clone())), clock)
    }

    #[test]
    fn a_full_bucket_gives_max_tokens_then_refills_evenly() {
        let (store, clock) = store();
        let c = [charge(BucketKind::Shared, "", 3, 30)];
        for _ in 0..3 {
            assert_eq!(store.take_now(&c), Decision::Allowed);
        }
        assert_eq!(
            store.take_now(&c),
            Decision::Limited {
                retry_after: Duration::from_secs(10),
                bucket: 0
            }
        );
        clock.advance(Duration::from_secs(9));
        assert!(
            matches!(store.take_now(&c), Decision::Limited { retry_after, .. } if retry_after == Duration::from_secs(1))
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(store.take_now(&c), Decision::Allowed);
        assert!(matches!(store.take_now(&c), Decision::Limited { .. }));
        // Idle for a whole period: full again, and never more than full.
        clock.advance(Duration::from_secs(300));
        for _ in 0..3 {
            assert_eq!(store.take_now(&c), Decision::Allowed);
        }
        assert!(matches!(store.take_now(&c), Decision::Limited { .. }));
    }

    #[test]
    fn all_or_none() {
        let (store, _clock) = store();
        let wide = charge(BucketKind::Shared, "", 10, 60);
        let narrow = charge(BucketKind::ToolShared, "t", 1, 60);
        assert_eq!(
            store.take_now(&[wide.clone(), narrow.clone()]),
            Decision::Allowed
        );
        // The narrow bucket refuses: the wide one must not pay for it.
        for _ in 0..5 {
            assert!(matches!(
                store.take_now(&[wide.clone(), narrow.clone()]),
                Decision::Limited { bucket: 1, .. }
            ));
        }
        for _ in 0..9 {
            assert_eq!(
                store.take_now(std::slice::from_ref(&wide)),
                Decision::Allowed
            );
        }
        assert!(matches!(
            store.take_now(std::slice::from_ref(&wide)),
            Decision::Limited { bucket: 0, .. }
        ));
    }

    #[test]
    fn subjects_have_their_own_buckets() {
        let (store, _clock) = store();
        let of = |who: u8| Charge {
            key: BucketKey {
                kind: BucketKind::PerUser,
                scope: "".into(),
                subject: Some(Caller::Identity(vec![who])),
            },
            limit: Limit {
                max_tokens: 1,
                refill: Duration::from_secs(60),
            },
        };
        assert_eq!(store.take_now(&[of(1)]), Decision::Allowed);
        assert!(matches!(store.take_now(&[of(1)]), Decision::Limited { .. }));
        assert_eq!(store.take_now(&[of(2)]), Decision::Allowed);
    }

    #[test]
    fn full_buckets_are_forgotten_and_memory_is_capped() {
        let (store, clock) = store();
        let of = |who: u32| Charge {
            key: BucketKey {
                kind: BucketKind::PerUser,
                scope: "".into(),
                subject: Some(Caller::Identity(who.to_be_bytes().to_vec())),
            },
            limit: Limit {
                max_tokens: 5,
                refill: Duration::from_secs(1),
            },
        };
        for who in 0..u32::try_from(SWEEP_AT).unwrap() {
            assert_eq!(store.take_now(&[of(who)]), Decision::Allowed);
        }
        assert_eq!(store.len(), SWEEP_AT);
        clock.advance(Duration::from_secs(2));
        // All full again: the next new bucket sweeps them away.
        assert_eq!(store.take_now(&[of(u32::MAX)]), Decision::Allowed);
        assert_eq!(store.len(), 1);
        // Live buckets are kept, up to the hard cap; then new ones are refused.
        for who in 0..u32::try_from(HARD_CAP).unwrap() - 1 {
            assert_eq!(store.take_now(&[of(who)]), Decision::Allowed, "{who}");
        }
        assert_eq!(store.len(), HARD_CAP);
        assert_eq!(
            store.take_now(&[of(u32::MAX - 1)]),
            Decision::Limited {
                retry_after: FULL_RETRY,
                bucket: 0
            }
        );
        // An existing bucket still works.
        assert_eq!(store.take_now(&[of(7)]), Decision::Allowed);
    }
}
