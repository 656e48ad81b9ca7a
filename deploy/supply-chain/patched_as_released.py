#!/usr/bin/env python3
"""Makes the crates a workspace patches ([patch.crates-io] paths) look like the releases they patch.

cargo-deny checks advisories only of crates from a registry, so our patched copy of a published
crate (third_party/wasmtime-48.0.11) would be skipped: here, in `cargo metadata`'s output
(stdin to stdout), each such path crate gets crates.io as its source, and is checked by name
and version as that release. Usage: patched_as_released.py <workspace Cargo.toml> < metadata
"""

import json
import sys
import tomllib
from pathlib import Path

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def main() -> None:
    manifest = Path(sys.argv[1])
    patches = tomllib.loads(manifest.read_text()).get("patch", {}).get("crates-io", {})
    patched = {name for name, spec in patches.items() if isinstance(spec, dict) and "path" in spec}
    metadata = json.load(sys.stdin)
    renamed = []
    for package in metadata["packages"]:
        if package["name"] in patched and package.get("source") is None:
            package["source"] = CRATES_IO
            renamed.append(f"{package['name']}@{package['version']}")
    json.dump(metadata, sys.stdout)
    for crate in renamed:
        print(f"checked as the release it patches: {crate}", file=sys.stderr)
    missing = patched - {c.rsplit("@", 1)[0] for c in renamed}
    if missing:
        sys.exit(f"patched crates not found in the metadata: {sorted(missing)}")


if __name__ == "__main__":
    main()
