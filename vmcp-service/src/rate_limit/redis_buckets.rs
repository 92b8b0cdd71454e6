//! Buckets in the `sessionStorage` Redis, so every replica takes from one budget.
//!
//! The same GCRA as the memory store ([`super::bucket`]), run as one Lua script per
//! request: it reads every bucket of the request, and writes all of them or none,
//! atomically (a script runs alone on the server). The clock is Redis' own `TIME`,
//! so replicas whose clocks differ still agree. A bucket key holds its TAT in
//! microseconds and expires at twice the refill period (a bucket whose TAT has
//! passed is full, so losing it loses nothing). Keys carry a SHA-256 of what the
//! bucket meters, never a subject or a tool name in clear.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::bucket::{BucketKey, BucketStore, Charge, Decision, StoreError};
use crate::redis_store::{RedisStore, StoreError as RedisError};
use crate::session_binding::Caller;

/// KEYS: the buckets. ARGV: per bucket, its token interval and its refill period,
/// in microseconds. Returns `{0, 0}` when every bucket gave a token, else
/// `{index (1-based), wait in microseconds}` of the bucket that refuses longest.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local refused, wait = 0, 0
local next = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local refill = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now) or now
  if tat < now then tat = now end
  local after = tat + interval
  local owed = after - now
  if owed > refill and owed - refill > wait then
    refused, wait = i, owed - refill
  end
  next[i] = after
end
if refused > 0 then return {refused, wait} end
for i = 1, #KEYS do
  local refill = tonumber(ARGV[2 * i])
  redis.call('SET', KEYS[i], string.format('%.0f', next[i]), 'PX', math.max(1, math.ceil(2 * refill / 1000)))
end
return {0, 0}
";

/// The Redis bucket store.
pub(crate) struct RedisBuckets {
    store: Arc<RedisStore>,
    script: redis::Script,
}

impl RedisBuckets {
    pub(crate) fn new(store: Arc<RedisStore>) -> Self {
        Self {
            store,
            script: redis::Script::new(TAKE),
        }
    }

    fn key(&self, key: &BucketKey) -> String {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(key.kind.label().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(
            &u32::try_from(key.scope.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        bytes.extend_from_slice(key.scope.as_bytes());
        match &key.subject {
            None => bytes.push(0),
            Some(Caller::Anonymous) => bytes.push(1),
            Some(Caller::Identity(id)) => {
                bytes.push(2);
                bytes.extend_from_slice(id);
            }
            Some(Caller::Address(ip)) => {
                bytes.push(3);
                bytes.extend_from_slice(ip.to_string().as_bytes());
            }
        }
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes);
        let mut hex = String::with_capacity(32);
        for b in &digest.as_ref()[..16] {
            hex.push_str(&format!("{b:02x}"));
        }
        self.store.key(&format!("rl:{hex}"))
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

impl BucketStore for RedisBuckets {
    fn take<'a>(&'a self, charges: &'a [Charge]) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.script.prepare_invoke();
            for charge in charges {
                invocation
                    .key(self.key(&charge.key))
                    .arg(micros(charge.limit.refill / charge.limit.max_tokens.max(1)))
                    .arg(micros(charge.limit.refill));
            }
            // The probe already knows Redis is gone: don't wait on a reconnect.
            if self.store.is_known_down() {
                return Err(StoreError("redis is unreachable".into()));
            }
            let mut conn = self.store.connection();
            // One second in all (a reconnect inside the manager included), as
            // docs/rate-limiting.md promises.
            let answer: Result<Vec<i64>, RedisError> = match tokio::time::timeout(
                Duration::from_secs(1),
                invocation.invoke_async(&mut conn),
            )
            .await
            {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(RedisError::Timeout),
            };
            match answer {
                Ok(reply) => match reply.as_slice() {
                    [0, _] => Ok(Decision::Allowed),
                    [index, wait] if *index >= 1 => Ok(Decision::Limited {
                        retry_after: Duration::from_micros(u64::try_from(*wait).unwrap_or(0)),
                        bucket: usize::try_from(index - 1).unwrap_or(0),
                    }),
                    other => Err(StoreError(format!("unexpected script reply {other:?}"))),
                },
                Err(e) => {
                    self.store.note_failure(&e);
                    Err(StoreError(e.to_string()))
                }
            }
        })
    }
}
