# Sourced by scripts/profile-gateway.sh and scripts/bench-rows.sh: the processes a
# script starts (append their pids to `pids`) are stopped when it exits, and
# $SCRATCH (if set) removed.
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -z "${SCRATCH:-}" ] || rm -rf "$SCRATCH"
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
