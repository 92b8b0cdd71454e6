#!/usr/bin/env bash
# Install the real Kubernetes control plane of the discovered-mode tests (issue 28):
#   etcd (Debian's etcd-server 3.4), kubectl (Debian's kubernetes-client 1.20) and
#   kube-apiserver 1.20.2, built from Debian's kubernetes source package (its upstream tarball
#   vendors every Go dependency, so Debian's golang-go builds it offline; ~7 min on 2 cores).
# The built binary is kept outside the repo, in a per-machine cache keyed by version, so a
# fresh clone (CI) builds it once per machine, not once per run:
#   ${VMCP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmcp-peers}/kube-apiserver-1.20.2
# Idempotent; needs root for apt-get (only when a package is missing).
set -euo pipefail

KUBE_VERSION="1.20.2"
DEB_VERSION="1.20.5+really1.20.2"
ORIG="kubernetes_${DEB_VERSION}.orig.tar.gz"
ORIG_SHA256="b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc"
POOL="http://deb.debian.org/debian/pool/main/k/kubernetes"
CACHE="${VMCP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmcp-peers}"
BIN="$CACHE/kube-apiserver-$KUBE_VERSION"

log() { printf '[install-kube] %s\n' "$*"; }
die() { printf '[install-kube] ERROR: %s\n' "$*" >&2; exit 1; }

missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v kubectl >/dev/null || missing+=(kubernetes-client)
[ -x "$BIN" ] || command -v go >/dev/null || missing+=(golang-go)
# Upstream's make copies generated sources with rsync.
[ -x "$BIN" ] || command -v rsync >/dev/null || missing+=(rsync)
if [ "${#missing[@]}" -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The stamp names the source the binary was built from, so a changed pin rebuilds.
if [ -x "$BIN" ] && [ "$(cat "$BIN.source" 2>/dev/null)" = "$ORIG_SHA256" ]; then
  log "kube-apiserver $KUBE_VERSION already at $BIN (skip)"
  exit 0
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "downloading $ORIG"
curl -fsSL --retry 3 -o "$WORK/$ORIG" "$POOL/$ORIG"
echo "$ORIG_SHA256  $WORK/$ORIG" | sha256sum -c --quiet - || die "checksum mismatch for $ORIG"
tar -xzf "$WORK/$ORIG" -C "$WORK"
SRC="$WORK/kubernetes-$KUBE_VERSION"
[ -f "$SRC/Makefile" ] || die "no kubernetes-$KUBE_VERSION/Makefile in $ORIG"
log "building kube-apiserver $KUBE_VERSION (make WHAT=cmd/kube-apiserver, as Debian's rules do; minutes)"
# Upstream's make sets up its own GOPATH and vendored modules; the version variables stand
# in for the git tree the tarball does not have, so --version is honest.
(cd "$SRC" && env HOME="$WORK/home" CGO_ENABLED=0 KUBE_GIT_VERSION="v$KUBE_VERSION" \
  KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean \
  nice -n 10 make WHAT=cmd/kube-apiserver >"$WORK/build.log" 2>&1) \
  || { tail -n 40 "$WORK/build.log" >&2; die "kube-apiserver build failed"; }
mv "$SRC/_output/local/bin/linux/amd64/kube-apiserver" "$BIN"
echo "$ORIG_SHA256" >"$BIN.source"
log "installed $BIN ($("$BIN" --version 2>&1 | head -n 1))"
