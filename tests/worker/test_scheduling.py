"""scheduling.py: one scheduling pass (``Scheduler.run_once``) and the ``ClaimGate``."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq.governor import ResourceGovernor
from django_iq.managers import Claim
from django_iq.models import DisabledJob, Entry, GroupLock, Queue
from django_iq.scheduling import ClaimGate, QueuePicker, Scheduler
from tests.factories import EntryFactory, QueueFactory, WorkerFactory
from tests.worker.test_governor import StubReader

pytestmark = pytest.mark.django_db


def scheduler(
    *,
    idle: int = 4,
    cpu: float = 10.0,
    queues: list[str] | None = None,
    batch_size: int | None = None,
) -> tuple[Scheduler, list[Claim]]:
    handed: list[Claim] = []
    governor = ResourceGovernor(
        StubReader(cpu=cpu, memory=10.0),
        cpu_throttle_percent=90,
        cpu_resume_percent=70,
        memory_throttle_percent=90,
        memory_resume_percent=70,
    )
    sched = Scheduler(
        worker=WorkerFactory(),
        queues=queues,
        governor=governor,
        picker=QueuePicker(),
        idle_threads=lambda: idle,
        hand_over=handed.append,
        batch_size=batch_size,
    )
    return sched, handed


def test_a_pass_claims_up_to_the_idle_threads_and_hands_each_claim_over() -> None:
    entries = EntryFactory.create_batch(5)
    sched, handed = scheduler(idle=3)

    result = sched.run_once()

    assert (result.claimed, result.sleep_seconds, result.is_idle) == (3, 0.0, False)
    assert [c.entries[0].pk for c in handed] == [e.pk for e in entries[:3]]
    assert set(GroupLock.objects.values_list("worker_id", flat=True)) == {sched.worker.pk}


def test_a_pass_takes_no_more_than_the_batch_size() -> None:
    EntryFactory.create_batch(5)
    sched, handed = scheduler(idle=4, batch_size=2)

    assert sched.run_once().claimed == 2
    assert len(handed) == 2


def test_a_throttled_governor_claims_nothing_and_waits_a_poll_interval() -> None:
    EntryFactory.create_batch(2)
    sched, handed = scheduler(cpu=95.0)

    result = sched.run_once()

    assert (result.claimed, result.is_idle) == (0, False)
    assert result.sleep_seconds > 0
    assert handed == []
    assert Entry.objects.awaiting_compute().count() == 2


def test_no_idle_thread_claims_nothing() -> None:
    EntryFactory()
    sched, handed = scheduler(idle=0)

    assert sched.run_once().claimed == 0
    assert handed == []


def test_an_empty_pass_is_idle_only_when_nothing_claimable_is_left() -> None:
    QueueFactory(name="default")
    sched, _ = scheduler()
    assert sched.run_once().is_idle is True

    # A retry due within the burst horizon keeps a burst worker waiting for it.
    EntryFactory(deferred=True, attempts=1, run_at=timezone.now() + timedelta(seconds=30))
    sched, _ = scheduler()
    result = sched.run_once()
    assert (result.claimed, result.is_idle) == (0, False)


def test_a_pass_promotes_due_deferred_entries_then_claims_them() -> None:
    entry = EntryFactory(deferred=True, run_at=timezone.now() - timedelta(seconds=1))
    sched, handed = scheduler()

    assert sched.run_once().claimed == 1
    assert handed[0].entries[0].pk == entry.pk


def test_paused_queues_and_unserved_queues_are_not_claimed_from() -> None:
    EntryFactory(queue=QueueFactory(name="paused"))
    EntryFactory(queue=QueueFactory(name="other"))
    Queue.objects.filter(name="paused").update(is_paused=True)
    sched, handed = scheduler(queues=["paused", "served"])
    QueueFactory(name="served")

    assert sched.run_once().claimed == 0
    assert handed == []


def test_entries_of_a_disabled_job_are_neither_claimed_nor_counted_as_work() -> None:
    entry = EntryFactory()
    DisabledJob.objects.create(job_name=entry.job_name)
    sched, handed = scheduler()

    result = sched.run_once()

    assert (result.claimed, result.is_idle) == (0, True)
    assert handed == []


def test_a_pass_serves_every_queue_when_the_first_runs_dry() -> None:
    a = EntryFactory(queue=QueueFactory(name="a"))
    b = EntryFactory(queue=QueueFactory(name="b"))
    sched, handed = scheduler(idle=4)

    assert sched.run_once().claimed == 2
    assert {c.entries[0].pk for c in handed} == {a.pk, b.pk}


def test_claim_gate_lets_passes_run_side_by_side() -> None:
    gate = ClaimGate()
    with gate.scheduling_pass(), gate.scheduling_pass():
        pass  # two passes at once: neither waits for the other


def test_claim_gate_closing_waits_for_running_passes_and_holds_new_ones_back() -> None:
    gate = ClaimGate()
    events: list[str] = []
    in_pass = threading.Event()
    release_pass = threading.Event()
    closed = threading.Event()

    def long_pass() -> None:
        with gate.scheduling_pass():
            in_pass.set()
            release_pass.wait(5)
            events.append("first pass ends")

    def change_identity() -> None:
        with gate.closed():
            events.append("gate closed")
            closed.set()
            time.sleep(0.2)  # a new pass started now must wait for this to end
            events.append("gate opens")

    def late_pass() -> None:
        closed.wait(5)
        with gate.scheduling_pass():
            events.append("late pass runs")

    first = threading.Thread(target=long_pass)
    first.start()
    assert in_pass.wait(5)
    closer = threading.Thread(target=change_identity)
    late = threading.Thread(target=late_pass)
    closer.start()
    late.start()
    # A check that nothing happens: there is no condition to poll for, so give the two threads
    # a moment in which they would have run if the gate did not hold them.
    time.sleep(0.1)
    assert events == []  # the gate waits for the pass under way
    release_pass.set()
    for thread in (first, closer, late):
        thread.join(5)

    assert events == ["first pass ends", "gate closed", "gate opens", "late pass runs"]
