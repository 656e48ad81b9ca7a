#!/usr/bin/env bash
# Metacontroller's checks of its configmappropagation example, against this port; the install
# step is ../install.sh in place of its controller and webhook server.
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

for ns in one two three; do
  echo "waiting for the copy in $ns ..."
  until [[ "$(kubectl get cm settings -n "$ns" -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "settings" ]]; do sleep 1; done
done
until [[ "$(kubectl get ConfigMapPropagation settings-propagation -o 'jsonpath={.status.actual_copies}')" == "3" ]]; do sleep 1; done
sleep 5
if [[ "$(kubectl get cm settings -n four -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "settings" ]]; then
  echo "FAIL: a copy in namespace four, named only by the v2 propagation this operator does not select"
  exit 1
fi

# Beyond the original's checks: a copy deleted by hand comes back; a changed source reaches
# every copy.
kubectl delete cm settings -n two
until [[ "$(kubectl get cm settings -n two -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "settings" ]]; do sleep 1; done
kubectl patch cm settings -n original --type merge -p '{"data":{"some":"changed"}}'
for ns in one two three; do
  until [[ "$(kubectl get cm settings -n "$ns" -o 'jsonpath={.data.some}')" == "changed" ]]; do sleep 1; done
done
echo "OK: configmappropagation"
