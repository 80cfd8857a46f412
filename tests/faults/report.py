"""The suite's table of figures, printed at the end of a run and kept in docs/reliability.md
between two markers."""

from __future__ import annotations

import platform
import re
from datetime import date
from pathlib import Path

import django
import psutil

from tests.faults.harness import Verdict

START, END = "<!-- fault-figures:start -->", "<!-- fault-figures:end -->"
DATABASE_ORDER = ["PostgreSQL", "MariaDB", "SQLite"]
HEADER = (
    "| scenario | database | entries | faults injected | re-runs after faults | overlaps | lost |",
    "|---|---|---|---|---|---|---|",
)


def render_table(verdicts: list[Verdict]) -> str:
    rows = [
        f"| {v.scenario} | {v.database} | {v.entries:,} | {v.faults} | {v.reruns} | "
        f"{len(v.overlaps)} | {len(v.lost)} |"
        for v in verdicts
    ]
    return "\n".join([*HEADER, *rows])


def write_docs(path: Path, verdicts: list[Verdict]) -> None:
    """Replace this run's databases' rows between the markers of ``path``; rows of databases
    this run did not cover are kept (each database runs the suite apart)."""
    machine = (
        f"{psutil.cpu_count()} cores, {round(psutil.virtual_memory().total / 2**30)} GiB, "
        f"Python {platform.python_version()}, Django {django.get_version()}"
    )
    text = path.read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    found = pattern.search(text)
    if not found:
        raise AssertionError(f"{path} has no {START} ... {END} block")
    ran = {v.database for v in verdicts}
    kept = [
        line
        for line in found.group(0).splitlines()
        if line.startswith("| ") and line not in HEADER and line.split(" | ")[1] not in ran
    ]
    rows = kept + render_table(verdicts).splitlines()[len(HEADER) :]
    rows.sort(key=lambda line: DATABASE_ORDER.index(line.split(" | ")[1]))
    block = "\n".join(
        [
            START,
            f"Latest run: {date.today().isoformat()}, {machine}; "
            "`IQ_FAULTS_WRITE_DOCS=1 pytest -m faults tests/faults` on each database.",
            "",
            *HEADER,
            *rows,
            END,
        ]
    )
    path.write_text(pattern.sub(lambda _: block, text))
