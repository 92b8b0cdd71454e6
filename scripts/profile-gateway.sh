#!/usr/bin/env bash
# Instructions the gateway executes per request, counted by valgrind's callgrind (exact and
# repeatable, unlike wall-clock figures on a shared 2-core machine).
#
#   scripts/profile-gateway.sh [legacy|modern] [call|list] [REQUESTS] [bare|stack|exchange]
#   # default: modern call 2000 bare
#
# The benchmark backend and the load driver run natively; only the gateway (`vmcp-bench
# serve-gateway`) runs under callgrind: the bare aggregating service in axum, variant (b),
# or with `stack` the full layer stack of variant (c) (bench/src/stack.rs), whose bearer
# token the gateway prints and the driver sends; `exchange` is that stack with the backend's
# outgoing auth a token exchange against an in-process endpoint, variant (x). It is run twice,
# with 200 and with 200+REQUESTS requests, and the difference divided by REQUESTS is the cost of
# one request with startup and connection set-up cancelled out. The second run's profile is
# kept in $CARGO_TARGET_DIR/profile/ for callgrind_annotate. Needs valgrind. Set
# VMCP_BENCH_BIN to profile a given vmcp-bench binary instead of building one, and
# VMCP_PROFILE_OUT to keep the profiles elsewhere (to run two at once). Set
# VMCP_PROFILE_RATE_LIMIT=1 to serve with the memory rate limiter on (`serve-gateway
# --rate-limit`: three buckets per tools/call, never exhausted); the difference to a
# run without it is the limiter's cost per request. Set VMCP_PROFILE_ARGUMENTS to a JSON
# object to call with it instead of `{"text":"hello"}` (a large one shows what the
# arguments cost). Set VMCP_PROFILE_EXTRA_YAML to a file appended to the gateway's
# configuration (`serve-gateway --extra-yaml`; for example `passthroughHeaders: [X-Tenant]`,
# which puts each caller on its own backend connection).
#
# VMCP_PROFILE_TOOL picks what is counted, the same way (two runs, the difference):
#   callgrind (default)  instructions per request
#   dhat                 heap allocations and bytes allocated per request (valgrind's DHAT)
#   strace               system calls per request, in total and per call (strace -f -c)
#
# vmcp-bench is built with mimalloc, the bundled server's allocator (its `mimalloc`
# feature). VMCP_PROFILE_ALLOCATOR=system builds it on the system allocator (glibc),
# as an embedder that keeps the default gets; DHAT sees only the system allocator,
# so `dhat` always builds that way.
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

TOOL="${VMCP_PROFILE_TOOL:-callgrind}"
case "$TOOL" in
  callgrind|dhat) command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; } ;;
  strace) command -v strace >/dev/null || { echo "strace is required (apt-get install strace)" >&2; exit 1; } ;;
  *) echo "VMCP_PROFILE_TOOL: callgrind|dhat|strace" >&2; exit 2 ;;
esac
case "$REVISION" in legacy) rev_flag=(--legacy) ;; modern) rev_flag=() ;; *) echo "revision: legacy|modern" >&2; exit 2 ;; esac
case "$OP" in call) op_flag=() ;; list) op_flag=(--list) ;; *) echo "op: call|list" >&2; exit 2 ;; esac
case "$VARIANT" in
  bare) stack_flag=() ;;
  stack) stack_flag=(--stack) ;;
  exchange) stack_flag=(--exchange) ;;
  *) echo "variant: bare|stack|exchange" >&2; exit 2 ;;
esac
limit_flag=()
[ "${VMCP_PROFILE_RATE_LIMIT:-0}" = 1 ] && limit_flag=(--rate-limit)
extra_flag=()
[ -n "${VMCP_PROFILE_EXTRA_YAML:-}" ] && extra_flag=(--extra-yaml "$VMCP_PROFILE_EXTRA_YAML")
arguments_flag=()
[ -n "${VMCP_PROFILE_ARGUMENTS:-}" ] && arguments_flag=(--arguments "$VMCP_PROFILE_ARGUMENTS")

ALLOCATOR="${VMCP_PROFILE_ALLOCATOR:-mimalloc}"
[ "$TOOL" = dhat ] && ALLOCATOR=system
case "$ALLOCATOR" in
  mimalloc) feature_flag=() ;;
  system) feature_flag=(--no-default-features) ;;
  *) echo "VMCP_PROFILE_ALLOCATOR: mimalloc|system" >&2; exit 2 ;;
esac

# VMCP_BENCH_BIN: profile that binary as it is (e.g. a copy built before a change).
[ -n "${VMCP_BENCH_BIN:-}" ] || cargo build --quiet --release -p vmcp-bench "${feature_flag[@]}"
mkdir -p "$OUT"

# shellcheck source=scripts/bench-procs.sh
source "$ROOT/scripts/bench-procs.sh"

"$BENCH" serve-backend >"$OUT/backend.log" 2>&1 &
pids+=("$!")
backend_url="$(wait_url "$OUT/backend.log" "$!")"

# measure N: what TOOL counted in a gateway that served N requests: its instructions
# (callgrind), "BLOCKS BYTES" allocated (dhat), or the path of its strace -c table.
measure() {
  local n="$1" file="$OUT/$TOOL.$VARIANT${limit_flag:+-rl}-$REVISION-$OP-$1.out"
  local runner=()
  case "$TOOL" in
    callgrind) runner=(valgrind --tool=callgrind --callgrind-out-file="$file") ;;
    dhat) runner=(valgrind --tool=dhat --dhat-out-file="$file") ;;
    strace) runner=(strace -f -c -o "$file") ;;
  esac
  "${runner[@]}" "$BENCH" serve-gateway "$backend_url" \
    "${stack_flag[@]}" "${limit_flag[@]}" "${extra_flag[@]}" >"$OUT/gateway-$n.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local url
  url="$(wait_url "$OUT/gateway-$n.log" "$pid")"
  local bearer_flag=()
  if [ "$VARIANT" != bare ]; then
    bearer_flag=(--bearer "$(sed -n 's/^bearer //p' "$OUT/gateway-$n.log" | head -n 1)")
  fi
  "$BENCH" drive "$url" bench_echo "${rev_flag[@]}" "${op_flag[@]}" "${bearer_flag[@]}" \
    "${arguments_flag[@]}" --requests "$n" >&2
  if [ "$TOOL" = strace ]; then
    # The gateway, not strace: strace detaches on SIGTERM and would leave it running.
    pkill -TERM -P "$pid"
  else
    kill -TERM "$pid"
  fi
  wait "$pid" || true
  case "$TOOL" in
    dhat)
      # "==PID== Total:     1,234 bytes in 56 blocks"
      sed -n 's/^==[0-9]*== Total: *\([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\2 \1/p' \
        "$OUT/gateway-$n.log" | tr -d , | head -n 1
      return ;;
    strace) echo "$file"; return ;;
  esac
  local total
  total="$(grep -m1 '^summary:\|^totals:' "$file" | awk '{print $2}')"
  if [ "$VARIANT" != bare ]; then
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

# syscalls TABLE: "NAME CALLS" per line of an strace -c table.
syscalls() {
  awk '$NF != "total" && $1 ~ /^[0-9.]+$/ && NF >= 5 { print $NF, $4 }' "$1"
}

label="gateway ($VARIANT${limit_flag:+, rate-limited}) $REVISION tools/$OP"
base_out="$(measure "$BASE")"
full_out="$(measure "$((BASE + REQUESTS))")"
case "$TOOL" in
  callgrind)
    per_request=$(( (full_out - base_out) / REQUESTS ))
    echo "$label: $per_request instructions per request (callgrind; $REQUESTS requests)"
    echo "profile: callgrind_annotate --inclusive=yes $OUT/callgrind.$VARIANT${limit_flag:+-rl}-$REVISION-$OP-$((BASE + REQUESTS)).out"
    ;;
  dhat)
    read -r base_blocks base_bytes <<<"$base_out"
    read -r full_blocks full_bytes <<<"$full_out"
    [ -n "${base_blocks:-}" ] && [ -n "${full_blocks:-}" ] || { echo "no DHAT total in the gateway's log" >&2; exit 1; }
    awk -v b="$base_blocks" -v f="$full_blocks" -v bb="$base_bytes" -v fb="$full_bytes" -v n="$REQUESTS" -v l="$label" \
      'BEGIN { printf "%s: %.1f allocations, %.0f bytes allocated per request (dhat; %d requests)\n", l, (f-b)/n, (fb-bb)/n, n }'
    ;;
  strace)
    # Per system call, the calls of the longer run minus the shorter one's, per request.
    join -a 1 -a 2 -e 0 -o 0,1.2,2.2 <(syscalls "$base_out" | sort) <(syscalls "$full_out" | sort) |
      awk -v n="$REQUESTS" -v l="$label" '
        { d = ($3 - $2) / n; if (d >= 0.05) { rows[$1] = d }; total += $3 - $2 }
        END {
          printf "%s: %.2f system calls per request (strace -f -c; %d requests)\n", l, total / n, n
          for (s in rows) printf "  %-16s %.2f\n", s, rows[s]
        }' | { IFS= read -r head; echo "$head"; sort -k2 -rn; }
    echo "tables: $base_out $full_out"
    ;;
esac
