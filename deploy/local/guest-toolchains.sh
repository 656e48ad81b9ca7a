#!/usr/bin/env bash
# The pinned toolchains for workers in Python and JavaScript, and the build of one worker
# into a WebAssembly component (world `phase` of wit/operator.wit).
#
#   deploy/local/guest-toolchains.sh install                      # idempotent
#   deploy/local/guest-toolchains.sh build-python <app-dir> <out.wasm> [<python-path>...]
#   deploy/local/guest-toolchains.sh build-js <worker.js> <out.wasm>
#   deploy/local/guest-toolchains.sh pytest [<pytest args>...]    # the venv's pytest
#
# Toolchains live under ${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/toolchains/: a Python venv
# (componentize-py, pytest; python-requirements.txt) and an npm prefix (componentize-js, jco,
# rolldown; js/package-lock.json). Each is reinstalled only when its pin file changes.
# Sourcing this file defines the same commands as functions (guest_toolchains_install, …).
set -euo pipefail

GUEST_TOOLCHAINS_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/guest-toolchains"
GUEST_REPO_ROOT="$(cd "$GUEST_TOOLCHAINS_SRC/../../.." && pwd)"
GUEST_TOOLCHAINS="${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/toolchains"
GUEST_PY_VENV="$GUEST_TOOLCHAINS/python"
GUEST_JS_PREFIX="$GUEST_TOOLCHAINS/js"
GUEST_WIT="wit/operator.wit"

# True when the stamp in <dir> records the sha256 of <pin file>.
guest_toolchain_current() {
  local dir="$1" pins="$2"
  [ -f "$dir/.pins.sha256" ] && [ "$(cat "$dir/.pins.sha256")" = "$(sha256sum <"$pins" | cut -d' ' -f1)" ]
}

guest_toolchains_install() {
  local pins="$GUEST_TOOLCHAINS_SRC/python-requirements.txt"
  if ! guest_toolchain_current "$GUEST_PY_VENV" "$pins"; then
    echo "installing the Python guest toolchain into $GUEST_PY_VENV" >&2
    rm -rf "$GUEST_PY_VENV"
    python3 -m venv "$GUEST_PY_VENV"
    "$GUEST_PY_VENV/bin/pip" install --quiet --no-deps --require-virtualenv -r "$pins"
    sha256sum <"$pins" | cut -d' ' -f1 >"$GUEST_PY_VENV/.pins.sha256"
  fi
  local lock="$GUEST_TOOLCHAINS_SRC/js/package-lock.json"
  if ! guest_toolchain_current "$GUEST_JS_PREFIX" "$lock"; then
    echo "installing the JavaScript guest toolchain into $GUEST_JS_PREFIX" >&2
    rm -rf "$GUEST_JS_PREFIX"
    mkdir -p "$GUEST_JS_PREFIX"
    cp "$GUEST_TOOLCHAINS_SRC/js/package.json" "$lock" "$GUEST_JS_PREFIX/"
    # `npm install` from the lock, not `npm ci`: npm 11's `ci` rejects this lock as out of sync
    # (it names optional platform packages of jco, componentize-qjs and rolldown it has no entry for).
    (cd "$GUEST_JS_PREFIX" && npm install --no-audit --no-fund --loglevel=error)
    sha256sum <"$lock" | cut -d' ' -f1 >"$GUEST_JS_PREFIX/.pins.sha256"
  fi
  # Copied on every install: it changes with the repository, not with the pins.
  cp "$GUEST_TOOLCHAINS_SRC/bundle-js.mjs" "$GUEST_JS_PREFIX/bundle-js.mjs"
}

# Builds a Python worker: <app-dir>/app.py is the module componentize-py wraps; each
# <python-path> (the SDK's src/, a shared module's directory) is searched too.
guest_build_python() {
  local app_dir="$1" out="$2"
  shift 2
  local paths=(-p "$(realpath "$app_dir")")
  local extra
  for extra in "$@"; do paths+=(-p "$(realpath "$extra")"); done
  mkdir -p "$(dirname "$out")"
  # VIRTUAL_ENV unset: componentize-py would otherwise bundle the toolchain venv's packages.
  (cd "$GUEST_REPO_ROOT" && env -u VIRTUAL_ENV "$GUEST_PY_VENV/bin/componentize-py" \
    -d "$GUEST_WIT" -w phase componentize app "${paths[@]}" -o "$(realpath -m "$out")")
}

# Builds a JavaScript worker: bundled with its imports first (bundle-js.mjs), then
# componentized without wasi:http (the host does not provide it).
guest_build_js() {
  local worker="$1" out="$2"
  mkdir -p "$(dirname "$out")"
  local bundle="${out%.wasm}.bundle.js"
  node "$GUEST_JS_PREFIX/bundle-js.mjs" "$(realpath "$worker")" "$(realpath -m "$bundle")"
  (cd "$GUEST_REPO_ROOT" && "$GUEST_JS_PREFIX/node_modules/.bin/componentize-js" \
    "$(realpath -m "$bundle")" --wit "$GUEST_WIT" --world-name phase \
    --disable http --disable fetch-event -o "$(realpath -m "$out")")
}

guest_pytest() {
  "$GUEST_PY_VENV/bin/python" -m pytest "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  command="${1:-}"
  shift || true
  case "$command" in
    install) guest_toolchains_install ;;
    build-python) guest_build_python "$@" ;;
    build-js) guest_build_js "$@" ;;
    pytest) guest_pytest "$@" ;;
    *)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
fi
