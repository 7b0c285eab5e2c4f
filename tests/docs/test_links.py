"""Every relative link of README.md, of the pages in docs/ and of BENCHMARKS.md leads
somewhere (issue 29): to a file of the repository, and where it names an anchor, to a
heading of that page (as GitHub makes a heading's anchor)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.readme import ROOT, pages

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
LINKED = [*pages(), ROOT / "BENCHMARKS.md"]


def prose(markdown: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks."""
    kept: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(markdown.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append((number, line))
    return kept


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as ``-``."""
    text = CODE_SPAN.sub(lambda m: m[0].strip("`"), heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for _, line in prose(page.read_text()):
        if (heading := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)) is not None:
            name = anchor(heading[1])
            n, unique = 0, name
            while unique in found:  # GitHub numbers a repeated heading's anchor
                n += 1
                unique = f"{name}-{n}"
            found.add(unique)
    return found


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, line in prose(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
                continue
            path, _, fragment = unquote(target).partition("#")
            to = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if ROOT not in to.parents or not to.exists():
                problems.append(f"{where}: no such file")
            elif fragment and (to.suffix != ".md" or fragment not in anchors(to)):
                problems.append(f"{where}: no such heading")
    return problems


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert not broken_links(page), "\n".join(broken_links(page))


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    folder = ROOT / "docs"
    page = folder / f".links-{tmp_path.name}.md"  # inside the repository, as pages are
    page.write_text(
        "# A page\n\n## Its `second` part\n\n"
        "[ok](#its-second-part) [ok](deploy.md#with-docker-compose) ![ok](inbox-run.png)\n"
        "[gone](nowhere.md) [gone](deploy.md#nowhere) [gone](#nowhere) [web](https://x.y)\n"
        "`[in code](nowhere.md)`\n\n```\n[in a block](nowhere.md)\n```\n"
    )
    try:
        problems = broken_links(page)
    finally:
        page.unlink()
    assert [p.split(": ", 1)[1] for p in problems] == [
        "nowhere.md: no such file",
        "deploy.md#nowhere: no such heading",
        "#nowhere: no such heading",
    ]
