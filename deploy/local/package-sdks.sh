#!/usr/bin/env bash
# Packages the three guest SDKs as an author outside this repository gets them, and checks what
# each package holds; fails naming the file a package lacks.
#
#   deploy/local/package-sdks.sh              # into a temporary directory, removed afterwards
#   deploy/local/package-sdks.sh --out DIR    # keeps the packages: DIR/{rust,python,js}/
#
# Rust: `cargo publish --dry-run` of wasmpilot-selection and wasmpilot-guest (packages both, then
# builds each packaged crate on its own, the guest against the packaged selection crate), and
# the .crate files' contents. Python: `python -m build` with the pinned toolchain venv (sdist,
# then the wheel built from the sdist, both holding the PEP 561 marker py.typed), the wheel
# installed with `pip --target` and imported, and into a scratch venv where `mypy --strict`
# reads its types.
# JavaScript: `npm pack`, every file package.json's types/exports/imports name is in the tarball,
# which is installed into a scratch project and imported. Every package carries the WIT package's
# version (guest-sdk/tests/packaging.rs checks the sources; here the built file names).
# Uncommitted changes are packaged as they are (--allow-dirty): this checks, it never uploads.
set -euo pipefail

step() { printf '\n==> %s\n' "$*"; }
fail() {
  echo "package-sdks: $*" >&2
  exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$work/packages"
if [ "${1:-}" = "--out" ]; then
  [ -n "${2:-}" ] || fail "--out needs a directory"
  mkdir -p "$2"
  out="$(cd "$2" && pwd)" # relative to where the script was called from
fi
mkdir -p "$out/rust" "$out/python" "$out/js"

cd "$(dirname "$0")/../.."
source deploy/local/guest-toolchains.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"

version="$(sed -n 's/^package wasmpilot:operator@\(.*\);$/\1/p' wit/operator.wit)"
[ -n "$version" ] || fail "no 'package wasmpilot:operator@<version>;' line in wit/operator.wit"
echo "WIT package wasmpilot:operator@$version: every SDK is packaged as version $version"

# expect <listing> <package> <entry>...: each entry is a line of the listing file.
expect() {
  local listing="$1" package="$2"
  shift 2
  local entry
  for entry in "$@"; do
    grep -qxF -- "$entry" "$listing" || fail "$package lacks $entry; it holds:
$(sed 's/^/  /' "$listing")"
  done
}
# refuse <listing> <package> <pattern>: no line of the listing matches the (grep -E) pattern.
refuse() {
  if grep -qE -- "$3" "$1"; then
    fail "$2 holds what it should not ($3): $(grep -E -- "$3" "$1" | tr '\n' ' ')"
  fi
}
# The files of the working tree under <dir> (tracked or new, not ignored), relative to <dir>.
files_under() {
  local dir="$1" f
  git ls-files --cached --others --exclude-standard --deduplicate -- "$dir" | while read -r f; do
    if [ -f "$f" ]; then echo "${f#"$dir"/}"; fi
  done
}
# prefixed <prefix>: each line of stdin with <prefix> before it.
prefixed() { sed "s|^|$1|"; }

step "Rust: cargo publish --dry-run -p wasmpilot-selection -p wasmpilot-guest (builds the packaged crates)"
cargo publish --dry-run --allow-dirty -p wasmpilot-selection -p wasmpilot-guest
cargo package --no-verify --allow-dirty --quiet -p wasmpilot-selection -p wasmpilot-guest
for crate in wasmpilot-selection:selection wasmpilot-guest:guest-sdk; do
  name="${crate%%:*}" dir="${crate#*:}"
  file="$CARGO_TARGET_DIR/package/$name-$version.crate"
  [ -f "$file" ] || fail "cargo package wrote no $file: is $dir/Cargo.toml's version the WIT package's ($version)?"
  cp "$file" "$out/rust/"
  tar -tzf "$file" | sed "s|^$name-$version/||" >"$work/$name.files"
  mapfile -t want < <(files_under "$dir/src" | prefixed src/)
  expect "$work/$name.files" "$name-$version.crate" Cargo.toml README.md "${want[@]}"
done
mapfile -t want < <(cd wit && ls -- *.wit | prefixed wit/)
expect "$work/wasmpilot-guest.files" "wasmpilot-guest-$version.crate (the WIT its bindings are built from)" "${want[@]}"

step "Python: python -m build guest-sdk-python (sdist, then the wheel from it)"
guest_toolchains_install
# Built from a copy of the working tree, so setuptools' build/ and *.egg-info stay out of it.
files_under guest-sdk-python | (cd guest-sdk-python && tar -cf - -T -) | (mkdir -p "$work/guest-sdk-python" && tar -xf - -C "$work/guest-sdk-python")
# --no-isolation: build against the venv's pinned setuptools (the venv installs with --no-deps;
# an isolated build would install the newest setuptools from the index).
"$GUEST_PY_VENV/bin/python" -m build --quiet --no-isolation --outdir "$out/python" "$work/guest-sdk-python"
sdist="$out/python/wasmpilot_guest-$version.tar.gz"
wheel="$out/python/wasmpilot_guest-$version-py3-none-any.whl"
for f in "$sdist" "$wheel"; do [ -f "$f" ] || fail "python -m build made no $(basename "$f"): $(ls "$out/python")"; done
mapfile -t package < <(files_under guest-sdk-python/src/wasmpilot_guest | grep -v -e '__pycache__/' -e '\.pyc$')
[ "${#package[@]}" -gt 0 ] || fail "no files in guest-sdk-python/src/wasmpilot_guest"
mapfile -t in_wheel < <(printf '%s\n' "${package[@]}" | prefixed wasmpilot_guest/)
mapfile -t in_sdist < <(printf '%s\n' "${package[@]}" | prefixed src/wasmpilot_guest/)
"$GUEST_PY_VENV/bin/python" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel" >"$work/wheel.files"
# py.typed named on its own: without it in the sources the listing above would not ask for it,
# and without it in the wheel mypy ignores the installed package's types (PEP 561).
expect "$work/wheel.files" "$(basename "$wheel") (py.typed: the PEP 561 marker mypy needs)" \
  wasmpilot_guest/py.typed
expect "$work/wheel.files" "$(basename "$wheel")" "${in_wheel[@]}" \
  "wasmpilot_guest-$version.dist-info/METADATA"
refuse "$work/wheel.files" "$(basename "$wheel")" '^(tests?|src)/|__pycache__'
tar -tzf "$sdist" | sed "s|^wasmpilot_guest-$version/||" >"$work/sdist.files"
expect "$work/sdist.files" "$(basename "$sdist")" pyproject.toml README.md PKG-INFO \
  src/wasmpilot_guest/py.typed "${in_sdist[@]}"
# As an author outside the repository: the wheel into a directory `wasmpilot build` reads
# (WASMPILOT_PYTHON_SDK), imported from there.
"$GUEST_PY_VENV/bin/python" -m pip install --quiet --no-deps --no-index --target "$work/python-sdk" "$wheel"
(cd "$work" && PYTHONPATH="$work/python-sdk" "$GUEST_PY_VENV/bin/python" -c '
import sys, wasmpilot_guest
assert wasmpilot_guest.__file__.startswith(sys.argv[1]), wasmpilot_guest.__file__
from wasmpilot_guest import Outcome, PhaseWorker, export_phase
' "$work/python-sdk") || fail "the installed wheel does not import"
# As mypy sees it installed in an author's environment (a scratch venv): its types are read
# (py.typed), so `mypy --strict` passes on a worker using it and names a wrong use.
python3 -m venv --without-pip "$work/author-venv"
"$GUEST_PY_VENV/bin/python" -m pip --python "$work/author-venv/bin/python" install --quiet --no-deps --no-index "$wheel"
mkdir -p "$work/mypy-author"
cat >"$work/mypy-author/worker.py" <<'PY'
import wasmpilot_guest as guest


class Stays(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: object, inputs: guest.Inputs) -> guest.Outcome:
        return guest.Outcome.next("Ready")
PY
mypy_author() {
  (cd "$work/mypy-author" && "$GUEST_PY_VENV/bin/python" -m mypy --strict --no-incremental \
    --python-executable "$work/author-venv/bin/python" worker.py 2>&1)
}
said="$(mypy_author)" || fail "mypy --strict on a worker using the installed wheel failed (are its types read? py.typed):
$said"
sed -i 's/guest.Outcome.next("Ready")/guest.Outcome.next(3)/' "$work/mypy-author/worker.py"
if said="$(mypy_author)"; then
  fail "mypy --strict passed a worker calling Outcome.next(3): the installed wheel's types are not read"
fi
grep -q 'Argument 1 to "next" of "Outcome" has incompatible type "int"' <<<"$said" ||
  fail "mypy --strict did not name the wrong argument to Outcome.next:
$said"

step "JavaScript: npm pack guest-sdk-js"
(cd guest-sdk-js && npm pack --silent --pack-destination "$out/js") >/dev/null
tgz="$out/js/wasmpilot-guest-$version.tgz"
[ -f "$tgz" ] || fail "npm pack made no $(basename "$tgz"): $(ls "$out/js")"
tar -tzf "$tgz" | sed 's|^package/||' >"$work/npm.files"
mapfile -t js_sources < <(files_under guest-sdk-js/src | prefixed src/)
# Every file package.json points at: its types (index.d.ts, testing.d.ts), exports and imports.
mapfile -t referenced < <(node -e '
const p = require(process.argv[1]);
const seen = new Set();
const walk = (v) => typeof v === "string" ? seen.add(v.replace(/^\.\//, "")) : v && typeof v === "object" && Object.values(v).forEach(walk);
[p.types, p.main, p.exports, p.imports].forEach(walk);
console.log([...seen].join("\n"));
' "$PWD/guest-sdk-js/package.json")
expect "$work/npm.files" "$(basename "$tgz")" package.json README.md index.d.ts testing.d.ts \
  "${referenced[@]}" "${js_sources[@]}"
refuse "$work/npm.files" "$(basename "$tgz")" '^(test|node_modules)/'
# As an author outside the repository: the tarball installed into a scratch project, imported.
mkdir -p "$work/js-author"
echo '{ "name": "author", "private": true, "type": "module" }' >"$work/js-author/package.json"
(cd "$work/js-author" && npm install --silent --no-audit --no-fund --prefer-offline "$tgz") ||
  fail "npm install of $(basename "$tgz") failed"
(cd "$work/js-author" && node --input-type=module -e '
import { Outcome, exportPhase } from "@wasmpilot/guest";
import { SyncTest } from "@wasmpilot/guest/testing";
if (typeof Outcome !== "function" || typeof exportPhase !== "function" || typeof SyncTest !== "function") throw new Error("missing exports");
') || fail "the installed tarball does not import"
[ -f "$work/js-author/node_modules/@wasmpilot/guest/index.d.ts" ] || fail "the installed package has no index.d.ts"

step "packages (version $version)"
(cd "$out" && find . -type f | sort | sed 's|^\./|  |')
echo "the three SDK packagings hold what they should"
