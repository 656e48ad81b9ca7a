#!/usr/bin/env bash
# Metacontroller's checks of its configmap-list-v2 example, against this port; the install step
# is ../install.sh (CRD, WasmOperator, grant) in place of its controller and webhook server.
crd_version=${1:-v1}

cleanup() {
  set +e
  kubectl delete -f example.yaml --wait=false
  kubectl delete -k "${crd_version}"
}
trap cleanup EXIT
set -euo pipefail

../install.sh "${crd_version}"
kubectl apply -f example.yaml

want="source-ns/cm-1
source-ns/cm-2"
echo "waiting for my-config-list-list to list source-ns's two ConfigMaps ..."
until [[ "$(kubectl get cm my-config-list-list -n target-ns -o 'jsonpath={.data.configmaps}' 2>/dev/null)" == "$want" ]]; do sleep 1; done
until [[ "$(kubectl get configmaplists.examples.metacontroller.io my-config-list -n target-ns -o 'jsonpath={.status.count}')" == "2" ]]; do sleep 1; done

# Beyond the original's checks: the list of every namespace (its README's expectation).
want_all="other-source-ns/cm-3
source-ns/cm-1
source-ns/cm-2"
echo "waiting for all-configs-list-list to list the three ConfigMaps of every namespace ..."
until [[ "$(kubectl get cm all-configs-list-list -n target-ns -o 'jsonpath={.data.configmaps}' 2>/dev/null)" == "$want_all" ]]; do sleep 1; done
echo "OK: configmap-list-v2"
