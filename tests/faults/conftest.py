"""The fault-injection suite: marked ``faults`` (left out of a plain ``pytest`` run; run it with
``pytest -m faults tests/faults``), one transactional database per scenario, and a table of
every scenario's figures at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.harness import Verdict
from tests.faults.report import render_table, write_docs

VERDICTS: list[Verdict] = []
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.django_db(transaction=True))


@pytest.fixture
def verdicts() -> list[Verdict]:
    return VERDICTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not VERDICTS:
        return
    terminalreporter.write_sep("=", "fault-injection figures")
    terminalreporter.write_line(render_table(VERDICTS))
    if os.environ.get("IQ_FAULTS_WRITE_DOCS") == "1":
        failed = terminalreporter.stats.get("failed", [])
        if failed:
            terminalreporter.write_line("not writing docs/reliability.md: scenarios failed")
        else:
            write_docs(DOCS, VERDICTS)
            terminalreporter.write_line(f"figures written to {DOCS}")
