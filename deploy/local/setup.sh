#!/usr/bin/env bash
# Installs what building and testing wasmpilot needs on a Debian machine: the wasm32-wasip2
# Rust target, kubectl, and docker-registry + htpasswd for the module tests. The local
# cluster's own packages are installed by cluster.sh.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs) first" >&2
  exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "setup: adding the wasm32-wasip2 Rust target"
  rustup target add wasm32-wasip2
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: installing kubectl (Debian package kubernetes-client)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client
fi
# The module tests run real OCI registries on loopback: Debian's docker-registry (distribution
# v2) and htpasswd (apache2-utils) for the private one (deploy/local/registry.sh).
if ! command -v docker-registry >/dev/null 2>&1 || ! command -v htpasswd >/dev/null 2>&1; then
  echo "setup: installing docker-registry and apache2-utils (Debian packages)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry apache2-utils
fi
# The canary example's end-to-end test runs a real Prometheus on loopback (Debian's package;
# only the binary is used: host/tests/e2e_canary.rs starts it with a temporary config).
if ! command -v prometheus >/dev/null 2>&1; then
  echo "setup: installing prometheus (Debian package)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi
