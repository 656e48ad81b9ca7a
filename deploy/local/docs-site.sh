#!/usr/bin/env bash
# The documentation site: builds docs/ with mdBook (0.5.4, installed under
# ~/.cache/wasmpilot/tools when missing) into $CARGO_TARGET_DIR/docs-site with the Rust SDK's
# rustdoc under api/rust (the Python and TypeScript reference pages are checked against the SDKs'
# sources by deploy/local/sdk_api_pages.py --check), checks every internal
# link (deploy/local/check_site_links.py, after its self-test), and opens every page in Debian's
# headless Chromium with playwright-core (host/tests/browser/site.mjs), keeping a screenshot in
# $CARGO_TARGET_DIR/test-artifacts/docs-site/. A step of the README's test command; alone:
#   deploy/local/docs-site.sh            build and check
#   deploy/local/docs-site.sh --open     then print the address of the built site's first page
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"
MDBOOK_VERSION=0.5.4
tools="$HOME/.cache/wasmpilot/tools"
mdbook="$tools/bin/mdbook"
if ! "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
  echo "docs-site: installing mdBook $MDBOOK_VERSION under $tools (once per machine)" >&2
  cargo install mdbook --version "$MDBOOK_VERSION" --locked --root "$tools" --quiet
fi

# The Python and TypeScript reference pages are the SDKs' sources as committed.
python3 deploy/local/sdk_api_pages.py --check

site="$CARGO_TARGET_DIR/docs-site"
rm -rf "$site"
"$mdbook" build docs -d "$site"
# The Rust SDK's rustdoc, linked from docs/sdk/rust.md.
# (a target directory of its own: the shared one's doc/ may hold other crates' docs).
cargo doc -p wasmpilot-guest --no-deps --quiet --target-dir "$CARGO_TARGET_DIR/docs-site-rustdoc"
mkdir -p "$site/api"
cp -r "$CARGO_TARGET_DIR/docs-site-rustdoc/doc" "$site/api/rust"
# rustdoc's own pages link to the root's index.html, which it writes only for several crates.
cat >"$site/api/rust/index.html" <<'HTML'
<!DOCTYPE html>
<meta charset="utf-8"><title>wasmpilot-guest</title>
<meta http-equiv="refresh" content="0; url=wasmpilot_guest/index.html">
<a href="wasmpilot_guest/index.html">wasmpilot_guest</a>
HTML
python3 deploy/local/check_site_links.py --self-test
python3 deploy/local/check_site_links.py "$site"

shots="$CARGO_TARGET_DIR/test-artifacts/docs-site"
driver=host/tests/browser
if [ -d "$driver/node_modules/playwright-core" ] && [ -x /usr/bin/chromium ]; then
  mkdir -p "$shots"
  # Served over HTTP on loopback, as a reader's browser gets it (its search fetches its index).
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 -m http.server --bind 127.0.0.1 --directory "$site" "$port" >/dev/null 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null || true' EXIT
  for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/')" 2>/dev/null && break
    sleep 0.1
  done
  (cd "$driver" && node site.mjs "http://127.0.0.1:$port/" "$shots/index.png")
else
  echo "SKIPPED: opening the site in a browser (Chromium or playwright-core missing: deploy/local/setup.sh --tests installs both)" >&2
fi
if [ "${1:-}" = --open ]; then
  echo "file://$site/index.html"
fi
