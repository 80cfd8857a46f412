"""No crash, only timing: a worker's heartbeat or a capped queue's claim held up by another
connection's row lock for about the silence limit. Nothing may run twice at once, and a capped
queue may never run more than its cap, since no process was harmed."""

from __future__ import annotations

import time

import pytest

from django_iq import enqueue_many
from django_iq.models import Queue, Worker
from tests.conftest import wait_until
from tests.faults.harness import (
    Verdict,
    env_with,
    judge,
    recorded_runs,
    row_held,
    start_leader,
    start_worker,
    stop_all,
    wait_for_all,
    wait_for_no_locks,
)
from tests.testapp.jobs import recorded

pytestmark = pytest.mark.postgresql

# Heartbeat every second, silent after four: the delays straddle the silence limit.
TIMING = {"HEARTBEAT_INTERVAL_SECONDS": 1, "WORKER_SILENT_AFTER_SECONDS": 4}
DELAYS = [3.0, 4.5, 5.5]


def trickle(prefix: str, batches: int, per_batch: int, queue: str = "default") -> set[str]:
    """Enqueue short jobs in batches half a second apart (a few grouped), while a fault holds."""
    tokens: set[str] = set()
    for batch in range(batches):
        calls = []
        for i in range(per_batch):
            token = f"{prefix}-{batch}-{i}"
            group = f"{prefix}-g{i % 2}" if i < 4 else ""
            calls.append(((token,), {"group_key": group, "seconds": 0.4}))
            tokens.add(token)
        grouped = [c for c in calls if c[1]["group_key"]]
        single = [c for c in calls if not c[1]["group_key"]]
        for call in grouped:
            recorded.using(queue=queue, group_key=call[1]["group_key"]).enqueue(*call[0], **call[1])
        enqueue_many(recorded.using(queue=queue), single)
        time.sleep(0.5)  # the next batch arrives while the row is still held
    return tokens


def most_at_once() -> int:
    """The most runs that were in progress at the same moment."""
    events = []
    for run in recorded_runs():
        events += [(run.start, 1), (run.end, -1)]
    running = peak = 0
    for _, step in sorted(events):
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("delay", DELAYS)
def test_a_heartbeat_held_up_by_a_row_lock_never_makes_an_entry_run_twice(
    delay: float, verdicts: list[Verdict]
) -> None:
    env = env_with(**TIMING)
    workers = [start_worker("--threads", "2", env=env) for _ in range(2)]
    leader = start_leader(env=env)
    wait_until(lambda: Worker.objects.filter(role="worker", stopped_at__isnull=True).count() == 2)
    target = Worker.objects.get(pid=workers[0].pid, stopped_at__isnull=True)
    tokens = trickle("hb", batches=2, per_batch=6)
    with row_held(
        "SELECT id FROM django_iq_worker WHERE id = %s FOR NO KEY UPDATE", [target.pk], delay
    ):
        tokens |= trickle("hb-held", batches=int(delay / 0.5), per_batch=4)
    wait_for_all(tokens, timeout=90)
    stop_all([*workers, leader])
    wait_for_no_locks()

    verdict = judge(f"heartbeat held {delay:g} s (silence 4 s)", tokens, [], faults=1)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert verdict.excused == 0, "no process was harmed: nothing may be excused"


@pytest.mark.parametrize("delay", DELAYS)
def test_a_claim_held_up_by_its_capped_queue_never_runs_twice_or_over_the_cap(
    delay: float, verdicts: list[Verdict]
) -> None:
    Queue.objects.create(name="capped", max_concurrency=4)
    env = env_with(**TIMING)
    workers = [start_worker("--threads", "4", env=env) for _ in range(2)]
    leader = start_leader(env=env)
    wait_until(lambda: Worker.objects.filter(role="worker", stopped_at__isnull=True).count() == 2)
    tokens = trickle("cap", batches=2, per_batch=8, queue="capped")
    with row_held("SELECT name FROM django_iq_queue WHERE name = %s FOR UPDATE", ["capped"], delay):
        tokens |= trickle("cap-held", batches=int(delay / 0.5), per_batch=4, queue="capped")
    wait_for_all(tokens, timeout=90)
    stop_all([*workers, leader])
    wait_for_no_locks()

    verdict = judge(f"capped queue's claim held {delay:g} s", tokens, [], faults=1)
    verdicts.append(verdict)
    assert verdict.problems() == []
    assert verdict.excused == 0
    assert most_at_once() <= 4, "the queue's cap of 4 held at every moment"
