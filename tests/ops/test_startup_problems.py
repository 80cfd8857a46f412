"""A database django_iq cannot use, met the first time: ``migrate`` not run, or ``DATABASES``
pointing at the wrong port or database. Real commands against a real empty database or a
port nobody listens on; each says what is wrong in one line and exits 1, without a traceback
and without waiting through retries."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.processes import ROOT, command_env, database_url

# A port nothing listens on (below the ephemeral range, not a database's).
CLOSED_PORT = "9"


def run(*args: str, url: str, timeout: float = 120) -> tuple[int, str, str, float]:
    """Run ``python -m django <args>`` against ``url``; return (exit code, stdout, stderr,
    seconds it took)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=command_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def shell_prints(script: str, url: str) -> str:
    """Run ``script`` in ``manage.py shell`` against ``url``; return the last line it printed."""
    code, stdout, stderr, _ = run("shell", "-c", script, url=url)
    assert code == 0, stderr
    return stdout.splitlines()[-1]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def empty_database_url(tmp_path: Path) -> Iterator[str]:
    """A database of the vendor under test with no table at all (``migrate`` never run)."""
    settings = connection.settings_dict
    name = f"{settings['NAME']}_empty"[-60:] if connection.vendor != "sqlite" else ""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite3'}"
        return
    if connection.vendor == "postgresql":
        import psycopg

        admin = psycopg.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=settings["PORT"] or 5432,
            user=settings["USER"],
            password=settings.get("PASSWORD") or None,
            dbname="postgres",
            autocommit=True,
        )
        drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
        create = f'CREATE DATABASE "{name}"'
    else:
        import MySQLdb

        admin = MySQLdb.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=int(settings["PORT"] or 3306),
            user=settings["USER"],
            password=settings.get("PASSWORD") or "",
        )
        drop, create = f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`"
    with admin.cursor() as cursor:
        cursor.execute(drop)
        cursor.execute(create)
    try:
        yield database_url(name=name)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(drop)
        admin.close()


# -- migrate not run -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["runworker", "runleader", "iq_status"])
def test_a_process_on_a_database_without_migrations_says_run_migrate_in_one_line(
    empty_database_url: str, command: str
) -> None:
    code, _, stderr, _ = run(command, url=empty_database_url)
    assert code == 1
    line = one_line(stderr)
    assert line.startswith("CommandError: django_iq's tables do not exist in database 'default'")
    assert "run `manage.py migrate` first" in line
    assert "migrations to apply" in line


def test_enqueue_on_a_database_without_migrations_raises_migrations_not_applied(
    empty_database_url: str,
) -> None:
    script = (
        "from django_iq.exceptions import MigrationsNotApplied\n"
        "from tests.testapp.jobs import noop\n"
        "try:\n"
        "    noop.enqueue()\n"
        "except MigrationsNotApplied as exc:\n"
        "    print('refused:', exc)\n"
    )
    line = shell_prints(script, empty_database_url)
    assert line.startswith("refused: django_iq's tables are missing from database 'default' (")
    assert line.endswith("run `manage.py migrate` first; nothing was enqueued.")


def test_health_on_a_database_without_migrations_answers_503_not_migrated(
    empty_database_url: str,
) -> None:
    script = (
        "import json\n"
        "from django.test import Client\n"
        "response = Client().get('/iq/health/')\n"
        "print(json.dumps({'status': response.status_code, 'type': response['Content-Type'],\n"
        "                  'body': response.json()}))\n"
    )
    assert json.loads(shell_prints(script, empty_database_url)) == {
        "status": 503,
        "type": "application/json",
        "body": {"status": "failing", "reasons": [{"reason": "not_migrated", "queue": None}]},
    }


def test_check_warns_w004_on_a_database_without_migrations(empty_database_url: str) -> None:
    code, _, stderr, _ = run("check", "--database", "default", url=empty_database_url)
    assert code == 0, stderr
    assert "(django_iq.W004) django_iq's tables do not exist in database 'default'" in stderr
    assert "HINT: Workers, leaders and iq_status refuse to start" in stderr


@pytest.mark.django_db
def test_check_says_nothing_of_migrations_once_they_are_applied() -> None:
    from django_iq.checks import check_migrations

    assert check_migrations(databases=["default"]) == []


def test_check_says_nothing_of_migrations_when_the_database_cannot_be_reached() -> None:
    url = "postgres://postgres@127.0.0.1:" + CLOSED_PORT + "/iq_nowhere"
    code, _, stderr, _ = run("check", "--database", "default", url=url)
    assert code == 0, stderr
    assert "W004" not in stderr


# -- wrong DATABASES -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["runworker", "runleader"])
@pytest.mark.parametrize(
    ("url", "where", "reason"),
    [
        (
            f"postgres://postgres@127.0.0.1:{CLOSED_PORT}/iq_first",
            f"(postgresql 127.0.0.1:{CLOSED_PORT}/iq_first)",
            "Connection refused",
        ),
        (
            "postgres://postgres@127.0.0.1:5432/iq_no_such_database",
            "(postgresql 127.0.0.1:5432/iq_no_such_database)",
            'database "iq_no_such_database" does not exist',
        ),
        pytest.param(
            f"mysql://root@127.0.0.1:{CLOSED_PORT}/iq_first",
            f"(mysql 127.0.0.1:{CLOSED_PORT}/iq_first)",
            "Can't connect to server on '127.0.0.1'",
            id="mariadb-wrong-port",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("MySQLdb") is None,
                reason="mysqlclient is not installed in this environment",
            ),
        ),
    ],
    ids=["postgresql-wrong-port", "postgresql-wrong-name", "mariadb-wrong-port"],
)
def test_a_process_that_cannot_connect_at_start_fails_at_once_in_one_line(
    command: str, url: str, where: str, reason: str
) -> None:
    code, _, stderr, seconds = run(command, url=url)
    assert code == 1
    line = one_line(stderr)
    assert line.startswith(f"CommandError: Cannot connect to database 'default' {where}: ")
    assert reason in line
    # No retries: the 16 s of retries the registration would wait are not spent. The rest is
    # Python and Django starting on a loaded machine.
    _, _, _, baseline = run("version", url=url)
    assert seconds < baseline + 8, (seconds, baseline)
