#!/usr/bin/env python3
"""The JavaScript and Python half of the supply-chain check: licences and sources.

Reads deploy/supply-chain/locks.toml (which lock files, the registry, the reviewed exceptions)
and deny.toml's licence list; prints one line per problem and exits 1 when there is any.
`--self-test` runs the checks on made-up lock files that must fail, by name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Trove classifiers to SPDX, for packages that declare their licence only that way.
CLASSIFIERS = {
    "MIT License": "MIT",
    "Apache Software License": "Apache-2.0",
    "ISC License (ISCL)": "ISC",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "Python Software Foundation License": "PSF-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
}


def allowed_by(expression: str, allowed: set[str]) -> bool:
    """Whether an SPDX expression (AND, OR, WITH, parentheses) is met by the allowed licences."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expression)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def leaf() -> bool:
        if peek() == "(":
            take()
            value = either()
            if take() != ")":
                raise ValueError(expression)
            return value
        name = take()
        if peek() == "WITH":
            take()
            name = f"{name} WITH {take()}"
        return name in allowed

    def both() -> bool:
        value = leaf()
        while peek() == "AND":
            take()
            value = leaf() and value
        return value

    def either() -> bool:
        value = both()
        while peek() == "OR":
            take()
            value = both() or value
        return value

    try:
        value = either()
        return value and pos == len(tokens)
    except (IndexError, ValueError):
        return False


def npm_registry() -> str | None:
    """The registry this machine's npm installs from (`npm config get registry`)."""
    import shutil
    import subprocess

    npm = shutil.which("npm")
    if npm is None:
        return None
    out = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True)
    registry = out.stdout.strip()
    return registry if out.returncode == 0 and registry.startswith(("https://", "http://")) else None


def check_npm_lock(path: Path, policy: dict, allowed: set[str]) -> list[str]:
    problems = []
    lock = json.loads(path.read_text())
    if lock.get("lockfileVersion") != 3:
        problems.append(f"{path}: lockfileVersion {lock.get('lockfileVersion')}, not 3")
    registry = policy.get("npm-registry") or npm_registry()
    exceptions = policy.get("licence-exceptions", {})
    for where, entry in lock.get("packages", {}).items():
        if not where or entry.get("link"):
            continue  # the project itself, or a workspace link
        # An alias (name@npm:other) installs under its own folder: its "name" is the package's.
        name = entry.get("name") or where.rsplit("node_modules/", 1)[-1]
        what = f"{path}: {name}@{entry.get('version', '?')}"
        if "node_modules/" in where:
            resolved = entry.get("resolved")
            if resolved is not None and (registry is None or not resolved.startswith(registry)):
                problems.append(f"{what}: comes from {resolved[:120]}, not {registry or 'the configured registry (npm not found)'}")
            if not str(entry.get("integrity", "")).startswith("sha512-"):
                problems.append(f"{what}: no sha512 integrity hash")
        # else: a folder of this repository (a file: dependency), checked as its own source.
        licence = entry.get("license") or exceptions.get(name, {}).get("licence")
        if not licence:
            problems.append(f"{what}: declares no licence (review it into locks.toml)")
        elif not allowed_by(licence, allowed) and exceptions.get(name, {}).get("licence") != licence:
            problems.append(f"{what}: licence {licence} is not allowed (deny.toml [licenses])")
    return problems


def check_requirements(path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    problems, pins = [], []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pin = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if not pin:
            problems.append(f"{path}:{number}: '{line[:80]}' is not one package pinned from PyPI (name==version)")
            continue
        pins.append((pin.group(1), pin.group(2)))
    return problems, pins


def python_licences(venv: Path, pins: list[tuple[str, str]]) -> dict[str, str | None]:
    """Each pinned package's declared licence, read from the venv's metadata by its Python."""
    python = venv / "bin" / "python"
    script = r"""
import importlib.metadata as md, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        m = md.metadata(name)
    except md.PackageNotFoundError:
        out[name] = ["missing"]
        continue
    out[name] = [m.get("Version"), m.get("License-Expression"), m.get("License"),
                 [c for c in (m.get_all("Classifier") or []) if c.startswith("License ::")]]
print(json.dumps(out))
"""
    import subprocess

    raw = subprocess.run(
        [str(python), "-c", script, json.dumps([n for n, _ in pins])],
        check=True, capture_output=True, text=True,
    ).stdout
    found = {}
    for name, meta in json.loads(raw).items():
        if meta == ["missing"]:
            found[name] = "missing"
            continue
        _, expression, licence, classifiers = meta
        spdx = [CLASSIFIERS[c.rsplit(" :: ", 1)[-1]] for c in classifiers if c.rsplit(" :: ", 1)[-1] in CLASSIFIERS]
        if expression:
            found[name] = expression
        elif licence and len(licence) <= 40 and "\n" not in licence:
            found[name] = licence
        elif spdx:
            found[name] = " OR ".join(spdx)
        else:
            found[name] = None
    return found


def check_python(pins: list[tuple[str, str]], venv: Path, policy: dict, allowed: set[str], source: Path) -> list[str]:
    problems = []
    exceptions = policy.get("licence-exceptions", {})
    for name, licence in python_licences(venv, pins).items():
        what = f"{source}: {name}"
        if licence == "missing":
            problems.append(f"{what}: not installed in {venv}")
            continue
        reviewed = exceptions.get(name, {}).get("licence")
        licence = licence or reviewed
        if not licence:
            problems.append(f"{what}: declares no licence (review it into locks.toml)")
        elif not allowed_by(licence, allowed) and reviewed != licence:
            problems.append(f"{what}: licence {licence} is not allowed (deny.toml [licenses])")
    return problems


def run(policy: dict, allowed: set[str], root: Path, say_skips: bool = True) -> list[str]:
    problems = []
    for lock in policy.get("npm-locks", []):
        problems += check_npm_lock(root / lock, policy, allowed)
    venv = Path(os.path.expanduser(policy.get("python-venv", "")))
    for requirements in policy.get("python-requirements", []):
        found, pins = check_requirements(root / requirements)
        problems += found
        if (venv / "bin" / "python").exists():
            problems += check_python(pins, venv, policy, allowed, root / requirements)
        elif say_skips:
            print(f"SKIPPED: licences of {requirements} (no toolchain venv at {venv}: deploy/local/guest-toolchains.sh makes it)", file=sys.stderr)
    return problems


def self_test(policy: dict, allowed: set[str]) -> None:
    """Made-up lock files with a refused licence, an outside source, a missing hash and an
    unpinned requirement: each must be reported by name."""
    assert allowed_by("MIT OR GPL-3.0-only", allowed)
    assert not allowed_by("MIT AND GPL-3.0-only", allowed)
    assert allowed_by("(Apache-2.0 WITH LLVM-exception)", allowed)
    assert not allowed_by("MIT OR", allowed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "package-lock.json").write_text(json.dumps({
            "lockfileVersion": 3,
            "packages": {
                "": {"name": "probe"},
                "node_modules/copyleft-pkg": {"version": "1.0.0", "license": "GPL-3.0-only", "integrity": "sha512-x"},
                "node_modules/elsewhere-pkg": {"version": "1.0.0", "license": "MIT", "integrity": "sha512-x",
                                               "resolved": "https://attacker.invalid/elsewhere-pkg-1.0.0.tgz"},
                "node_modules/unhashed-pkg": {"version": "1.0.0", "license": "MIT"},
                "node_modules/silent-pkg": {"version": "1.0.0", "integrity": "sha512-x"},
            },
        }))
        (root / "requirements.txt").write_text("good==1.0\nfloating>=2\nevil @ https://attacker.invalid/evil.whl\n--extra-index-url https://attacker.invalid/\n")
        probe = dict(policy, **{"npm-locks": ["package-lock.json"], "python-requirements": ["requirements.txt"],
                                "python-venv": str(root / "no-venv"), "npm-registry": "https://registry.example.internal/"})
        problems = run(probe, allowed, root, say_skips=False)
    expected = ["copyleft-pkg@1.0.0: licence GPL-3.0-only", "elsewhere-pkg@1.0.0: comes from https://attacker.invalid",
                "unhashed-pkg@1.0.0: no sha512", "silent-pkg@1.0.0: declares no licence",
                "'floating>=2' is not one package", "'evil @ https", "'--extra-index-url"]
    for e in expected:
        if not any(e in p for p in problems):
            print("\n".join(problems), file=sys.stderr)
            sys.exit(f"FAILED: the self-test's lock files were not reported for: {e}")
    if len(problems) != len(expected):
        print("\n".join(problems), file=sys.stderr)
        sys.exit(f"FAILED: {len(problems)} problems reported for {len(expected)} planted")
    print(f"ok: the made-up lock files fail the check ({len(problems)} problems, each named)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="check that each check can fail")
    args = parser.parse_args()
    policy = tomllib.loads((REPO / "deploy/supply-chain/locks.toml").read_text())
    allowed = set(tomllib.loads((REPO / "deny.toml").read_text())["licenses"]["allow"])
    if args.self_test:
        self_test(policy, allowed)
        return
    problems = run(policy, allowed, REPO)
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"FAILED: {len(problems)} supply-chain problems in the JavaScript and Python lock files")
    print("ok: JavaScript and Python lock files: licences and sources", file=sys.stderr)


if __name__ == "__main__":
    main()
