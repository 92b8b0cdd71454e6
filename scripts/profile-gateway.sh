#!/usr/bin/env bash
# Instructions the gateway executes per request, counted by valgrind's callgrind (exact and
# repeatable, unlike wall-clock figures on a shared 2-core machine).
#
#   scripts/profile-gateway.sh [legacy|modern] [call|list] [REQUESTS] [bare|stack]
#   # default: modern call 2000 bare
#
# The benchmark backend and the load driver run natively; only the gateway (`vmcp-bench
# serve-gateway`) runs under callgrind: the bare aggregating service in axum, variant (b),
# or with `stack` the full layer stack of variant (c) (bench/src/stack.rs), whose bearer
# token the gateway prints and the driver sends. It is run twice,
# with 200 and with 200+REQUESTS requests, and the difference divided by REQUESTS is the cost of
# one request with startup and connection set-up cancelled out. The second run's profile is
# kept in $CARGO_TARGET_DIR/profile/ for callgrind_annotate. Needs valgrind. Set
# VMCP_BENCH_BIN to profile a given vmcp-bench binary instead of building one, and
# VMCP_PROFILE_OUT to keep the profiles elsewhere (to run two at once). Set
# VMCP_PROFILE_RATE_LIMIT=1 to serve with the memory rate limiter on (`serve-gateway
# --rate-limit`: three buckets per tools/call, never exhausted); the difference to a
# run without it is the limiter's cost per request.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REVISION="${1:-modern}"
OP="${2:-call}"
REQUESTS="${3:-2000}"
VARIANT="${4:-bare}"
BASE=200
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="${VMCP_PROFILE_OUT:-$TARGET/profile}"
BENCH="${VMCP_BENCH_BIN:-$TARGET/release/vmcp-bench}"

command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
case "$REVISION" in legacy) rev_flag=(--legacy) ;; modern) rev_flag=() ;; *) echo "revision: legacy|modern" >&2; exit 2 ;; esac
case "$OP" in call) op_flag=() ;; list) op_flag=(--list) ;; *) echo "op: call|list" >&2; exit 2 ;; esac
case "$VARIANT" in bare) stack_flag=() ;; stack) stack_flag=(--stack) ;; *) echo "variant: bare|stack" >&2; exit 2 ;; esac
limit_flag=()
[ "${VMCP_PROFILE_RATE_LIMIT:-0}" = 1 ] && limit_flag=(--rate-limit)

# VMCP_BENCH_BIN: profile that binary as it is (e.g. a copy built before a change).
[ -n "${VMCP_BENCH_BIN:-}" ] || cargo build --quiet --release -p vmcp-bench
mkdir -p "$OUT"

pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  exit "$rc"
}
trap cleanup EXIT

# wait_url LOG PID: the URL a server printed (bounded wait).
wait_url() {
  for _ in $(seq 1 600); do
    url="$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*/mcp' "$1" | head -n 1 | sed 's/^listening on //' || true)"
    [ -n "$url" ] && { printf '%s' "$url"; return 0; }
    kill -0 "$2" 2>/dev/null || { cat "$1" >&2; return 1; }
    sleep 0.1
  done
  cat "$1" >&2
  return 1
}

"$BENCH" serve-backend >"$OUT/backend.log" 2>&1 &
pids+=("$!")
backend_url="$(wait_url "$OUT/backend.log" "$!")"

# measure N: Ir of a gateway that served N requests.
measure() {
  local n="$1" file="$OUT/callgrind.$VARIANT${limit_flag:+-rl}-$REVISION-$OP-$1.out"
  valgrind --tool=callgrind --callgrind-out-file="$file" "$BENCH" serve-gateway "$backend_url" \
    "${stack_flag[@]}" "${limit_flag[@]}" >"$OUT/gateway-$n.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local url
  url="$(wait_url "$OUT/gateway-$n.log" "$pid")"
  local bearer_flag=()
  if [ "$VARIANT" = stack ]; then
    bearer_flag=(--bearer "$(sed -n 's/^bearer //p' "$OUT/gateway-$n.log" | head -n 1)")
  fi
  "$BENCH" drive "$url" bench_echo "${rev_flag[@]}" "${op_flag[@]}" "${bearer_flag[@]}" \
    --requests "$n" >&2
  kill -TERM "$pid"
  wait "$pid" || true
  local total
  total="$(grep -m1 '^summary:\|^totals:' "$file" | awk '{print $2}')"
  if [ "$VARIANT" = stack ]; then
    # Generating (c)'s RSA key costs a random number of instructions (primes are
    # searched for), which would not cancel out: it is left out of the count. Matched
    # on aws-lc's function, which stays a symbol; the bench's own `Issuer::generate`
    # is inlined away in some builds, and a missing key cost once made the count
    # 305-492 k instead of 175 k.
    local keygen
    keygen="$(callgrind_annotate --inclusive=yes "$file" 2>/dev/null |
      awk '/aws_lc_rs::rsa::key::KeyPair::generate /{gsub(",", "", $1); print $1; exit}')"
    [ -n "$keygen" ] || { echo "no RSA key generation found in $file" >&2; exit 1; }
    total=$((total - keygen))
  fi
  echo "$total"
}

base_ir="$(measure "$BASE")"
full_ir="$(measure "$((BASE + REQUESTS))")"
per_request=$(( (full_ir - base_ir) / REQUESTS ))
echo "gateway ($VARIANT${limit_flag:+, rate-limited}) $REVISION tools/$OP: $per_request instructions per request (callgrind; $REQUESTS requests)"
echo "profile: callgrind_annotate --inclusive=yes $OUT/callgrind.$VARIANT${limit_flag:+-rl}-$REVISION-$OP-$((BASE + REQUESTS)).out"
