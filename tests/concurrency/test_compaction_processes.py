"""Compaction against real workers (PostgreSQL): entries enqueued from several threads while two
``runworker`` processes run them and two threads run compaction passes. Every id is processed
exactly once, and no two runs of one group overlap."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import defaultdict

import pytest
from django.db import connections

from django_iq.compaction import compact
from django_iq.models import Entry, EntryError, GroupLock, QueueTotal
from tests.conftest import wait_until
from tests.processes import finish, start_command
from tests.testapp.jobs import invalidate
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GROUPS = 6
ENQUEUERS = 4
PER_ENQUEUER = 150


def enqueue_ids(first: int, done: threading.Event, errors: list[BaseException]) -> None:
    """Enqueue PER_ENQUEUER ids from ``first``, one call each, spread over the groups."""
    try:
        for offset in range(PER_ENQUEUER):
            id_ = first + offset
            invalidate.enqueue(f"obj-{id_ % GROUPS}", [id_], seconds=0.01)
            if offset % 25 == 0:
                time.sleep(0.01)  # let workers and compaction interleave with the enqueues
    except BaseException as exc:  # collected: the test thread asserts on them
        errors.append(exc)
    finally:
        connections.close_all()
        done.set()


def compact_until(stop: threading.Event, merged: list[int], errors: list[BaseException]) -> None:
    try:
        while not stop.is_set():
            result = compact()
            merged.append(result.merged_away)
            if result.skipped and any("raised" in r for r in result.skipped.values()):
                errors.append(AssertionError(f"a pass failed: {result.skipped}"))
    except BaseException as exc:  # collected: the test thread asserts on them
        errors.append(exc)
    finally:
        connections.close_all()


def test_compaction_with_concurrent_enqueues_and_workers_processes_every_id_once() -> None:
    workers = [start_command("runworker", "--threads", "2") for _ in range(2)]
    errors: list[BaseException] = []
    merged: list[int] = []
    stop = threading.Event()
    compactors = [
        threading.Thread(target=compact_until, args=(stop, merged, errors)) for _ in range(2)
    ]
    enqueued = [threading.Event() for _ in range(ENQUEUERS)]
    enqueuers = [
        threading.Thread(target=enqueue_ids, args=(n * PER_ENQUEUER, enqueued[n], errors))
        for n in range(ENQUEUERS)
    ]
    for thread in [*compactors, *enqueuers]:
        thread.start()
    for thread in enqueuers:
        thread.join(timeout=120)
    wait_until(
        lambda: not Entry.objects.exists() and not GroupLock.objects.exists(),
        timeout=120,
        message="the workers to run every entry",
    )
    stop.set()
    for thread in compactors:
        thread.join(timeout=60)
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        code, output = finish(worker, timeout=60)
        assert code == 0, output[-3000:]

    assert not errors, errors
    all_ids = {f"id:{n}" for n in range(ENQUEUERS * PER_ENQUEUER)}
    tokens = list(JobRun.objects.values_list("token", flat=True))
    assert len(tokens) == len(set(tokens)) == len(all_ids), "every id processed, none twice"
    assert set(tokens) == all_ids
    assert not EntryError.objects.exists(), "no run failed (a second run of an id would)"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()

    # The race was there: compaction merged entries while workers ran, and merged entries ran.
    total = QueueTotal.objects.get(queue="default")
    assert total.merged == sum(merged) > 0
    runs: dict[str, set[tuple[float, float, int]]] = defaultdict(set)
    for group, started, finished, pid in JobRun.objects.values_list(
        "group_key", "started_at", "finished_at", "pid"
    ):
        runs[group].add((started, finished, pid))
    assert sum(len(r) for r in runs.values()) < len(all_ids), "some runs processed several ids"
    assert sum(len(r) for r in runs.values()) + total.merged == len(all_ids), (
        "each run is one entry: the entries run plus those merged away are the entries enqueued"
    )
    for group, group_runs in runs.items():
        ordered = sorted(group_runs)
        for before, after in itertools.pairwise(ordered):
            assert after[0] >= before[1], f"two runs of group {group} overlapped: {before} {after}"
