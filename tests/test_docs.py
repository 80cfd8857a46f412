"""The documentation holds together: every relative link in README.md and docs/ reaches a file
(and a heading, when it names one), and every code block runs as written: one test per block,
named ``page.md:line`` (tests/docsrun.py says how each language runs, and the markers).
``tox -e docs`` runs this file alone; the blocks run on SQLite and are skipped elsewhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docsrun import (
    PAGES,
    ROOT,
    Block,
    code_blocks,
    remove_shell_sandbox,
    run_block,
    runs_on_this_database,
)

BLOCKS = code_blocks()
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _without_code(text: str) -> str:
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        seen = counts.get(base, 0)
        counts[base] = seen + 1
        found.add(base if seen == 0 else f"{base}-{seen}")
    return found


def links() -> list[tuple[Path, str]]:
    out = []
    for page in PAGES:
        for match in LINK.finditer(_without_code(page.read_text())):
            target = match.group(1) or match.group(2)
            if not re.match(r"^[a-z]+:", target):
                out.append((page, target))
    return out


def test_the_docs_have_pages_links_and_code() -> None:
    assert len(PAGES) > 10
    assert len(links()) > 20
    assert {block.page for block in BLOCKS} >= {ROOT / "README.md", ROOT / "docs/index.md"}


@pytest.mark.parametrize(
    ("page", "target"),
    links(),
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v,
)
def test_relative_link_reaches_its_file_and_heading(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(ROOT)} links to missing {target}"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), (
            f"{page.relative_to(ROOT)} links to #{anchor}, not a heading of "
            f"{dest.relative_to(ROOT)}"
        )


@pytest.fixture(scope="module", autouse=True)
def _shell_sandbox() -> Iterator[None]:
    yield
    remove_shell_sandbox()


@pytest.mark.django_db
@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_block_runs_as_written(block: Block) -> None:
    """The block runs after the blocks above it on its page, in the test's transaction."""
    reason = runs_on_this_database()
    if reason:
        pytest.skip(reason)
    run_block(block)
