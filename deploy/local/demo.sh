#!/usr/bin/env bash
# The demo: start the local cluster (control plane + one node), build and deploy the AutoRoute
# operator, run the host, create a sample AutoRoute and watch it reach Ready with its Services,
# VirtualServices and Gateway; then MyOwnShell, whose Deployment runs real busybox pods on the
# node. Then clean up.
#
#   deploy/local/demo.sh               the host runs as a process on this machine
#   IN_CLUSTER=1 deploy/local/demo.sh  the host runs in the cluster, installed as the README's
#                                      "Install in a cluster" says (image built here, kubectl
#                                      apply -k deploy/, wasmpilot rbac)
#   KEEP=1 …                           leave the cluster (and host) running afterwards
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
IN_CLUSTER="${IN_CLUSTER:-0}"

if [ ! -x "$CARGO_TARGET_DIR/debug/wasmpilot" ] || ! deploy/local/cluster.sh status >/dev/null 2>&1; then
  cat <<'EOF'
A first run on a fresh machine builds Kubernetes v1.20.2 from Debian's source (~11 min on 2
cores) and the Rust workspace (~10 min), and installs the Debian packages the local cluster
needs; all of it is cached under ~/.cache/wasmpilot, and later runs take about a minute.
Package manager and build output goes to logs under ~/.cache/wasmpilot, not here.
EOF
fi

say "Setup (rustup target, kubectl)"
deploy/local/setup.sh

say "Local Kubernetes: etcd, kube-apiserver, controller-manager, scheduler and a node (kubelet, containerd)"
started_cluster=0
deploy/local/cluster.sh status >/dev/null 2>&1 || started_cluster=1
deploy/local/cluster.sh up
eval "$(deploy/local/cluster.sh env)"
kubectl get nodes

say "Building the host"
cargo build -q -p wasmpilot
WASMPILOT="$CARGO_TARGET_DIR/debug/wasmpilot"

HOST_PID=""
LOG=""
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: cluster left running${HOST_PID:+, host pid $HOST_PID (log $LOG)}; stop with: ${HOST_PID:+kill $HOST_PID; }deploy/local/cluster.sh down"
    return
  fi
  kubectl delete -f examples/autoroute/sample.yaml --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl delete -f examples/myownshell/sample.yaml --ignore-not-found --wait=false >/dev/null 2>&1 || true
  if [ -n "$HOST_PID" ]; then
    kill "$HOST_PID" 2>/dev/null || true
    wait "$HOST_PID" 2>/dev/null || true
  fi
  if [ "$IN_CLUSTER" = 1 ]; then kubectl delete deployment wasmpilot -n wasmpilot-system --ignore-not-found >/dev/null 2>&1 || true; fi
  if [ "$started_cluster" = 1 ]; then deploy/local/cluster.sh down; fi
}
trap cleanup EXIT

if [ "$IN_CLUSTER" = 1 ]; then
  say "The host image from deploy/Containerfile, loaded into the node"
  cargo build -q -p wasmpilot
  deploy/local/image.sh
  say "kubectl apply -k deploy/ (namespace, CRD, RBAC, 3 sharded replicas, PodDisruptionBudget; deploy/local/install.sh: on this 1.20 cluster the PDB as policy/v1beta1)"
  deploy/local/install.sh
  kubectl -n wasmpilot-system rollout status deployment/wasmpilot --timeout=180s
  kubectl -n wasmpilot-system get pods -o wide
fi

say "wasmpilot deploy examples/autoroute (build the phase components, store them, apply CRDs + WasmOperator)"
"$WASMPILOT" deploy examples/autoroute
"$WASMPILOT" deploy examples/myownshell
if [ "$IN_CLUSTER" = 1 ]; then
  say "wasmpilot rbac … | kubectl apply -f - (what each operator may touch, for the in-cluster host)"
  "$WASMPILOT" rbac examples/autoroute/operator.yaml | kubectl apply -f -
  "$WASMPILOT" rbac examples/myownshell/operator.yaml | kubectl apply -f -
else
  say "Starting the host: wasmpilot run"
  LOG="$(mktemp -t wasmpilot-demo.XXXXXX.log)"
  "$WASMPILOT" run >"$LOG" 2>&1 &
  HOST_PID=$!
fi

for op in autoroute myownshell; do
  for _ in $(seq 1 90); do
    [ "$(kubectl get wasmoperator "$op" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && break
    sleep 1
  done
done
kubectl get wasmoperators

host_log() {
  if [ "$IN_CLUSTER" = 1 ]; then
    # The leader's log (the Lease names its pod); the standby only waits.
    local leader
    leader="$(kubectl -n wasmpilot-system get lease wasmpilot-leader -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
    kubectl -n wasmpilot-system logs "${leader:-deployment/wasmpilot}" --tail="$1" 2>/dev/null || true
  else
    tail -n "$1" "$LOG"
  fi
}

wait_phase() { # KIND NAME
  local phase=""
  for _ in $(seq 1 90); do
    phase="$(kubectl get "$1" "$2" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
    [ "$phase" = Ready ] && return 0
    sleep 1
  done
  echo "$1 $2 did not reach Ready (phase: ${phase:-none}); host log:" >&2
  host_log 50 >&2
  exit 1
}

say "kubectl apply -f examples/autoroute/sample.yaml"
kubectl apply -f examples/autoroute/sample.yaml
wait_phase autoroute example
kubectl get autoroutes
say "Its outputs (owned by the AutoRoute)"
kubectl get services,virtualservices.networking.istio.io,gateways.networking.istio.io -l wasmpilot.io/operator=autoroute
say "Its status"
kubectl get autoroute example -o jsonpath='{.status}' | python3 -m json.tool
say "Events"
kubectl get events --field-selector involvedObject.name=example -o custom-columns=REASON:.reason,MESSAGE:.message

say "kubectl apply -f examples/myownshell/sample.yaml (3 busybox pods)"
kubectl apply -f examples/myownshell/sample.yaml
wait_phase myownshell myownshell-sample
for _ in $(seq 1 90); do
  [ "$(kubectl get pods -l app=myownshell-sample --field-selector=status.phase=Running -o name 2>/dev/null | wc -l)" = 3 ] && break
  sleep 1
done
kubectl get myownshells
kubectl get pods -l app=myownshell-sample -o wide
pod="$(kubectl get pods -l app=myownshell-sample -o jsonpath='{.items[0].metadata.name}')"
say "kubectl logs $pod"
kubectl logs "$pod"

say "Host log (last lines)"
host_log 12
say "Demo complete"
