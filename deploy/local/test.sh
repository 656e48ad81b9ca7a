#!/usr/bin/env bash
# Runs every check and test: format, clippy, guest components for wasm32-wasip2 (Rust, Python,
# JavaScript, with the Python and JavaScript SDKs' native tests), the three SDKs' packagings
# (deploy/local/package-sdks.sh), the supply-chain check (deploy/supply-chain/check.sh), the
# documentation site (deploy/local/docs-site.sh), unit tests,
# sandbox tests with real components, the host image (deploy/Containerfile), and end-to-end
# tests on a real kube-apiserver with a node: pods, the in-cluster install, failover.
# Uses $KUBECONFIG when WASMPILOT_USE_KUBECONFIG=1, else starts deploy/local/cluster.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> %s\n' "$*"; }

# Below 16 GiB free under ~/.cache, cargo's incremental caches and stale test binaries go: they
# are the largest part of the shared target directory (tens of GB after a few clean clones) and
# only ever a cache; a full disk made the linker die mid-run (SIGBUS once, a failed link once).
free_up_cache() {
  local free_kib
  free_kib=$(df -Pk "$HOME/.cache" 2>/dev/null | awk 'NR == 2 {print $4}')
  if [ "${free_kib:-0}" -lt $((16 * 1024 * 1024)) ] && [ -d "$CARGO_TARGET_DIR" ]; then
    echo "less than 16 GiB free under $HOME/.cache: removing cargo's incremental caches and test binaries not built in the last 3 hours" >&2
    find "$CARGO_TARGET_DIR" -maxdepth 2 -type d -name incremental -prune -exec rm -rf {} + || true
    # Each clean clone links its own test binaries (~60, 100–200 MB each with debug info); those
    # of earlier clones are the rest of the directory's growth (50 GB seen). Cargo links again
    # any it finds missing.
    find "$CARGO_TARGET_DIR" -mindepth 3 -maxdepth 3 -path '*/deps/*' -type f -executable -mmin +180 -delete || true
  fi
}
mkdir -p "$HOME/.cache"
free_up_cache

step "setup"
deploy/local/setup.sh --tests

step "rustfmt"
cargo fmt --all -- --check

step "Prometheus rules (deploy/monitoring): promtool check and unit tests"
promtool check rules deploy/monitoring/rules.yaml
promtool test rules deploy/monitoring/rules.test.yaml

step "guest components (wasm32-wasip2, release)"
GUESTS=(-p autoroute-initializing -p autoroute-syncing -p autoroute-ready -p wasmpilot-test-scripted -p wasmpilot-test-relabeled -p wasmpilot-test-stalling
  -p myownshell-initializing -p myownshell-syncing -p myownshell-ready -p myownshell-finalizer
  -p canary-initializing -p canary-waiting -p canary-evaluating -p canary-promoting -p canary-rollback)
cargo build --release --target wasm32-wasip2 "${GUESTS[@]}"

step "clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "tools/js-snapshot (a workspace of its own, see its Cargo.toml): rustfmt, clippy, unit tests"
(cd tools/js-snapshot && cargo fmt -- --check &&
  cargo clippy --locked --all-targets --target-dir "$CARGO_TARGET_DIR/js-snapshot" -- -D warnings &&
  cargo test --locked --target-dir "$CARGO_TARGET_DIR/js-snapshot")

step "wasmtime's own tests of our function-reference patch, against third_party/wasmtime-48.0.11"
(cd third_party/wasmtime-48.0.11-tests &&
  cargo test --locked --target-dir "$CARGO_TARGET_DIR/wasmtime-tests")

step "build the tests (the host image below reuses this build)"
cargo test --workspace --no-run

step "Python and JavaScript guests: pinned toolchains, SDK and example tests, components"
deploy/local/build-guest-examples.sh

step "SDK packagings: cargo publish --dry-run (Rust), sdist and wheel (Python), npm pack (JavaScript)"
deploy/local/package-sdks.sh

step "supply chain: cargo-deny (licences, duplicates, bans, sources, RustSec advisories offline) and the JavaScript and Python lock files"
deploy/supply-chain/check.sh

step "documentation site: mdBook build of docs/, every internal link, every page in headless Chromium"
deploy/local/docs-site.sh

step "cluster"
# The local node's kubelet evicts pods (and the scheduler places none) below 1 % free disk: say
# so before tests fail waiting for pods. Each clean clone adds its own build to the shared target
# directory (~5 GB).
free_up_cache
free_kib=$(df -Pk "$HOME/.cache" | awk 'NR == 2 {print $4}')
if [ "${free_kib:-0}" -lt $((8 * 1024 * 1024)) ]; then
  echo "WARNING: only $((free_kib / 1024 / 1024)) GiB free under $HOME/.cache: the node may evict its pods (DiskPressure); free space (e.g. stale builds in ${CARGO_TARGET_DIR:-target}/debug/deps)" >&2
fi
started_cluster=0
if [ "${WASMPILOT_USE_KUBECONFIG:-0}" != 1 ]; then
  if ! deploy/local/cluster.sh status >/dev/null 2>&1; then started_cluster=1; fi
  deploy/local/cluster.sh up
  eval "$(deploy/local/cluster.sh env)"
  export WASMPILOT_LOCAL_CLUSTER=1 # lets the fault tests stop and start this apiserver
fi
cleanup() { if [ "$started_cluster" = 1 ]; then deploy/local/cluster.sh down || true; fi; }
trap cleanup EXIT

if [ "${WASMPILOT_USE_KUBECONFIG:-0}" != 1 ]; then
  # The local cluster keeps its state between runs. A host left working on it (the in-cluster
  # install of `KEEP=1 IN_CLUSTER=1 deploy/local/demo.sh` or of a hand test, or a `wasmpilot run`
  # of KEEP=1) would reconcile the tests' operators beside the tests' own hosts; the tests refuse
  # to start beside one (host/tests/common/cluster.rs), so stop it here. Namespaces of earlier
  # runs' tests and benches go too: their objects would load the API server during this run.
  step "leftovers of earlier runs on the local cluster: other hosts, test and bench namespaces"
  for pid in $(pgrep -x wasmpilot || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "KUBECONFIG=$KUBECONFIG" &&
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' run'; then
      echo "stopping a wasmpilot host left running on this cluster (pid $pid)"
      kill "$pid" || true
    fi
  done
  if [ "$(kubectl -n wasmpilot-system get deployment wasmpilot -o 'jsonpath={.spec.replicas}' 2>/dev/null || echo 0)" != 0 ]; then
    echo "deleting the in-cluster install's host Deployment left running (the install test makes its own)"
    kubectl -n wasmpilot-system delete deployment wasmpilot --cascade=foreground --wait=true --timeout=120s || true
  fi
  leftover=$(kubectl get namespaces -o name | grep -E '^namespace/(e2e-|bench-)' || true)
  if [ -n "$leftover" ]; then
    echo "deleting $(echo "$leftover" | wc -l) namespace(s) of earlier tests and benches"
    echo "$leftover" | xargs kubectl delete --wait=false >/dev/null
    # Wait for them to go: a bench's namespace holds tens of thousands of objects, and deleting
    # them during the tests loads the API server enough to time them out.
    echo "waiting until they are gone (up to 30 min)"
    echo "$leftover" | xargs kubectl wait --for=delete --timeout=1800s >/dev/null 2>&1 ||
      echo "some are still terminating; the tests run anyway: $(kubectl get namespaces -o name | grep -E '^namespace/(e2e-|bench-)' | tr '\n' ' ')"
  fi
fi

if [ "${WASMPILOT_USE_KUBECONFIG:-0}" != 1 ] && [ "${WASMPILOT_NODE:-1}" = 1 ]; then
  step "host image from deploy/Containerfile, loaded into the node (and a second tag for the rolling update)"
  deploy/local/image.sh 0.1.0 0.1.0-rollout
fi

step "tests (unit, sandbox, mock API server, and the ignored ones: cluster, Python and JavaScript toolchains)"
status=0
# A plain `cargo test --workspace` runs everything that needs neither a cluster nor the Python
# and JavaScript toolchains (building the Rust guest components it needs); here those run too.
cargo test --workspace --no-fail-fast -- --include-ignored --skip apiserver_restart_under_a_running_host || status=$?
if [ "${WASMPILOT_LOCAL_CLUSTER:-0}" = 1 ]; then
  step "tests that stop the local cluster's API server (ignored elsewhere)"
  cargo test -p wasmpilot --test e2e_apiserver_restart -- --ignored || status=$?
fi
if [ "$started_cluster" = 1 ]; then
  step "cluster down leaves no process, mount, interface or iptables rule of the node behind"
  { deploy/local/cluster.sh down && deploy/local/cluster.sh check-clean; } || status=1
  started_cluster=0
else
  echo "SKIPPED: the cluster was running before this run, so it is left up (no down/check-clean)"
fi
exit "$status"
