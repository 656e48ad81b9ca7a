#!/usr/bin/env bash
# The demo: start the local cluster, build and deploy the AutoRoute operator, run the host,
# create a sample AutoRoute and watch it reach Ready with its Services, VirtualServices and
# Gateway; then clean up. KEEP=1 leaves the cluster and the host running.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "Setup (rustup target, kubectl)"
deploy/local/setup.sh

say "Local Kubernetes (kube-apiserver + controller-manager + etcd on loopback)"
started_cluster=0
deploy/local/cluster.sh status >/dev/null 2>&1 || started_cluster=1
deploy/local/cluster.sh up
eval "$(deploy/local/cluster.sh env)"
kubectl version 2>/dev/null | sed -n 's/^Server Version: /server: /p' || true

say "Building the host"
cargo build -q -p wasmpilot
WASMPILOT="$CARGO_TARGET_DIR/debug/wasmpilot"

say "wasmpilot deploy examples/autoroute (build the phase components, store them, apply CRDs + WasmOperator)"
"$WASMPILOT" deploy examples/autoroute

say "Starting the host: wasmpilot run"
LOG="$(mktemp -t wasmpilot-demo.XXXXXX.log)"
"$WASMPILOT" run >"$LOG" 2>&1 &
HOST_PID=$!
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: host (pid $HOST_PID, log $LOG) and cluster left running; stop with: kill $HOST_PID; deploy/local/cluster.sh down"
    return
  fi
  kubectl delete -f examples/autoroute/sample.yaml --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kill "$HOST_PID" 2>/dev/null || true
  wait "$HOST_PID" 2>/dev/null || true
  if [ "$started_cluster" = 1 ]; then deploy/local/cluster.sh down; fi
}
trap cleanup EXIT

for _ in $(seq 1 60); do
  [ "$(kubectl get wasmoperator autoroute -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && break
  sleep 1
done
kubectl get wasmoperators

say "kubectl apply -f examples/autoroute/sample.yaml"
kubectl apply -f examples/autoroute/sample.yaml
phase=""
for _ in $(seq 1 60); do
  phase="$(kubectl get autoroute example -o jsonpath='{.status.phase}' 2>/dev/null || true)"
  [ "$phase" = Ready ] && break
  sleep 1
done
kubectl get autoroutes
if [ "$phase" != Ready ]; then
  echo "AutoRoute did not reach Ready; host log:" >&2
  tail -n 50 "$LOG" >&2
  exit 1
fi

say "Its outputs (owned by the AutoRoute)"
kubectl get services,virtualservices.networking.istio.io,gateways.networking.istio.io -l wasmpilot.io/operator=autoroute
say "Its status"
kubectl get autoroute example -o jsonpath='{.status}' | python3 -m json.tool
say "Events"
kubectl get events --field-selector involvedObject.name=example -o custom-columns=REASON:.reason,MESSAGE:.message
say "Host log (last lines)"
tail -n 12 "$LOG"
say "Demo complete"
