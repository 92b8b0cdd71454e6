#!/usr/bin/env bash
# Instructions serde_json's `preserve_order` adds to the JSON work of one forwarded
# tools/call (bench/preserve-order: the request side, and the result side the fast
# path splices instead), counted by callgrind, with the feature off and on.
# cedar-policy turns it on for every crate in a build that links it (Cargo unifies
# features), so the gateway's `serde_json::Map` is an IndexMap, not a BTreeMap.
#
#   scripts/measure-preserve-order.sh [ROUNDS]     # default 1000
#
# Each variant runs ROUNDS and 2×ROUNDS rounds; the difference divided by ROUNDS is
# one round, start-up cancelled out. Needs valgrind; builds in release (about a minute).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-1000}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/preserve-order"
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }

# instructions BINARY N PHASE: the instructions callgrind counted for N rounds.
instructions() {
  local out
  out="$(mktemp)"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$1" "$2" "$3" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}

for variant in btreemap preserve_order; do
  features=()
  [ "$variant" = preserve_order ] && features=(--features preserve_order)
  dir="$TARGET/$variant"
  cargo build --quiet --release --manifest-path "$ROOT/bench/preserve-order/Cargo.toml" \
    --target-dir "$dir" "${features[@]}"
  bin="$dir/release/preserve-order-bench"
  for phase in request result; do
    one="$(instructions "$bin" "$ROUNDS" "$phase")"
    two="$(instructions "$bin" "$((2 * ROUNDS))" "$phase")"
    echo "$variant $phase: $(( (two - one) / ROUNDS )) instructions per tools/call"
  done
done
