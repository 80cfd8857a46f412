"""The active leader killed with SIGKILL while it runs cron, recovery and pruning; a standby
takes over. Cron runs never overlap and keep firing, a dead worker's entries are recovered,
and the queue ends empty."""

from __future__ import annotations

import itertools
import random
import time

from django.utils import timezone

from django_iq.models import LeaderLease, Worker
from tests.conftest import wait_until
from tests.factories import EntryErrorFactory, WorkerFactory
from tests.faults.harness import (
    FaultWindow,
    Verdict,
    env_with,
    judge,
    kill_hard,
    recorded_runs,
    start_leader,
    start_worker,
    stop_all,
    wait_for_all,
    wait_for_no_locks,
)
from tests.faults.test_process_faults import enqueue, live_workers
from tests.processes import Command, pid_of

CRON_TOKEN = "cron-tick"
# The cron job fires every second and runs half a second.
CRON_ENV = {
    "DJANGO_IQ_TEST_CRON": "1",
    "DJANGO_IQ_TEST_CRON_JOB": "tests.testapp.jobs.recorded",
    "DJANGO_IQ_TEST_CRON_EVERY": "1",
    "DJANGO_IQ_TEST_CRON_ARGS": f'["{CRON_TOKEN}"]',
    "DJANGO_IQ_TEST_CRON_KWARGS": '{"seconds": 0.5}',
}


def active(leaders: list[Command]) -> Command | None:
    lease = LeaderLease.objects.filter(expires_at__gt=timezone.now()).first()
    if lease is None:
        return None
    return next((c for c in leaders if pid_of(lease.holder) == c.pid), None)


def test_the_active_leader_killed_during_its_duties_a_standby_takes_over(
    verdicts: list[Verdict],
) -> None:
    rng = random.Random(5)
    env = env_with()
    env.update(CRON_ENV)
    # Old rows for the pruning duty to delete while it is killed.
    old = timezone.now() - timezone.timedelta(days=30)
    EntryErrorFactory.create_batch(200, failed_at=old)
    WorkerFactory.create_batch(50, stopped_at=old)
    tokens = enqueue("leader", 600, seconds=0.01)
    workers = [start_worker("--threads", "3", env=env) for _ in range(2)]
    leaders = [start_leader(env=env) for _ in range(2)]
    wait_until(lambda: live_workers() == 2)
    windows: list[FaultWindow] = []
    for round_number in range(3):
        current = wait_until(lambda: active(leaders), timeout=30, message="an active leader")
        assert isinstance(current, Command)
        if round_number == 1:
            # A worker dies too: recovery has its locks to release when the leader is killed.
            windows.append(kill_hard(workers[0]))
            workers[0] = start_worker("--threads", "3", env=env)
        time.sleep(rng.uniform(0.2, 1.0))  # a random moment between faults is the point
        windows.append(kill_hard(current))
        leaders[leaders.index(current)] = start_leader(env=env)
        time.sleep(rng.uniform(1.0, 2.0))  # a random moment between faults is the point
    # Elected once, then taken over after each of the three kills.
    wait_until(lambda: LeaderLease.objects.get().epoch >= 4, timeout=20, message="takeovers")
    wait_for_all(tokens | {CRON_TOKEN}, timeout=120)
    wait_until(
        lambda: sum(r.token == CRON_TOKEN for r in recorded_runs()) >= 4,
        timeout=30,
        message="cron to keep firing",
    )
    stop_all([*workers, *leaders])
    wait_until(
        lambda: not Worker.objects.filter(role="worker", stopped_at__isnull=True).exists(),
        message="every worker to stop",
    )

    cron_runs = sorted((r for r in recorded_runs() if r.token == CRON_TOKEN), key=lambda r: r.start)
    # The cron entry left waiting for its next fire is not work lost: the judge sees it as left.
    from django_iq.models import Entry

    Entry.objects.filter(cron_job__isnull=False).delete()
    wait_for_no_locks()
    verdict = judge(
        "kill -9 of the active leader", tokens | {CRON_TOKEN}, windows, faults=len(windows)
    )
    verdicts.append(verdict)
    assert verdict.problems() == []
    gaps = [b.start - a.end for a, b in itertools.pairwise(cron_runs) if a.end != float("inf")]
    assert max(gaps, default=0) < 4, f"cron kept firing every second through takeovers: {gaps}"
