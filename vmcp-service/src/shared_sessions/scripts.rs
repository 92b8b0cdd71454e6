//! The Lua scripts: each one round trip, atomic against other replicas.

/// Write a session's record (first write, or a catch-up after Redis was down) and
/// count it against its caller's cap.
///
/// KEYS: the caller's zset, the record, the tombstone. ARGV: now (ms), stale
/// before (ms: zset entries idle longer are gone), cap, session id, ttl (ms),
/// replace (1: drop the old fields first), then field/value pairs.
/// Returns 1 written, 0 over the cap, -1 deleted meanwhile (tombstone).
pub(super) const WRITE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
if not redis.call('ZSCORE', KEYS[1], ARGV[4]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if ARGV[6] == '1' then redis.call('DEL', KEYS[2]) end
redis.call('HSET', KEYS[2], unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
";

/// Slide the TTL of the sessions used since the last pass, in one batch.
///
/// KEYS: the records. ARGV: now (ms), ttl (ms), the zset key prefix, the
/// tombstone key prefix, then the session ids in KEYS' order. Returns per record 1
/// (slid), 0 (deleted: a tombstone), or -1 (missing: a Redis that restarted empty,
/// or expired; not recreated here, the replica rewrites it).
pub(super) const SLIDE: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'last_used', ARGV[1])
    redis.call('PEXPIRE', key, ARGV[2])
    local caller = redis.call('HGET', key, 'caller')
    if caller then
      local set = ARGV[3] .. caller
      redis.call('ZADD', set, ARGV[1], ARGV[4 + i])
      redis.call('PEXPIRE', set, ARGV[2])
    end
    out[i] = 1
  elseif redis.call('EXISTS', ARGV[4] .. ARGV[4 + i]) == 1 then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
";

/// Delete a session: its record, its place in its caller's zset, and a tombstone
/// so no replica writes it back (a catch-up) while the deletion settles.
///
/// KEYS: the record, the tombstone. ARGV: session id, tombstone ttl (ms), the zset
/// key prefix.
pub(super) const DELETE: &str = r"
local caller = redis.call('HGET', KEYS[1], 'caller')
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
if caller then redis.call('ZREM', ARGV[3] .. caller, ARGV[1]) end
return 1
";
