#!/usr/bin/env python3
"""Checks every internal link of a built documentation site (HTML): the page it names exists,
and so does the anchor (an element id) when it names one. Prints each broken link with its page;
exit 1 when there is any. `--self-test` plants a broken page link and a broken anchor in a copy
of a tiny site and checks both are reported.

Usage: check_site_links.py <site directory> | --self-test
"""

from __future__ import annotations

import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # rustdoc asks for a trait's implementors from other crates with an `async` script that
        # exists only when there are some: optional by design, not a link.
        if tag == "script" and any(name == "async" for name, _ in attrs):
            attrs = [(n, v) for n, v in attrs if n != "src"]
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value and ((tag == "a" and name == "href") or (tag in ("img", "script") and name == "src")
                          or (tag == "link" and name == "href")):
                self.links.append(value)


def broken_links(site: Path) -> tuple[int, list[str]]:
    pages: dict[Path, Page] = {}
    for html in site.rglob("*.html"):
        page = Page()
        page.feed(html.read_text(errors="replace"))
        pages[html.resolve()] = page
    broken, checked = [], 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # not internal
            checked += 1
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no {target.name})")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages.get(target)
                # An id may itself be written percent-encoded (rustdoc's `impl-From%3CT%3E-for-T`).
                # A source page's line range (`#304-311`) is its first line's anchor, scrolled by script.
                first_line = parts.fragment.split("-", 1)[0] if parts.fragment[:1].isdigit() else None
                wanted = {parts.fragment, unquote(parts.fragment)} | ({first_line} if first_line else set())
                if ids is not None and not wanted & ids.ids:
                    broken.append(f"{path.relative_to(site.resolve())}: {link} (no #{parts.fragment})")
    return checked, broken


def self_test() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / "index.html").write_text('<h1 id="top">x</h1><a href="b.html#here">ok</a>'
                                         '<a href="gone.html">planted page</a><a href="b.html#nowhere">planted anchor</a>'
                                         '<a href="https://example.invalid/">outside</a>')
        (site / "b.html").write_text('<h2 id="here">b</h2><a href="index.html#top">back</a>')
        checked, broken = broken_links(site)
        if checked != 4 or len(broken) != 2 or not any("gone.html" in b for b in broken) \
                or not any("#nowhere" in b for b in broken):
            sys.exit(f"FAILED: the link check's self-test: {checked} checked, broken: {broken}")
    print("ok: a planted broken page link and anchor are reported", file=sys.stderr)


def main() -> None:
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    site = Path(sys.argv[1])
    checked, broken = broken_links(site)
    for b in broken:
        print(b)
    if broken:
        sys.exit(f"FAILED: {len(broken)} broken internal links of {checked} in {site}")
    if checked == 0:
        sys.exit(f"FAILED: no internal link found in {site}: is it a built site?")
    print(f"ok: {checked} internal links in {site}, none broken", file=sys.stderr)


if __name__ == "__main__":
    main()
