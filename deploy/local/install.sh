#!/usr/bin/env bash
# `kubectl apply -k deploy/`, on any cluster: where the API server serves no policy/v1 (the local
# cluster's Kubernetes 1.20, from Debian's source; policy/v1 came in 1.21, and v1beta1 went in
# 1.25, so deploy/ keeps v1), the PodDisruptionBudget is applied as policy/v1beta1.
set -euo pipefail
cd "$(dirname "$0")/../.."
if kubectl api-versions | grep -qx 'policy/v1'; then
  exec kubectl apply -k deploy/
fi
echo "install: the API server serves no policy/v1: the PodDisruptionBudget goes in as policy/v1beta1" >&2
kubectl kustomize deploy/ | sed 's#^apiVersion: policy/v1$#apiVersion: policy/v1beta1#' | kubectl apply -f -
