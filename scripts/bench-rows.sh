#!/usr/bin/env bash
# The benchmark rows that need separate gateway processes and a real redis-server
# (issues 24, 25, 27; docs/benchmarks.md): variants take turns round by round, so a
# slow phase of a shared machine hits all of them alike, and each figure is the
# median over the rounds (ratios paired round by round against the first variant).
#
#   scripts/bench-rows.sh ratelimit|codemode|sessions|restore|replicas [ROUNDS] [REQUESTS]
#
# ratelimit: Modern tools/call with no limiter, the memory store, the Redis store.
# codemode:  a 3-call execute_tool_script against three direct tools/call in a row.
# sessions:  Legacy tools/call, sessionStorage memory against redis, and the Redis
#            commands the Redis gateway sent per call (INFO commandstats).
# restore:   a session opened on replica A, its first call on replica B (p50/p99);
#            then Redis bytes per idle session.
# replicas:  HAProxy (round-robin, no stickiness) in front of 1 and of 3 replicas.
#
# Needs redis-server (and haproxy for `replicas`). Set VMCP_BENCH_BIN to use a given
# vmcp-bench binary instead of building one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROW="${1:?row: ratelimit|codemode|sessions|restore|replicas}"
ROUNDS="${2:-5}"
REQUESTS="${3:-2000}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BENCH="${VMCP_BENCH_BIN:-$TARGET/release/vmcp-bench}"
[ -n "${VMCP_BENCH_BIN:-}" ] || cargo build --quiet --release -p vmcp-bench
OUT="$(mktemp -d)"
SCRATCH="$OUT"

# shellcheck source=scripts/bench-procs.sh
source "$ROOT/scripts/bench-procs.sh"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A redis-server of its own on an ephemeral port, without persistence: $REDIS_PORT.
start_redis() {
  REDIS_PORT="$(free_port)"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    >"$OUT/redis.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  cat "$OUT/redis.log" >&2
  return 1
}

"$BENCH" serve-backend >"$OUT/backend.log" 2>&1 &
pids+=("$!")
BACKEND="$(wait_url "$OUT/backend.log" "$!")"

# start_gateway NAME EXTRA_YAML [FLAGS…]: a gateway process; its URL in $GATEWAY.
start_gateway() {
  local name="$1" yaml="$2"
  shift 2
  printf '%s' "$yaml" >"$OUT/$name.yaml"
  "$BENCH" serve-gateway "$BACKEND" --extra-yaml "$OUT/$name.yaml" "$@" \
    >"$OUT/$name.log" 2>&1 &
  pids+=("$!")
  GATEWAY="$(wait_url "$OUT/$name.log" "$!")"
}

# Every session of a run is anonymous from 127.0.0.1: lift the per-address cap (100),
# or the oldest sessions would be closed under the benchmark.
SESSION_CAPS='operational:
  sessions: {maxSessions: 100000, maxPerAddress: 100000}
'
redis_storage() {
  printf 'sessionStorage:\n  provider: redis\n  address: 127.0.0.1:%s\n%s' "$REDIS_PORT" "$SESSION_CAPS"
}

# round LABEL CLIENTS URL TOOL [DRIVE FLAGS…]: one drive, its "rps p50 p99" appended
# to $OUT/LABEL.CLIENTS.
round() {
  local label="$1" clients="$2" url="$3" tool="$4"
  shift 4
  "$BENCH" drive "$url" "$tool" --clients "$clients" --requests "$REQUESTS" "$@" \
    >"$OUT/drive.log" 2>&1 || { cat "$OUT/drive.log" >&2; return 1; }
  sed -n 's/.*: \([0-9]*\) req\/s, p50 \([0-9]*\) µs, p99 \([0-9]*\) µs.*/\1 \2 \3/p' \
    "$OUT/drive.log" >>"$OUT/$label.$clients"
}

# report CLIENTS LABEL…: medians per variant, ratios paired round by round with the first.
report() {
  local clients="$1"
  shift
  python3 - "$OUT" "$clients" "$@" <<'EOF'
import statistics, sys
out, clients, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = {l: [list(map(float, line.split())) for line in open(f"{out}/{l}.{clients}")] for l in labels}
base = rows[labels[0]]
print(f"clients {clients}: variant | ops/s median (min-max) | p50 µs median | p99 µs median | ops/s ratio to {labels[0]} (min-max)")
for l in labels:
    r = rows[l]
    rps = [x[0] for x in r]
    ratios = [a[0] / b[0] for a, b in zip(r, base)]
    print(f"  {l} | {statistics.median(rps):.0f} ({min(rps):.0f}-{max(rps):.0f}) | "
          f"{statistics.median(x[1] for x in r):.0f} | {statistics.median(x[2] for x in r):.0f} | "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
EOF
}

redis_calls() {
  redis-cli -p "$REDIS_PORT" info commandstats |
    awk -F'[:=,]' '/^cmdstat_/{n += $3} END {print n + 0}'
}

echo "$ROW, $ROUNDS rounds of $REQUESTS operations each, $(date -u '+%Y-%m-%d %H:%M') UTC, at $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
case "$ROW" in
ratelimit)
  start_redis
  start_gateway none ''
  none="$GATEWAY"
  start_gateway memory '' --rate-limit
  memory="$GATEWAY"
  # Appended to serve-gateway's RATE_LIMITS block: the same buckets, in Redis.
  start_gateway redis "  store: redis
$(redis_storage)
" --rate-limit
  redis="$GATEWAY"
  for clients in 1 8; do
    for _ in $(seq 1 "$ROUNDS"); do
      round none "$clients" "$none" bench_echo
      round memory "$clients" "$memory" bench_echo
      round redis "$clients" "$redis" bench_echo
    done
    report "$clients" none memory redis
  done
  ;;
codemode)
  start_gateway codemode 'codeMode:
  enabled: true
'
  script='{"script":"a = bench_echo(text=\"hello\")\nb = bench_echo(text=\"hello\")\nc = bench_echo(text=\"hello\")\nreturn [a, b, c]","data":{}}'
  for clients in 1 8; do
    for _ in $(seq 1 "$ROUNDS"); do
      round three-direct "$clients" "$GATEWAY" bench_echo --arguments '{"text":"hello"}' --per-op 3
      round script "$clients" "$GATEWAY" execute_tool_script --arguments "$script"
    done
    report "$clients" three-direct script
  done
  ;;
sessions)
  start_redis
  start_gateway memory "$SESSION_CAPS"
  memory="$GATEWAY"
  start_gateway redis "$(redis_storage)
"
  redis="$GATEWAY"
  for clients in 1 8; do
    for _ in $(seq 1 "$ROUNDS"); do
      round memory "$clients" "$memory" bench_echo --legacy
      before="$(redis_calls)"
      round redis "$clients" "$redis" bench_echo --legacy
      after="$(redis_calls)"
      echo "$((after - before))" >>"$OUT/redis-calls.$clients"
    done
    report "$clients" memory redis
    # Each round also opened $clients sessions (initialize), counted here too.
    echo "  Redis commands per round of $REQUESTS calls (sessions opened included): $(tr '\n' ' ' <"$OUT/redis-calls.$clients")"
  done
  ;;
restore)
  start_redis
  start_gateway replica-a "$(redis_storage)
"
  a="$GATEWAY"
  start_gateway replica-b "$(redis_storage)
"
  b="$GATEWAY"
  "$BENCH" restore "$a" "$b" bench_echo --sessions "$REQUESTS"
  # Bytes per idle session: the keys N new sessions added, and used_memory's growth.
  redis-cli -p "$REDIS_PORT" --scan | sort >"$OUT/keys.before"
  used_before="$(redis-cli -p "$REDIS_PORT" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
  "$BENCH" restore "$a" - bench_echo --sessions "$REQUESTS"
  used_after="$(redis-cli -p "$REDIS_PORT" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
  redis-cli -p "$REDIS_PORT" --scan | sort >"$OUT/keys.after"
  comm -13 "$OUT/keys.before" "$OUT/keys.after" >"$OUT/keys.new"
  bytes=0
  while read -r key; do
    bytes=$((bytes + $(redis-cli -p "$REDIS_PORT" memory usage "$key")))
  done <"$OUT/keys.new"
  echo "idle sessions: $(wc -l <"$OUT/keys.new") new keys for $REQUESTS sessions; MEMORY USAGE $((bytes / REQUESTS)) bytes per session; used_memory grew $(((used_after - used_before) / REQUESTS)) bytes per session"
  echo "a record key: $(head -n 1 "$OUT/keys.new" | sed 's/[0-9a-f-]\{16,\}/<id>/'), $(redis-cli -p "$REDIS_PORT" type "$(head -n 1 "$OUT/keys.new")")"
  ;;
replicas)
  start_redis
  urls=()
  for i in 1 2 3; do
    start_gateway "replica-$i" "$(redis_storage)
"
    urls+=("$GATEWAY")
  done
  one_port="$(free_port)"
  three_port="$(free_port)"
  {
    printf 'defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n'
    printf 'frontend one\n  bind 127.0.0.1:%s\n  default_backend one\n' "$one_port"
    printf 'frontend three\n  bind 127.0.0.1:%s\n  default_backend three\n' "$three_port"
    printf 'backend one\n  balance roundrobin\n'
    printf '  server r1 %s\n' "$(echo "${urls[0]}" | sed 's#http://##; s#/mcp##')"
    printf 'backend three\n  balance roundrobin\n'
    for i in 0 1 2; do
      printf '  server r%s %s\n' "$i" "$(echo "${urls[$i]}" | sed 's#http://##; s#/mcp##')"
    done
  } >"$OUT/haproxy.cfg"
  haproxy -f "$OUT/haproxy.cfg" -db >"$OUT/haproxy.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$three_port") 2>/dev/null && break
    sleep 0.1
  done
  for revision in legacy modern; do
    flag=()
    [ "$revision" = legacy ] && flag=(--legacy)
    for _ in $(seq 1 "$ROUNDS"); do
      round "$revision-1-replica" 8 "http://127.0.0.1:$one_port/mcp" bench_echo "${flag[@]}"
      before="$(redis_calls)"
      round "$revision-3-replicas" 8 "http://127.0.0.1:$three_port/mcp" bench_echo "${flag[@]}"
      echo "$(($(redis_calls) - before))" >>"$OUT/redis-calls.$revision"
    done
    report 8 "$revision-1-replica" "$revision-3-replicas"
    echo "  Redis commands per 3-replica round (sessions opened included): $(tr '\n' ' ' <"$OUT/redis-calls.$revision")"
  done
  ;;
*)
  echo "row: ratelimit|codemode|sessions|restore|replicas" >&2
  exit 2
  ;;
esac
