#!/usr/bin/env bash
# Metacontroller's checks of its update-strategy example (OnDelete and Recreate children),
# against this port: two operators, the install step ../install.sh in place of its controllers
# and webhook Deployment. The quiet windows are 15 s, not 30: this host re-decides on the
# out-of-band edit itself (an output's change wakes its owner), not on a periodic sync.
crd_version=${1:-v1}
ODD_CM=odd-instance-data
RCD_CM=rcd-instance-data

cleanup() {
  set +e
  kubectl delete -f my-ondeletedemo.yaml --wait=false 2>/dev/null
  kubectl delete -f my-recreatedemo.yaml --wait=false 2>/dev/null
  kubectl delete -k "${crd_version}" 2>/dev/null
}
trap cleanup EXIT
set -euo pipefail

value() { kubectl get configmap "$1" -o 'jsonpath={.data.value}' 2>/dev/null || true; }
side_effect() { kubectl get configmap "$1" -o 'jsonpath={.data.side-effect}' 2>/dev/null || true; }
uid() { kubectl get configmap "$1" -o 'jsonpath={.metadata.uid}' 2>/dev/null || echo missing; }
fail() { echo "FAIL: $*"; exit 1; }

../install.sh "${crd_version}" on-delete recreate
until kubectl get ondeletedemos >/dev/null 2>&1 && kubectl get recreatedemos >/dev/null 2>&1; do sleep 1; done

echo "1. both ConfigMaps created with v1"
kubectl apply -f my-ondeletedemo.yaml -f my-recreatedemo.yaml
until [[ "$(value $ODD_CM)" == v1 ]]; do sleep 1; done
until [[ "$(value $RCD_CM)" == v1 ]]; do sleep 1; done

echo "2. a field of another manager (kubectl) recreates nothing and is kept"
kubectl patch configmap $ODD_CM --type=merge -p '{"data":{"side-effect":"injected"}}'
kubectl patch configmap $RCD_CM --type=merge -p '{"data":{"side-effect":"injected"}}'
[[ "$(side_effect $ODD_CM)" == injected && "$(side_effect $RCD_CM)" == injected ]] || fail "side-effect not set"
rcd_uid=$(uid $RCD_CM)
sleep 15
[[ "$(uid $RCD_CM)" == "$rcd_uid" ]] || fail "$RCD_CM recreated for a field the operator does not set"
[[ "$(side_effect $RCD_CM)" == injected ]] || fail "$RCD_CM lost side-effect without a change of its own"

echo "3. configData v2: Recreate deletes and creates (side-effect gone), once"
kubectl patch ondeletedemos odd-instance --type=merge -p '{"spec":{"configData":"v2"}}'
kubectl patch recreatedemos rcd-instance --type=merge -p '{"spec":{"configData":"v2"}}'
until [[ "$(value $RCD_CM)" == v2 ]]; do sleep 1; done
[[ -z "$(side_effect $RCD_CM)" ]] || fail "$RCD_CM kept side-effect: it was updated, not recreated"
[[ "$(uid $RCD_CM)" != "$rcd_uid" ]] || fail "$RCD_CM has its old uid"
rcd_uid=$(uid $RCD_CM)
kubectl patch configmap $RCD_CM --type=merge -p '{"data":{"side-effect":"injected"}}'
sleep 15
[[ "$(uid $RCD_CM)" == "$rcd_uid" ]] || fail "$RCD_CM recreated again: a loop"
[[ "$(value $RCD_CM)" == v2 && "$(side_effect $RCD_CM)" == injected ]] || fail "$RCD_CM changed in steady state"

echo "4. OnDelete withholds v2 until its ConfigMap is deleted"
sleep 10
[[ "$(value $ODD_CM)" == v1 ]] || fail "$ODD_CM has $(value $ODD_CM), not v1: OnDelete updated it"
[[ "$(side_effect $ODD_CM)" == injected ]] || fail "$ODD_CM lost side-effect"
kubectl delete configmap $ODD_CM
until [[ "$(value $ODD_CM)" == v2 ]]; do sleep 1; done
[[ -z "$(side_effect $ODD_CM)" ]] || fail "$ODD_CM still has side-effect after being created again"
echo "OK: update-strategy"
