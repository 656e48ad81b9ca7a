#!/usr/bin/env bash
# Benchmarks (issue 7), each printing ratios against a baseline measured in the same run:
#   deploy/local/bench.sh                 both parts below
#   deploy/local/bench.sh sandbox [F...]  the sandbox's overhead against the same worker compiled
#                                         natively, the fixed cost of a call, module load; no
#                                         cluster. Optional group filters, e.g. overhead "fixed cost"
#   deploy/local/bench.sh e2e             on the local cluster (started if needed): AutoRoutes to
#                                         Ready vs a native kube-rs controller, and host memory with
#                                         10 WasmOperators and 10,000 cached Deployments, and the
#                                         reconciles one Deployment label change triggers
# Builds the guest components it needs (release, wasm32-wasip2). WASMPILOT_BENCH_SECONDS sets the
# time budget per sandbox group (default 5); WASMPILOT_BENCH_E2E_SIZES (default 200,1000),
# WASMPILOT_BENCH_E2E_PARTS (throughput,startup,memory,requeue), WASMPILOT_BENCH_E2E_HOST_ARGS and
# WASMPILOT_BENCH_E2E_BASE_HOST (and WASMPILOT_BENCH_STARTUP_ROUNDS, default 5) tune the e2e part;
# WASMPILOT_BENCH_E2E_EXAMPLE=examples/autoroute-python (or -js) runs that language's workers.
# See BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

what="${1:-all}"
[[ $# -gt 0 ]] && shift

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "bench: adding the wasm32-wasip2 Rust target"
  rustup target add wasm32-wasip2
fi

echo "==> guest components (wasm32-wasip2, release)"
cargo build --release --target wasm32-wasip2 -p autoroute-syncing -p autoroute-initializing -p autoroute-ready
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(rustc --version)"

sandbox() {
  echo "==> Python and JavaScript components (the languages group)"
  deploy/local/build-guest-examples.sh --no-tests
  echo "==> cargo bench -p wasmpilot --bench sandbox (release profile, fat LTO)"
  cargo bench -p wasmpilot --bench sandbox -- "$@"
}

e2e() {
  echo "==> local cluster"
  deploy/local/setup.sh
  deploy/local/cluster.sh up
  eval "$(deploy/local/cluster.sh env)"
  case "${WASMPILOT_BENCH_E2E_EXAMPLE:-examples/autoroute}" in
    examples/autoroute) ;;
    *)
      echo "==> Python and JavaScript components (${WASMPILOT_BENCH_E2E_EXAMPLE})"
      deploy/local/build-guest-examples.sh --no-tests
      ;;
  esac
  echo "==> cargo bench -p wasmpilot --bench e2e (e2e-bench profile: optimized, no LTO)"
  cargo bench -p wasmpilot --bench e2e --profile e2e-bench
}

case "$what" in
  all) sandbox; e2e ;;
  sandbox) sandbox "$@" ;;
  e2e) e2e ;;
  *) echo "usage: $0 [all | sandbox [group filters...] | e2e]" >&2; exit 2 ;;
esac
