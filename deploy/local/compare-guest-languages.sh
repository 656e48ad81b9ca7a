#!/usr/bin/env bash
# Runs every AutoRoute case (examples/autoroute/workers/testdata/cases/) through the host's
# offline path, `wasmpilot run-phase`, with the Rust, Python and JavaScript components, and
# fails on any difference: the printed decision (module digest aside), the worker's log lines
# (timestamps aside), the error and the exit status.
#
#   deploy/local/build-guest-examples.sh --no-tests   # the Python and JavaScript components
#   deploy/local/compare-guest-languages.sh [<case>...]
#
# WASMPILOT_BIN: the host CLI (default $CARGO_TARGET_DIR/debug/wasmpilot); the Rust components
# are in $CARGO_TARGET_DIR/wasm32-wasip2/release (cargo build --release --target wasm32-wasip2
# -p autoroute-initializing -p autoroute-syncing -p autoroute-ready).
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
WASMPILOT_BIN="${WASMPILOT_BIN:-$TARGET/debug/wasmpilot}"
TESTDATA=examples/autoroute/workers/testdata
NOW=2025-01-01T00:00:00Z
# language  operator manifest  module directory
LANGUAGES=(
  "rust examples/autoroute/operator.yaml $TARGET/wasm32-wasip2/release"
  "python examples/autoroute-python/operator.yaml $TARGET/guest-components/autoroute-python"
  "js examples/autoroute-js/operator.yaml $TARGET/guest-components/autoroute-js"
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# What a run printed, without what differs by construction: the module digest (each language's
# component is another module), log timestamps, the host's compile lines and the backtrace.
normalize() {
  sed -E \
    -e 's/sha256:[0-9a-f]{64}/sha256:<digest>/g' \
    -e 's/sha256:[0-9a-f]{12}…/sha256:<digest>/g' \
    -e 's/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z +//' \
    -e '/^(compiling|compiled) sha256:<digest>/d' \
    -e '/^Stack backtrace:/,$d'
}

# Runs <case> with one language; prints the normalized output and exit status.
run_case() {
  local case_file="$1" operator="$2" modules="$3"
  local objects_line objects_args=()
  objects_line="$(sed -n 's/^# objects:[[:space:]]*//p' "$case_file")"
  if [ -n "$objects_line" ]; then
    local objects="$work/objects.yaml" file
    : >"$objects"
    for file in $objects_line; do
      { cat "$TESTDATA/$file"; printf '\n---\n'; } >>"$objects"
    done
    objects_args=(--objects "$objects")
  fi
  local status=0
  RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 NO_COLOR=1 "$WASMPILOT_BIN" run-phase --operator "$operator" \
    --module-dir "$modules" --resource "$case_file" "${objects_args[@]}" --now "$NOW" \
    >"$work/stdout" 2>"$work/stderr" || status=$?
  { normalize <"$work/stdout"; echo "--- log and errors"; normalize <"$work/stderr"; echo "--- exit status $status"; }
}

if [ "$#" -gt 0 ]; then
  cases=("$@")
else
  cases=()
  for file in "$TESTDATA"/cases/*.yaml; do
    case "$file" in *.objects.yaml) ;; *) cases+=("$(basename "$file" .yaml)") ;; esac
  done
fi

failed=0
for name in "${cases[@]}"; do
  case_file="$TESTDATA/cases/$name.yaml"
  for language in "${LANGUAGES[@]}"; do
    read -r lang operator modules <<<"$language"
    started=$SECONDS
    run_case "$case_file" "$operator" "$modules" >"$work/$lang.out"
    echo "$name: $lang in $((SECONDS - started)) s" >&2
  done
  for lang in python js; do
    if ! diff -u --label "$name (rust)" --label "$name ($lang)" "$work/rust.out" "$work/$lang.out"; then
      failed=1
    fi
  done
  if [ -n "${COMPARE_VERBOSE:-}" ]; then cat "$work/rust.out"; fi
done
if [ "$failed" = 0 ]; then
  echo "all ${#cases[@]} cases decide the same in Rust, Python and JavaScript"
fi
exit "$failed"
