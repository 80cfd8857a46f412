"""The server ends the sessions of running workers and the leader (``pg_terminate_backend``, as
a pooler, a failover or an operator would), several rounds during a drain. The queue's own
connection errors must never be charged to a job: the only error records are of job bodies whose
own queries hit the ended session."""

from __future__ import annotations

import random
import time

import pytest

from tests.conftest import wait_until
from tests.faults.harness import (
    Verdict,
    charged_outside_the_body,
    judge,
    start_leader,
    start_worker,
    stop_all,
    terminate_backends,
    wait_for_all,
    wait_for_no_locks,
)
from tests.faults.test_process_faults import enqueue, live_workers
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.postgresql


def test_backends_of_workers_and_leader_terminated_in_rounds(verdicts: list[Verdict]) -> None:
    rng = random.Random(7)
    tokens = enqueue("conn", 2000, seconds=0.005, groups=8)
    workers = [start_worker("--threads", "4") for _ in range(2)]
    leader = start_leader()
    wait_until(lambda: live_workers() == 2)
    wait_until(lambda: RecordedRun.objects.count() > 100, message="the drain to be under way")
    killed = 0
    for _ in range(5):
        killed += terminate_backends()
        time.sleep(rng.uniform(0.3, 1.0))  # a random moment between faults is the point
    wait_for_all(tokens, timeout=180)
    gone = [(p.poll(), p.output()[-1500:]) for p in [*workers, leader] if p.poll() is not None]
    assert not gone, f"every process survived: {gone}"
    stop_all([*workers, leader])
    wait_for_no_locks()

    verdict = judge("server ended worker and leader sessions", tokens, [], faults=killed)
    verdicts.append(verdict)
    assert verdict.problems() == []
    # A session ended while the job's own query runs fails the job (an attempt, retried); one
    # ended at any other moment must cost no job anything.
    assert charged_outside_the_body() == [], "a job was charged for the queue's own errors"
