"""PostgreSQL itself stopped and started again in the middle of a drain, on a cluster of the
suite's own: workers and the leader reconnect and finish every entry, no job is charged for
the outage, and an enqueue during the outage fails at once with ``DatabaseUnavailable``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.conftest import wait_until
from tests.faults.cluster import OwnCluster
from tests.faults.harness import (
    Verdict,
    charged_outside_the_body,
    judge,
    start_leader,
    start_worker,
    stop_all,
    wait_for_all,
    wait_for_no_locks,
)
from tests.processes import ROOT, command_env
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.postgresql

ENTRIES = 3000

ENQUEUE = """
import time
from django_iq import enqueue_many
from tests.testapp.jobs import recorded
started = time.monotonic()
try:
    enqueue_many(recorded, [((f"{prefix}-{i}",), {"seconds": 0.005}) for i in range(%d)])
except Exception as exc:
    print("raised", type(exc).__name__, round(time.monotonic() - started, 3), exc)
else:
    print("enqueued", round(time.monotonic() - started, 3))
"""


@pytest.fixture
def cluster() -> Iterator[tuple[OwnCluster, str]]:
    own = OwnCluster()
    try:
        url = own.create("iq_restart")
        migrate = run_python(url, "-m", "django", "migrate", "--verbosity", "0")
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        # The test's own connection reads the cluster while the scenario runs, then goes back.
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(own.port), NAME="iq_restart")
        try:
            yield own, url
        finally:
            connection.close()
            connection.settings_dict.update(saved)
    finally:
        own.remove()


def run_python(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=command_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def enqueue(url: str, prefix: str, count: int) -> str:
    code = ENQUEUE.replace("{prefix}", prefix) % count
    result = run_python(url, "-m", "django", "shell", "-c", code)
    lines = result.stdout.strip().splitlines()  # the last: what the code printed
    return lines[-1] if lines else result.stderr.strip()[-2000:]


def test_postgresql_restarted_under_a_drain(
    cluster: tuple[OwnCluster, str], verdicts: list[Verdict]
) -> None:
    own, url = cluster
    assert enqueue(url, "restart", ENTRIES).startswith("enqueued")
    tokens = {f"restart-{i}" for i in range(ENTRIES)}
    # Silent after 10 s: the 3 s outage must not make the leader declare the workers dead
    # (that would be the documented cut-off case, with its WorkerLost attempts).
    env = command_env(DATABASE_URL=url, DJANGO_IQ_WORKER_SILENT_AFTER_SECONDS="10")
    workers = [start_worker("--threads", "4", env=env) for _ in range(2)]
    leader = start_leader(env=env)
    wait_until(
        lambda: RecordedRun.objects.count() > ENTRIES // 4,
        timeout=60,
        message="the drain to be under way",
    )

    connection.close()
    own.stop("fast")
    during = enqueue(url, "during", 10)
    time.sleep(3)  # the outage: longer than a heartbeat, shorter than the retries' patience
    own.start()

    wait_for_all(tokens, timeout=180)
    assert all(p.poll() is None for p in [*workers, leader]), "every process rode it out"
    stop_all([*workers, leader])
    wait_for_no_locks()

    verdict = judge("PostgreSQL restarted mid-drain", tokens, [], faults=1)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert charged_outside_the_body() == []
    assert during.startswith("raised DatabaseUnavailable"), during
    assert float(during.split()[2]) < 5, f"the enqueue failed at once: {during}"
