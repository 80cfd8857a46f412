"""PostgreSQL itself stopped and started again in the middle of a drain, on a cluster of the
suite's own: eight worker processes and the leader reconnect by themselves (the same processes,
none exits) and finish every entry, no entry and no group runs twice at once, no job is charged
for the outage, and an enqueue during the outage fails at once with ``DatabaseUnavailable``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from django_iq import enqueue_many
from django_iq.models import Worker
from tests.conftest import wait_until
from tests.faults.cluster import OwnCluster, own_database, run_python
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
from tests.processes import command_env
from tests.testapp.jobs import recorded
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.postgresql

ENTRIES = 3000
GROUPS = 40
WORKERS = 8

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
    with own_database("iq_restart") as (own, url):
        yield own, url


def enqueue(url: str, prefix: str, count: int) -> str:
    code = ENQUEUE.replace("{prefix}", prefix) % count
    result = run_python(url, "-m", "django", "shell", "-c", code)
    lines = result.stdout.strip().splitlines()  # the last: what the code printed
    return lines[-1] if lines else result.stderr.strip()[-2000:]


def enqueue_drain(prefix: str, count: int, groups: int) -> set[str]:
    """``count`` entries of ``recorded``: every other one in one of ``groups`` groups (whose
    entries must run one at a time), the rest in no group. Return their tokens."""
    tokens = [f"{prefix}-{i}" for i in range(count)]
    enqueue_many(recorded, [((t,), {"seconds": 0.005}) for t in tokens[1::2]])
    for g in range(groups):
        key = f"{prefix}-g{g}"
        calls = [((t,), {"group_key": key, "seconds": 0.005}) for t in tokens[::2][g::groups]]
        recorded.using(group_key=key).enqueue_many(calls)
    return set(tokens)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgresql_restarted_under_a_drain(
    cluster: tuple[OwnCluster, str], verdicts: list[Verdict], mode: str
) -> None:
    """Eight worker processes, each on its own (no supervisor to restart it), and a leader;
    the server stopped ``fast`` (sessions ended cleanly) or ``immediate`` (no shutdown at all,
    crash recovery at the next start) in the middle of the drain."""
    own, url = cluster
    tokens = enqueue_drain("restart", ENTRIES, GROUPS)
    # Silent after 10 s: the 3 s outage must not make the leader declare the workers dead
    # (that would be the documented cut-off case, with its WorkerLost attempts).
    env = command_env(DATABASE_URL=url, DJANGO_IQ_WORKER_SILENT_AFTER_SECONDS="10")
    workers = [start_worker("--threads", "2", env=env) for _ in range(WORKERS)]
    leader = start_leader(env=env)
    wait_until(
        lambda: RecordedRun.objects.count() > ENTRIES // 4,
        timeout=60,
        message="the drain to be under way",
    )

    connection.close()
    own.stop(mode)
    during = enqueue(url, "during", 10)
    time.sleep(3)  # the outage: longer than a heartbeat, shorter than the retries' patience
    own.start()
    back_at = time.time()

    wait_for_all(tokens, timeout=180)
    assert all(p.poll() is None for p in [*workers, leader]), "every process rode it out"
    # The same processes, under the rows they registered at their start: none was declared
    # dead and registered again, and each claimed and ran entries once the server was back.
    rows = Worker.objects.filter(role="worker")
    assert sorted(rows.values_list("pid", flat=True)) == sorted(w.pid for w in workers)
    assert not rows.filter(stopped_at__isnull=False).exists()
    ran_after = set(
        RecordedRun.objects.filter(started_at__gt=back_at).values_list("pid", flat=True)
    )
    assert ran_after == {w.pid for w in workers}, "every worker process reconnected and ran"
    stop_all([*workers, leader])
    wait_for_no_locks()

    verdict = judge(f"PostgreSQL restarted mid-drain ({mode} stop)", tokens, [], faults=1)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert charged_outside_the_body() == []
    assert during.startswith("raised DatabaseUnavailable"), during
    assert float(during.split()[2]) < 5, f"the enqueue failed at once: {during}"
