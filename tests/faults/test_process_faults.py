"""Processes frozen and killed while they run jobs: SIGSTOP/SIGCONT for longer than the
silence limit, and kill -9 of workers and of ``--processes`` children at random moments.
Only runs that were in flight on the frozen or killed process may overlap with another run."""

from __future__ import annotations

import random
import time

import pytest
from django.db import connection

from django_iq import enqueue_many
from django_iq.models import Worker
from tests.conftest import wait_until
from tests.faults.harness import (
    FaultWindow,
    Verdict,
    children,
    freeze,
    judge,
    kill_hard,
    kill_pid,
    start_leader,
    start_worker,
    stop_all,
    thaw,
    wait_for_all,
    wait_for_no_locks,
)
from tests.testapp.jobs import recorded
from tests.testapp.models import RecordedRun


def enqueue(prefix: str, count: int, seconds: float, groups: int = 4) -> set[str]:
    """``count`` entries, one in five grouped into ``groups`` groups."""
    tokens = {f"{prefix}-{i}" for i in range(count)}
    single = [((t,), {"seconds": seconds}) for t in sorted(tokens)[count // 5 :]]
    enqueue_many(recorded, single)
    for i, token in enumerate(sorted(tokens)[: count // 5]):
        group = f"{prefix}-g{i % groups}"
        recorded.using(group_key=group).enqueue(token, group_key=group, seconds=seconds)
    return tokens


def live_workers() -> int:
    return Worker.objects.filter(role="worker", stopped_at__isnull=True).count()


@pytest.mark.parametrize("rounds", [2])
def test_a_worker_frozen_past_the_silence_limit_while_it_runs_jobs(
    rounds: int, verdicts: list[Verdict]
) -> None:
    # Under the --processes supervisor, as deployed: a worker that reaches the database before
    # being declared dead, having stopped runs while cut off, exits (EXIT_FENCED) for its
    # supervisor to start a fresh one, leaving their attempts to recovery.
    supervisor = start_worker("--processes", "2", "--threads", "2")
    leader = start_leader()
    wait_until(lambda: live_workers() == 2)
    tokens: set[str] = set()
    windows: list[FaultWindow] = []
    frozen: set[int] = set()
    for round_number in range(rounds):
        tokens |= enqueue(f"stop{round_number}", 40, seconds=0.3)

        def running_child() -> int | None:
            """A worker process running a job, one not frozen before if there is one."""
            busy = RecordedRun.objects.filter(
                pid__in=children(supervisor), finished_at__isnull=True
            ).values_list("pid", flat=True)
            fresh = [pid for pid in busy if pid not in frozen]
            return fresh[0] if fresh else None

        wait_until(lambda: running_child() is not None, message="a worker to be running a job")
        target = running_child()
        assert target is not None
        frozen.add(target)
        stopped_at = freeze(target)
        time.sleep(5)  # longer than the test settings' silence limit (3 s)
        windows.append(thaw(target, stopped_at))
    wait_for_all(tokens, timeout=120)
    stop_all([supervisor, leader])
    wait_for_no_locks()

    verdict = judge("SIGSTOP 5 s / SIGCONT (silence 3 s)", tokens, windows, faults=rounds)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert supervisor.poll() is not None


ENTRIES = {"postgresql": 5000, "mysql": 1500, "sqlite": 1000}


def test_workers_and_children_killed_at_random_moments(verdicts: list[Verdict]) -> None:
    rng = random.Random(8)
    count = ENTRIES[connection.vendor]
    tokens = enqueue("kill", count, seconds=0.002, groups=10)
    singles = [start_worker("--threads", "4") for _ in range(2)]
    supervised = start_worker("--processes", "2", "--threads", "2")
    leader = start_leader()
    windows: list[FaultWindow] = []
    for round_number in range(6):
        time.sleep(rng.uniform(0.5, 1.5))  # a random moment between faults is the point
        if round_number % 2 and children(supervised):
            windows.append(kill_pid(rng.choice(children(supervised))))  # the supervisor restarts it
        else:
            index = rng.randrange(len(singles))
            windows.append(kill_hard(singles[index]))
            singles[index] = start_worker("--threads", "4")
    wait_for_all(tokens, timeout=300)
    stop_all([*singles, supervised, leader])
    wait_for_no_locks()

    verdict = judge("kill -9 of workers and children", tokens, windows, faults=len(windows))
    verdicts.append(verdict)
    assert verdict.problems() == []
