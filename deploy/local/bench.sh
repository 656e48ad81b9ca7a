#!/usr/bin/env bash
# Benchmarks (issue 7): the sandbox's overhead against the same worker compiled natively, the
# fixed cost of a call, and module load (compile vs precompiled). Builds the guest components
# it needs (release, wasm32-wasip2), then runs the `sandbox` bench target (release profile).
# Arguments are passed on as group filters, e.g. `deploy/local/bench.sh overhead "fixed cost"`.
# WASMPILOT_BENCH_SECONDS sets the time budget per group (default 5). See BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "bench: adding the wasm32-wasip2 Rust target"
  rustup target add wasm32-wasip2
fi

echo "==> guest components (wasm32-wasip2, release)"
cargo build --release --target wasm32-wasip2 -p autoroute-syncing -p autoroute-initializing

echo "==> cargo bench -p wasmpilot --bench sandbox"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(rustc --version)"
cargo bench -p wasmpilot --bench sandbox -- "$@"
