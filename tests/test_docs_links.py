"""Every relative link of README.md and docs/*.md leads somewhere: the file exists, and an anchor
names a heading of its page as GitHub spells heading anchors."""
from __future__ import annotations

import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def prose(path: str) -> str:
    """The page without its fenced code blocks, whose brackets are code, not links."""
    with open(path, encoding="utf-8") as handle:
        return FENCE.sub("", handle.read())


def anchors(path: str) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation but '-' and '_' dropped, spaces as
    '-', and a repeated heading numbered (-1, -2, ...)."""
    found: set[str] = set()
    for line in prose(path).splitlines():
        heading = re.match(r"#{1,6} +(.*?)\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        numbered, n = slug, 0
        while numbered in found:
            n += 1
            numbered = f"{slug}-{n}"
        found.add(numbered)
    return found


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto: ...
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = f"{os.path.relpath(page, REPO)}: {target}"
            if not os.path.exists(resolved):
                broken.append(f"{where} (no such file)")
            elif anchor and (not resolved.endswith(".md") or anchor not in anchors(resolved)):
                broken.append(f"{where} (no such heading)")
    assert not broken, broken


def test_the_readme_links_every_page_of_docs():
    readme = prose(os.path.join(REPO, "README.md"))
    pages = {os.path.relpath(p, REPO) for p in PAGES[1:]}
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    assert pages <= linked, sorted(pages - linked)
