#!/usr/bin/env bash
# Installs what building and running wasmpilot needs on a Debian machine: the wasm32-wasip2
# Rust target and kubectl. With --tests, also what only the tests use: docker-registry +
# htpasswd for the module tests, prometheus for the canary test, python3-venv and node (20+)
# for the Python and JavaScript workers' toolchains, Chromium and playwright-core for the
# dashboard's browser test. The local cluster's own
# packages are installed by cluster.sh. Package manager output goes to a log, not the terminal.
set -euo pipefail

LOG="${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/setup-apt.log"
mkdir -p "$(dirname "$LOG")"

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs) first" >&2
  exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "setup: adding the wasm32-wasip2 Rust target"
  rustup target add wasm32-wasip2 >>"$LOG" 2>&1
fi

# apt_install PACKAGE...: quietly, output in $LOG; on failure its tail and the log's path.
apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing $* (Debian packages; log $LOG)"
  if ! { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "$@"; } >>"$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    echo "setup: apt-get install $* failed (log $LOG)" >&2
    exit 1
  fi
}

command -v kubectl >/dev/null 2>&1 || apt_install kubernetes-client

if [ "${1:-}" = --tests ]; then
  # The module tests run real OCI registries on loopback: Debian's docker-registry (distribution
  # v2) and htpasswd (apache2-utils) for the private one (deploy/local/registry.sh).
  if ! command -v docker-registry >/dev/null 2>&1 || ! command -v htpasswd >/dev/null 2>&1; then
    apt_install docker-registry apache2-utils
  fi
  # The canary example's end-to-end test runs a real Prometheus on loopback (only the binary is
  # used: host/tests/e2e_canary.rs starts it with a temporary config).
  command -v prometheus >/dev/null 2>&1 || apt_install prometheus
  # Python and JavaScript workers: deploy/local/guest-toolchains.sh installs the pinned
  # componentize-py (in a venv) and componentize-js (npm) itself; it needs python3 with venv
  # and node 20 or newer.
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install python3 python3-venv
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
  fi
  node_major="$(node -p 'process.versions.node.split(".")[0]')"
  if [ "$node_major" -lt 20 ]; then
    echo "setup: node $(node --version) is too old for componentize-js: install node 20 or newer (e.g. from NodeSource)" >&2
    exit 1
  fi
  # The dashboard's browser test (host/tests/e2e_dashboard.rs): Debian's Chromium, driven by
  # playwright-core (pinned in host/tests/browser/package-lock.json; it downloads no browser).
  command -v chromium >/dev/null 2>&1 || apt_install chromium
  (cd "$(dirname "$0")/../../host/tests/browser" && npm ci --no-audit --no-fund --loglevel=error >>"$LOG" 2>&1) || {
    tail -n 20 "$LOG" >&2
    echo "setup: npm ci in host/tests/browser failed (log $LOG)" >&2
    exit 1
  }
fi
