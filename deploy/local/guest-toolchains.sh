#!/usr/bin/env bash
# The pinned toolchains for workers in Python and JavaScript, where `wasmpilot build` looks for
# them (it runs componentize-py / the bundler and componentize-js itself).
#
#   deploy/local/guest-toolchains.sh install                      # idempotent
#   deploy/local/guest-toolchains.sh pytest [<pytest args>...]    # the venv's pytest
#
# Toolchains live under ${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/toolchains/: a Python venv
# (componentize-py, pytest, mypy; python-requirements.txt) and an npm prefix (componentize-js, jco,
# rolldown, typescript; js/package-lock.json) with wasmpilot-js-snapshot in its bin/ (built from
# tools/js-snapshot, its own workspace). Each is reinstalled only when its pins change.
# Sourcing this file defines the same commands as functions (guest_toolchains_install, …).
set -euo pipefail

GUEST_TOOLCHAINS_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/guest-toolchains"
GUEST_TOOLCHAINS="${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/toolchains"
GUEST_PY_VENV="$GUEST_TOOLCHAINS/python"
GUEST_JS_PREFIX="$GUEST_TOOLCHAINS/js"

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
  # componentize-js's snapshot step, reproducible (tools/js-snapshot): `wasmpilot build` finds it
  # here when it is not beside the wasmpilot binary. Rebuilt when its sources change.
  local snapshot_src="$GUEST_TOOLCHAINS_SRC/../../../tools/js-snapshot"
  local snapshot_pins
  snapshot_pins="$(cat "$snapshot_src/Cargo.toml" "$snapshot_src/Cargo.lock" "$snapshot_src"/src/*.rs | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$GUEST_JS_PREFIX/bin/wasmpilot-js-snapshot" ] || [ "$(cat "$GUEST_JS_PREFIX/.snapshot.sha256" 2>/dev/null)" != "$snapshot_pins" ]; then
    echo "building wasmpilot-js-snapshot into $GUEST_JS_PREFIX/bin" >&2
    cargo install --quiet --locked --force --debug --path "$snapshot_src" --root "$GUEST_JS_PREFIX" \
      --target-dir "${CARGO_TARGET_DIR:-${WASMPILOT_CACHE:-$HOME/.cache/wasmpilot}/target}/js-snapshot"
    echo "$snapshot_pins" >"$GUEST_JS_PREFIX/.snapshot.sha256"
  fi
  # Copied on every install: they change with the repository, not with the pins.
  cp "$GUEST_TOOLCHAINS_SRC/bundle-js.mjs" "$GUEST_JS_PREFIX/bundle-js.mjs"
  cp "$GUEST_TOOLCHAINS_SRC/componentize-js.mjs" "$GUEST_JS_PREFIX/componentize-js.mjs"
}

guest_pytest() {
  "$GUEST_PY_VENV/bin/python" -m pytest "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  command="${1:-}"
  shift || true
  case "$command" in
    install) guest_toolchains_install ;;
    pytest) guest_pytest "$@" ;;
    *)
      sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
fi
