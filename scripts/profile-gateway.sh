#!/usr/bin/env bash
# Instructions the gateway executes per request, counted by valgrind's callgrind (exact and
# repeatable, unlike wall-clock figures on a shared 2-core machine).
#
#   scripts/profile-gateway.sh [legacy|modern] [call|list] [REQUESTS]   # default: modern call 2000
#
# The benchmark backend and the load driver run natively; only the gateway (`vmcp-bench
# serve-gateway`, the bare aggregating service in axum) runs under callgrind. It is run twice,
# with 200 and with 200+REQUESTS requests, and the difference divided by REQUESTS is the cost of
# one request with startup and connection set-up cancelled out. The second run's profile is
# kept in $CARGO_TARGET_DIR/profile/ for callgrind_annotate. Needs valgrind.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REVISION="${1:-modern}"
OP="${2:-call}"
REQUESTS="${3:-2000}"
BASE=200
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/profile"
BENCH="$TARGET/release/vmcp-bench"

command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
case "$REVISION" in legacy) rev_flag=(--legacy) ;; modern) rev_flag=() ;; *) echo "revision: legacy|modern" >&2; exit 2 ;; esac
case "$OP" in call) op_flag=() ;; list) op_flag=(--list) ;; *) echo "op: call|list" >&2; exit 2 ;; esac

cargo build --quiet --release -p vmcp-bench
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
  local n="$1" file="$OUT/callgrind.$REVISION-$OP-$1.out"
  valgrind --tool=callgrind --callgrind-out-file="$file" "$BENCH" serve-gateway "$backend_url" \
    >"$OUT/gateway-$n.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local url
  url="$(wait_url "$OUT/gateway-$n.log" "$pid")"
  "$BENCH" drive "$url" bench_echo "${rev_flag[@]}" "${op_flag[@]}" --requests "$n" >&2
  kill -TERM "$pid"
  wait "$pid" || true
  grep -m1 '^summary:\|^totals:' "$file" | awk '{print $2}'
}

base_ir="$(measure "$BASE")"
full_ir="$(measure "$((BASE + REQUESTS))")"
per_request=$(( (full_ir - base_ir) / REQUESTS ))
echo "gateway $REVISION tools/$OP: $per_request instructions per request (callgrind; $REQUESTS requests)"
echo "profile: callgrind_annotate --inclusive=yes $OUT/callgrind.$REVISION-$OP-$((BASE + REQUESTS)).out"
