#!/usr/bin/env bash
# Metacontroller's checks of its namespace-list-v2 example, against this port; the install step
# is ../install.sh in place of its controller and webhook server.
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

echo "waiting for filtered-namespaces-list to list test-ns ..."
until [[ "$(kubectl get cm filtered-namespaces-list -n test-ns -o 'jsonpath={.data.namespaces}' 2>/dev/null)" == "test-ns" ]]; do sleep 1; done
until [[ "$(kubectl get namespacelists.examples.metacontroller.io filtered-namespaces -n test-ns -o 'jsonpath={.status.count}')" -ge 1 ]]; do sleep 1; done

# Beyond the original's checks: a namespace labelled later is listed too.
kubectl create namespace test-ns-later --dry-run=client -o yaml | kubectl apply -f -
kubectl label namespace test-ns-later example-controller=namespace-list --overwrite
echo "waiting for filtered-namespaces-list to list test-ns-later too ..."
until [[ "$(kubectl get cm filtered-namespaces-list -n test-ns -o 'jsonpath={.data.namespaces}' 2>/dev/null)" == "test-ns
test-ns-later" ]]; do sleep 1; done
kubectl delete namespace test-ns-later --wait=false
echo "OK: namespace-list-v2"
