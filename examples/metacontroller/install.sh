#!/usr/bin/env bash
# The install step of a ported Metacontroller example, in place of its `kubectl apply -k v1`
# (which there installs the CRD, the controller and its webhook server): the example's CRDs
# (`kubectl apply -k <dir>`), its WasmOperator with `wasmpilot deploy` (the components built by
# `wasmpilot build <example>`; no webhook Deployment, Service or image), and, when the example
# holds `grant.args`, the admin's grant with those arguments (e.g. the namespaces a
# cluster-scoped resource may write to). Run from the example's directory, as its test.sh is.
#
#   ../install.sh v1                    # WASMPILOT=<path to the wasmpilot CLI>, default `wasmpilot`
#   ../install.sh v1 on-delete recreate # an example of two operators: each directory's
set -euo pipefail
crds=${1:-v1}
shift || true
operators=("$@")
[ ${#operators[@]} -gt 0 ] || operators=(.)
wasmpilot=${WASMPILOT:-wasmpilot}
kubectl apply -k "$crds"
for dir in "${operators[@]}"; do
  (
    cd "$dir"
    "$wasmpilot" deploy --no-build .
    if [ -f grant.args ]; then
      name=$(sed -n 's/^  name: *//p' operator.yaml)
      # One argument per word of grant.args, as written there (no glob: `*` stays `*`).
      read -r -a args <<<"$(grep -v '^#' grant.args | tr '\n' ' ')"
      "$wasmpilot" grant "$name" "${args[@]}"
    fi
  )
done
