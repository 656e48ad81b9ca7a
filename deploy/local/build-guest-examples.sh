#!/usr/bin/env bash
# Installs the pinned Python and JavaScript toolchains, checks that both AutoRoute examples'
# typed API (shared/phases.py, shared/phases.js and .d.ts) is what `wasmpilot generate` writes
# from their operator.yaml, runs the native tests of both guest SDKs and both examples, and
# builds the examples' components with `wasmpilot build`.
#
#   deploy/local/build-guest-examples.sh              # tests, then the six components
#   deploy/local/build-guest-examples.sh --no-tests   # the API check and the components only
#
# Components go to ${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}/guest-components/
# {autoroute-python,autoroute-js}/autoroute_<phase>.wasm (the names the examples' operator.yaml
# reference). WASMPILOT_BIN: the CLI to build with (default: this checkout's, built if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/guest-toolchains.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"

run_tests=1
[ "${1:-}" = "--no-tests" ] && run_tests=0

step() { printf '\n==> %s\n' "$*"; }

step "toolchains"
guest_toolchains_install
(cd guest-sdk-js && npm install --no-audit --no-fund --loglevel=error)
(cd examples/autoroute-js && npm install --no-audit --no-fund --loglevel=error)

WASMPILOT_BIN="${WASMPILOT_BIN:-$CARGO_TARGET_DIR/debug/wasmpilot}"
if [ ! -x "$WASMPILOT_BIN" ]; then
  step "the wasmpilot CLI"
  cargo build -p wasmpilot
fi

# Fails (naming the stale files) when operator.yaml changed and the generated API did not.
for example in examples/autoroute-python examples/autoroute-js; do
  step "typed API of $example is current (wasmpilot generate --check)"
  "$WASMPILOT_BIN" generate --check "$example"
done

if [ "$run_tests" = 1 ]; then
  step "native tests: guest-sdk-python, examples/autoroute-python (pytest)"
  (cd guest-sdk-python && guest_pytest -q)
  (cd examples/autoroute-python && guest_pytest -q)
  for example in examples/metacontroller/*/; do
    if [ -f "$example/pyproject.toml" ]; then
      step "native tests: $example (pytest)"
      (cd "$example" && guest_pytest -q)
    fi
  done
  step "native tests: guest-sdk-js, examples/autoroute-js, the componentize-js glue rewrite (node --test)"
  (cd guest-sdk-js && node --test --test-reporter=dot test/)
  (cd examples/autoroute-js && node --test --test-reporter=dot test/)
  node --test --test-reporter=dot deploy/local/guest-toolchains/
fi

for example in examples/autoroute-python examples/autoroute-js $(dirname $(find examples/metacontroller -name operator.yaml | sort)); do
  step "components of $example (wasmpilot build)"
  "$WASMPILOT_BIN" build "$example"
done
