#!/usr/bin/env bash
# The supply-chain check: what we build from, against the policy in deny.toml and
# deploy/supply-chain/locks.toml. Run by the README's test command; alone: deploy/supply-chain/check.sh
#
# - Rust (cargo-deny 0.20.2, installed under ~/.cache/wasmpilot/tools when missing): licences,
#   duplicate and banned crates, allowed sources, and advisories of Cargo.lock,
#   tools/js-snapshot/Cargo.lock and third_party/wasmtime-48.0.11-tests/Cargo.lock against the
#   offline RustSec snapshot ($WASMPILOT_ADVISORY_DB, else ../shared/advisory-db next to the
#   repository; its SNAPSHOT.md says what it is). No snapshot: the advisory check says SKIPPED
#   and the rest still runs. A snapshot is a floor, not a clearance: newer advisories are not in it.
# - JavaScript and Python (deploy/supply-chain/check_locks.py): licences and sources of every
#   package-lock.json and of the pinned Python toolchain. Their advisory tools (npm audit,
#   pip-audit) ask online services, so no advisory check runs for them here (said as SKIPPED).
#
# Before the real check, a self-test shows each check can fail: an advisory added to a copy of
# the snapshot against a crate in Cargo.lock (a registry crate, and wasmtime, which we build from
# third_party/ with a patch), and lock files with a refused licence and source.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/wasmpilot/target}"

DENY_VERSION=0.20.2
tools="$HOME/.cache/wasmpilot/tools"
say() { printf '%s\n' "$*" >&2; }
step() { printf '\n--> %s\n' "$*" >&2; }

# cargo-deny, pinned.
deny="$tools/bin/cargo-deny"
if ! "$deny" --version 2>/dev/null | grep -qx "cargo-deny $DENY_VERSION"; then
  step "installing cargo-deny $DENY_VERSION under $tools (once per machine)"
  cargo install cargo-deny --version "$DENY_VERSION" --locked --root "$tools" --quiet
fi

# The Rust workspaces we build, each with its own Cargo.lock.
WORKSPACES=(Cargo.toml tools/js-snapshot/Cargo.toml third_party/wasmtime-48.0.11-tests/Cargo.toml)
step "cargo fetch (the crates cargo-deny reads, for every target in deny.toml)"
for manifest in "${WORKSPACES[@]}"; do
  cargo fetch --locked --manifest-path "$manifest" --quiet
done

# cargo-deny reads an advisory database only from a git checkout at a path it derives from the
# database's URL (under db-path): the snapshot is committed there once, dated as the snapshot.
snapshot="${WASMPILOT_ADVISORY_DB:-$repo/../shared/advisory-db}"
# Makes a checkout of the snapshot directory $1 (with crates/) under the db-path $2.
checkout_snapshot() {
  local src=$1 root=$2 probe db dated
  mkdir -p "$root"
  probe=$(WASMPILOT_ADVISORY_DB_ROOT="$root" "$deny" -L debug --offline --manifest-path "$repo/Cargo.toml" \
    --config "$repo/deny.toml" check advisories 2>&1 | sed -n "s/.*Opening advisory database at '\(.*\)'.*/\1/p" | head -1 || true)
  [ -n "$probe" ] || { say "cargo-deny did not say where it opens its database under $root"; return 1; }
  db=$probe
  rm -rf "$db"
  mkdir -p "$db"
  cp -r "$src/." "$db/"
  rm -rf "$db/.git"
  dated=$(grep -o 'dated [0-9-]*' "$src/SNAPSHOT.md" 2>/dev/null | head -1 | cut -d' ' -f2 || true)
  (
    cd "$db"
    git init -q -b main
    git add -A
    GIT_AUTHOR_DATE="${dated:-1970-01-01}T00:00:00Z" GIT_COMMITTER_DATE="${dated:-1970-01-01}T00:00:00Z" \
      git -c user.name=wasmpilot -c user.email=supply-chain@localhost commit -q -m "RustSec snapshot ${dated:-undated}"
  )
}

# `cargo metadata` of the workspace $1, with the crates it patches from third_party/ as the
# releases they patch (patched_as_released.py: else cargo-deny would check no advisory of them).
metadata_of() {
  local manifest=$1 out
  out="$work/metadata-$(echo "$manifest" | tr '/.' '__').json"
  cargo metadata --format-version 1 --locked --offline --manifest-path "$manifest" |
    python3 deploy/supply-chain/patched_as_released.py "$manifest" > "$out"
  printf '%s' "$out"
}

# cargo-deny on the workspace $2 with the database root $1 (""  : no advisory check) and the
# checks $3...
deny_check() {
  local root=$1 manifest=$2 extra=()
  shift 2
  # deny.toml's reviewed duplicates are the main workspace's: the others meet only some.
  [ "$manifest" = Cargo.toml ] || extra=(-A unmatched-skip -A unnecessary-skip)
  WASMPILOT_ADVISORY_DB_ROOT="${root:-/nonexistent}" "$deny" --offline --color never \
    --manifest-path "$manifest" --metadata-path "$(metadata_of "$manifest")" --config deny.toml \
    check --hide-inclusion-graph "${extra[@]}" "$@"
}

# Runs every check on every workspace with the database root $1 ("" : no advisory check).
run_deny() {
  local root=$1 checks=(bans licenses sources) status=0 manifest
  [ -n "$root" ] && checks+=(advisories)
  for manifest in "${WORKSPACES[@]}"; do
    step "cargo deny check ${checks[*]}: $manifest"
    deny_check "$root" "$manifest" "${checks[@]}" || status=1
  done
  return $status
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -d "$snapshot/crates" ]; then
  # Self-test: two made-up advisories, against itoa (from crates.io) and against wasmtime (built
  # from third_party/), each with a fixed version no release has: both must fail, by name.
  step "self-test: made-up advisories against itoa and wasmtime must fail the check"
  cp -r "$snapshot" "$work/tampered"
  for target in itoa wasmtime; do
    mkdir -p "$work/tampered/crates/$target"
    cat > "$work/tampered/crates/$target/RUSTSEC-2999-$target.md" <<EOF
\`\`\`toml
[advisory]
id = "RUSTSEC-2999-000$([ $target = itoa ] && echo 1 || echo 2)"
package = "$target"
date = "2999-01-01"
url = "https://example.invalid/supply-chain-self-test"

[versions]
patched = [">= 999.0.1"]
\`\`\`

# Supply-chain self-test: not a real advisory
EOF
  done
  checkout_snapshot "$work/tampered" "$work/tampered-root"
  if out=$(deny_check "$work/tampered-root" Cargo.toml advisories 2>&1); then
    say "$out"
    say "FAILED: the check passed with made-up advisories against itoa and wasmtime"
    exit 1
  fi
  for expected in RUSTSEC-2999-0001 RUSTSEC-2999-0002 "itoa" "wasmtime" ">=999.0.1"; do
    if ! grep -qF -- "$expected" <<<"$out"; then
      say "$out"
      say "FAILED: the failing advisory check does not name '$expected'"
      exit 1
    fi
  done
  say "ok: the tampered snapshot fails the check, naming each crate, advisory and fixed version"

  step "RustSec snapshot $snapshot: $(head -c 2000 "$snapshot/SNAPSHOT.md" | tr '\n' ' ' | grep -o 'commit [0-9a-f]*, dated [0-9-]*' || echo "no SNAPSHOT.md")"
  root="$HOME/.cache/wasmpilot/advisory-dbs/$(sha256sum "$snapshot/SNAPSHOT.md" | cut -c1-16)"
  checkout_snapshot "$snapshot" "$root"
  dated=$(grep -o 'dated [0-9-]*' "$snapshot/SNAPSHOT.md" | head -1 | cut -d' ' -f2 || true)
  if [ -n "$dated" ]; then
    age=$((($(date +%s) - $(date -d "$dated" +%s)) / 86400))
    say "advisories as of $dated ($age days ago): newer ones are not checked"
  fi
else
  root=""
  say "SKIPPED: the advisory check of the Cargo.lock files (no RustSec snapshot at $snapshot; set WASMPILOT_ADVISORY_DB)"
fi

run_deny "$root"

step "JavaScript and Python lock files: licences and sources (deploy/supply-chain/check_locks.py)"
python3 deploy/supply-chain/check_locks.py --self-test
python3 deploy/supply-chain/check_locks.py
say "SKIPPED: advisories of the JavaScript and Python lock files (npm audit and pip-audit ask online services; no offline database here)"
