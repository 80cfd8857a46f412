"""The documentation holds together: every relative link in README.md and docs/ reaches a file
(and a heading, when it names one), every Python block parses and every shell block passes
``bash -n``. ``tox -e docs`` runs this file alone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
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


def blocks(language: set[str]) -> list[tuple[Path, int, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match.group(1) in language:
                line = text.count("\n", 0, match.start()) + 1
                out.append((page, line, match.group(2)))
    return out


def test_the_docs_have_pages_links_and_code() -> None:
    assert len(PAGES) > 10
    assert len(links()) > 20
    assert blocks({"python"}) and blocks({"bash", "sh", "shell"})


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


@pytest.mark.parametrize(
    ("page", "line", "code"),
    blocks({"python", "py"}),
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else str(v)[:0],
)
def test_python_block_parses(page: Path, line: int, code: str) -> None:
    try:
        compile(code, f"{page.relative_to(ROOT)}:{line}", "exec")
    except SyntaxError as exc:
        pytest.fail(f"{page.relative_to(ROOT)}:{line + (exc.lineno or 0)}: {exc.msg}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("page", "line", "code"),
    blocks({"bash", "sh", "shell"}),
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else str(v)[:0],
)
def test_shell_block_parses(page: Path, line: int, code: str) -> None:
    checked = subprocess.run(
        ["bash", "-n"], input=code, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, f"{page.relative_to(ROOT)}:{line}: {checked.stderr}"
