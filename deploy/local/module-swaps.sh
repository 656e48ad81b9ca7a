#!/usr/bin/env bash
# Host memory across module swaps. The AutoRoute operator in Python has its three phases' modules
# swapped N times for variants (the same component plus a custom section: another digest); after
# each swap one new AutoRoute goes through all three phases. Prints the host's RSS and
# wasmpilot_modules_in_memory after each swap: with a compile cache (components no worker uses
# are forgotten) and with --no-cache (every component kept, as every host did before commit 1c9fc00).
set -euo pipefail
# Needs the local cluster up (deploy/local/cluster.sh up; eval "$(deploy/local/cluster.sh env)"),
# CARGO_TARGET_DIR set, the host built in the e2e-bench profile (or HOST_BIN) and the examples'
# Python components (deploy/local/build-guest-examples.sh --no-tests). Replaces the WasmOperator
# `autoroute` (the tests and benches apply theirs again). One run, ~6 min:
#   N=4 deploy/local/module-swaps.sh
N=${N:-5}
: "${CARGO_TARGET_DIR:?}"
bin=${HOST_BIN:-$CARGO_TARGET_DIR/e2e-bench/wasmpilot}
src=$CARGO_TARGET_DIR/guest-components/autoroute-python
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/modmem.XXXX)
for i in $(seq 1 "$N"); do
  for p in initializing syncing ready; do
    python3 - "$src/autoroute_$p.wasm" "$work/v$i-$p.wasm" "$i" <<'EOF'
import sys
data = open(sys.argv[1], 'rb').read()
name = b"wasmpilot-variant"
body = bytes([len(name)]) + name + sys.argv[3].encode()
def leb(n):
    out = b""
    while True:
        b, n = n & 0x7f, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
open(sys.argv[2], 'wb').write(data + b"\x00" + leb(len(body)) + body)
EOF
  done
done
# A previous run's namespace may still be terminating: wait until it is gone.
for _ in $(seq 1 120); do
  [ "$(kubectl get namespace modmem -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ] || break
  sleep 1
done
kubectl create namespace modmem --dry-run=client -o yaml | kubectl apply -f - >/dev/null
host=
trap '[ -n "$host" ] && kill "$host" 2>/dev/null; true' EXIT
"$bin" rbac "$repo/examples/autoroute-python/operator.yaml" | kubectl apply -f - >/dev/null
# MODES picks the runs (default both); HOST_FLAGS adds flags to every host (e.g. --compile-in-host).
for mode in ${MODES:-cache no-cache}; do
  kubectl -n modmem delete autoroutes --all --wait=true >/dev/null 2>&1 || true
  if [ "$mode" = cache ]; then flags=(--cache-dir "$work/cache-$RANDOM"); else flags=(--no-cache); fi
  port=$((19000 + RANDOM % 1000))
  "$bin" run --module-dir "$work" "${flags[@]}" ${HOST_FLAGS:-} --metrics-addr "127.0.0.1:$port" >"$work/host-$mode.log" 2>&1 &
  host=$!
  for i in $(seq 1 "$N"); do
    sed -e "s/autoroute_initializing.wasm/v$i-initializing.wasm/;s/autoroute_syncing.wasm/v$i-syncing.wasm/;s/autoroute_ready.wasm/v$i-ready.wasm/" \
      "$repo/examples/autoroute-python/operator.yaml" | kubectl apply -f - >/dev/null
    want="sha256:$(sha256sum "$work/v$i-ready.wasm" | cut -d' ' -f1)"
    for _ in $(seq 1 600); do
      got=$(kubectl get wasmoperator autoroute -o jsonpath='{.status.modules.Ready}' 2>/dev/null || true)
      [ "$got" = "$want" ] && break
      sleep 1
    done
    [ "$got" = "$want" ] || { echo "swap $i not loaded"; tail -5 "$work/host-$mode.log"; kill $host; exit 1; }
    cat <<EOF | kubectl apply -f - >/dev/null
apiVersion: examples.io/v1
kind: AutoRoute
metadata: {name: r$i, namespace: modmem}
spec: {deploymentSelector: {matchLabels: {app: none}}}
EOF
    for _ in $(seq 1 300); do
      ph=$(kubectl -n modmem get autoroute "r$i" -o jsonpath='{.status.phase}' 2>/dev/null || true)
      [ "$ph" = Ready ] && break
      sleep 1
    done
    sleep 15   # the swapped-out controller drains
    rss=$(awk '/VmRSS/{print int($2/1024)}' /proc/$host/status)
    peak=$(awk '/VmHWM/{print int($2/1024)}' /proc/$host/status)
    held=$(curl -s "127.0.0.1:$port/metrics" | awk '/^wasmpilot_modules_in_memory /{print $2}')
    echo "$mode swap $i: route r$i $ph, RSS $rss MiB (peak $peak), modules in memory $held"
  done
  kill $host; wait $host 2>/dev/null || true
done
kubectl delete namespace modmem --wait=false >/dev/null
echo "work dir: $work"
