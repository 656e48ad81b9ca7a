#!/usr/bin/env bash
# Metacontroller's checks of its secretpropagation example, against this port; the install step
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

for ns in alpha beta; do
  echo "waiting for the copy in $ns ..."
  until [[ "$(kubectl get secret shareable -n "$ns" -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "shareable" ]]; do sleep 1; done
done
until [[ "$(kubectl get SecretPropagation secret-propagation -o 'jsonpath={.status.working}')" == "fine" ]]; do sleep 1; done

# Beyond the original's checks: no copy where the selector does not reach; a namespace labelled
# later gets one.
for ns in gamma; do
  if kubectl get secret shareable -n "$ns" >/dev/null 2>&1; then echo "FAIL: a copy in $ns"; exit 1; fi
done
kubectl label namespace gamma propagate=true
until [[ "$(kubectl get secret shareable -n gamma -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "shareable" ]]; do sleep 1; done
echo "OK: secretpropagation"
