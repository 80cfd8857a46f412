"""The queue on a database of its own: tests/queue_db, run under tests.settings_queue_db in a
pytest of its own (settings are read once per run), with the queue's tables on PostgreSQL and
the application's on PostgreSQL or on SQLite. Runs where the suite runs on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import Error
from django.test import override_settings

from django_iq.checks import check_settings
from tests.processes import ROOT, database_url

pytestmark = pytest.mark.slow


@pytest.mark.django_db
@pytest.mark.parametrize("application", ["postgresql", "sqlite"])
def test_the_queue_on_its_own_database(application: str, vendor: str, tmp_path: Path) -> None:
    if vendor != "postgresql":
        pytest.skip("the queue's own database is PostgreSQL: run with DATABASE_URL=postgres://")
    # Databases of their own on the suite's server, named after the suite's (so that runs of
    # the suite side by side do not meet); pytest makes and drops their test_ copies.
    base = database_url().rsplit("/", 1)[1].removeprefix("test_")
    queue = database_url(f"{base}_q_{application[:2]}")
    app = (
        database_url(f"{base}_a_{application[:2]}")
        if application == "postgresql"
        else f"sqlite:///{tmp_path / 'application.sqlite3'}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": app,
        "QUEUE_DATABASE_URL": queue,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--ds",
            "tests.settings_queue_db",
            "--create-db",
            "tests/queue_db",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]


@override_settings(DJANGO_IQ={"DATABASE": "nowhere"})
def test_a_queue_database_that_is_not_an_alias_is_refused() -> None:
    [error] = [m for m in check_settings() if m.id == "django_iq.E022"]
    assert isinstance(error, Error) and "'nowhere'" in error.msg


@override_settings(DJANGO_IQ={"DATABASE": "default"}, DATABASE_ROUTERS=[])
def test_a_queue_database_without_the_router_is_refused() -> None:
    [error] = [m for m in check_settings() if m.id == "django_iq.E023"]
    assert "django_iq.routers.QueueRouter" in error.hint  # type: ignore[operator]
