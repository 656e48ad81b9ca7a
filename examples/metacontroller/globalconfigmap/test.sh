#!/usr/bin/env bash
# Metacontroller's checks of its globalconfigmap example, against this port; the install step is
# ../install.sh in place of its controller and webhook server.
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

for ns in first second third; do
  echo "waiting for the copy in $ns ..."
  until [[ "$(kubectl get cm globalsettings -n "$ns" -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "globalsettings" ]]; do sleep 1; done
done
until [[ "$(kubectl get GlobalConfigMap globalsettings -o 'jsonpath={.status.working}')" == "fine" ]]; do sleep 1; done

# Beyond the original's checks: a namespace made later gets a copy; the resource is Ready (no
# copy was refused: the host's own namespace is left out).
kubectl create namespace fourth --dry-run=client -o yaml | kubectl apply -f -
until [[ "$(kubectl get cm globalsettings -n fourth -o 'jsonpath={.metadata.name}' 2>/dev/null)" == "globalsettings" ]]; do sleep 1; done
kubectl wait --for=condition=Ready globalconfigmap/globalsettings --timeout=60s
kubectl delete namespace fourth --wait=false
echo "OK: globalconfigmap"
