#!/usr/bin/env bash
# The project's test command (see README): installs the external MCP test peers into .peers/,
# runs the whole workspace test suite with cargo-nextest (cargo test if nextest is missing), then
# the conformance run if scripts/conformance.sh exists. Extra arguments go to nextest / cargo test,
# e.g. `scripts/test.sh -E 'test(aggregation)'` or `scripts/test.sh -p vmcp-service`.
# Exit status is non-zero if any step failed (all steps still run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '\n[test.sh] %s\n' "$*"; }

export VMCP_PEERS_DIR="${VMCP_PEERS_DIR:-$ROOT/.peers}"

say "installing test peers into $VMCP_PEERS_DIR"
scripts/install-peers.sh

failed=()

if command -v cargo-nextest >/dev/null 2>&1; then
  say "cargo nextest run --workspace --no-fail-fast $*"
  cargo nextest run --workspace --no-fail-fast "$@" || failed+=("cargo nextest")
else
  say "cargo-nextest not found; falling back to: cargo test --workspace --no-fail-fast $*"
  cargo test --workspace --no-fail-fast "$@" || failed+=("cargo test")
fi

# nextest does not run doctests: the module docs (docs/layers/*.md included as
# rustdoc) and their examples are compiled and run here.
say "cargo test --workspace --doc"
cargo test --workspace --doc || failed+=("cargo test --doc")

if [ -x scripts/conformance.sh ]; then
  say "scripts/conformance.sh"
  scripts/conformance.sh || failed+=("conformance")
elif [ -e scripts/conformance.sh ]; then
  say "scripts/conformance.sh exists but is not executable: skipped"
fi

if [ "${#failed[@]}" -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all tests passed"
