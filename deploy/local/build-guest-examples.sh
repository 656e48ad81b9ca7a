#!/usr/bin/env bash
# Builds the AutoRoute example's Python and JavaScript components and runs the native tests of
# both guest SDKs and both examples.
#
#   deploy/local/build-guest-examples.sh              # tests, then the six components
#   deploy/local/build-guest-examples.sh --no-tests   # the components only
#
# Components go to ${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}/guest-components/
# {autoroute-python,autoroute-js}/autoroute_<phase>.wasm (the names the examples' operator.yaml
# reference). A component newer than every file it is built from is not rebuilt.
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/guest-toolchains.sh

run_tests=1
[ "${1:-}" = "--no-tests" ] && run_tests=0
OUT="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}/guest-components"
PHASES=(initializing syncing ready)

step() { printf '\n==> %s\n' "$*"; }

# True when <out> exists and no file under the given paths is newer.
up_to_date() {
  local out="$1"
  shift
  [ -f "$out" ] && [ -z "$(find "$@" -type f -newer "$out" -not -path '*/node_modules/*' -not -path '*/__pycache__/*' -print -quit)" ]
}

# Builds <out> with the rest of the arguments unless it is up to date with <inputs> (a
# colon-separated list of paths); prints its size and the build time.
build() {
  local out="$1" inputs="$2"
  shift 2
  local -a input_paths
  IFS=: read -r -a input_paths <<<"$inputs"
  if up_to_date "$out" "${input_paths[@]}"; then
    echo "up to date: $out ($(stat -c %s "$out") bytes)"
    return
  fi
  local started=$SECONDS
  "$@" >/dev/null
  echo "built $out: $(stat -c %s "$out") bytes in $((SECONDS - started)) s"
}

step "toolchains"
guest_toolchains_install
(cd guest-sdk-js && npm install --no-audit --no-fund --loglevel=error)
(cd examples/autoroute-js && npm install --no-audit --no-fund --loglevel=error)

if [ "$run_tests" = 1 ]; then
  step "native tests: guest-sdk-python, examples/autoroute-python (pytest)"
  (cd guest-sdk-python && guest_pytest -q)
  (cd examples/autoroute-python && guest_pytest -q)
  step "native tests: guest-sdk-js, examples/autoroute-js (node --test)"
  (cd guest-sdk-js && node --test --test-reporter=dot test/)
  (cd examples/autoroute-js && node --test --test-reporter=dot test/)
fi

step "Python components (componentize-py), one at a time"
for phase in "${PHASES[@]}"; do
  build "$OUT/autoroute-python/autoroute_$phase.wasm" \
    "wit:guest-sdk-python/src:examples/autoroute-python/shared:examples/autoroute-python/workers/$phase" \
    guest_build_python "examples/autoroute-python/workers/$phase" "$OUT/autoroute-python/autoroute_$phase.wasm" \
    guest-sdk-python/src examples/autoroute-python/shared
done

step "JavaScript components (rolldown + componentize-js), one at a time"
for phase in "${PHASES[@]}"; do
  build "$OUT/autoroute-js/autoroute_$phase.wasm" \
    "wit:guest-sdk-js/src:guest-sdk-js/package.json:examples/autoroute-js/shared:examples/autoroute-js/workers/$phase" \
    guest_build_js "examples/autoroute-js/workers/$phase/worker.js" "$OUT/autoroute-js/autoroute_$phase.wasm"
done
