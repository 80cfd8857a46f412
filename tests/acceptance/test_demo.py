"""The README's first command: the example project's demo runs to completion on a fresh SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def test_demo_runs_to_completion_on_a_fresh_sqlite_database(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'demo.sqlite3'}"

    result = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), "demo", "--count", "24"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "All 24 jobs finished" in result.stdout
    assert "24/24 done" in result.stdout, "the progress bar reaches the total"
    assert "every balance correct" in result.stdout, "grouped jobs ran one at a time"
