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
CACHE="${VMCP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmcp-peers}"
BIN="$CACHE/kube-apiserver-$KUBE_VERSION"
# 1.20 vendors reflect2 1.0.1, whose map iteration crashes the API server (SIGSEGV in
# aeshashbody, on the first custom resource it encodes) when built with Go >= 1.18, as
# Debian 12's Go 1.19 is. 1.0.2 fixes it; Debian ships it, so it replaces the vendored
# copy before the build.
REFLECT2_DEB="golang-github-modern-go-reflect2-dev"
REFLECT2_SHA256="af150a5172cf4c19bb321a53e67103e7fb18d07c1baa1e816a235155265d3948"
# What the cached binary was built from (a changed pin or patch rebuilds it).
STAMP="$ORIG_SHA256 reflect2:$REFLECT2_SHA256"

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
if [ -x "$BIN" ] && [ "$(cat "$BIN.source" 2>/dev/null)" = "$STAMP" ]; then
  log "kube-apiserver $KUBE_VERSION already at $BIN (skip)"
  exit 0
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "downloading $ORIG (apt-get source, from this machine's own Debian sources)"
# The source package comes through apt like every other package: a private deb-src list made
# from the machine's configured Debian sources (its mirrors, its keyring), so neither the
# system's apt configuration nor a mirror's address is touched or written down here.
APT_DIR="$WORK/apt"
mkdir -p "$APT_DIR/parts" "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$WORK/src-dl"
# Only Debian's own archives (signed by its archive keyring): a third-party list has no sources.
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -q 'debian-archive-keyring' "$f" || continue
  sed 's/^Types:.*$/Types: deb-src/' "$f" >"$APT_DIR/parts/$(basename "$f")"
done
if [ -f /etc/apt/sources.list ]; then
  sed -n 's/^deb \(.*\)$/deb-src \1/p' /etc/apt/sources.list >"$APT_DIR/parts/sources.list"
fi
APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$APT_DIR/parts"
  -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache" -o "APT::Sandbox::User=root")
apt-get "${APT_OPTS[@]}" update -qq >"$WORK/apt.log" 2>&1 \
  || { tail -n 20 "$WORK/apt.log" >&2; die "apt-get update of the deb-src list failed"; }
(cd "$WORK/src-dl" && apt-get "${APT_OPTS[@]}" source --download-only kubernetes \
  >>"$WORK/apt.log" 2>&1) || { tail -n 20 "$WORK/apt.log" >&2; die "apt-get source kubernetes failed"; }
mv "$WORK/src-dl/$ORIG" "$WORK/$ORIG" || die "apt-get source brought no $ORIG"
echo "$ORIG_SHA256  $WORK/$ORIG" | sha256sum -c --quiet - || die "checksum mismatch for $ORIG"
tar -xzf "$WORK/$ORIG" -C "$WORK"
SRC="$WORK/kubernetes-$KUBE_VERSION"
[ -f "$SRC/Makefile" ] || die "no kubernetes-$KUBE_VERSION/Makefile in $ORIG"
log "replacing the vendored reflect2 1.0.1 with Debian's 1.0.2 (Go >= 1.18 fix)"
(cd "$WORK" && apt-get download "$REFLECT2_DEB=1.0.2-2" >/dev/null 2>&1) \
  || die "cannot download $REFLECT2_DEB 1.0.2-2"
echo "$REFLECT2_SHA256  $(ls "$WORK"/${REFLECT2_DEB}_*.deb)" | sha256sum -c --quiet - \
  || die "checksum mismatch for $REFLECT2_DEB"
dpkg-deb -x "$WORK"/${REFLECT2_DEB}_*.deb "$WORK/reflect2"
rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
cp -r "$WORK/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2" \
  "$SRC/vendor/github.com/modern-go/reflect2"
log "building kube-apiserver $KUBE_VERSION (make WHAT=cmd/kube-apiserver, as Debian's rules do; minutes)"
# Upstream's make sets up its own GOPATH and vendored modules; the version variables stand
# in for the git tree the tarball does not have, so --version is honest.
(cd "$SRC" && env HOME="$WORK/home" CGO_ENABLED=0 KUBE_GIT_VERSION="v$KUBE_VERSION" \
  KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean \
  nice -n 10 make WHAT=cmd/kube-apiserver >"$WORK/build.log" 2>&1) \
  || { tail -n 40 "$WORK/build.log" >&2; die "kube-apiserver build failed"; }
mv "$SRC/_output/local/bin/linux/amd64/kube-apiserver" "$BIN"
echo "$STAMP" >"$BIN.source"
log "installed $BIN ($("$BIN" --version 2>&1 | head -n 1))"
