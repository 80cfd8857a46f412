"""Queues through their manager: counts per state, pause and resume."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from django_iq.exceptions import QueueNotFound
from django_iq.models import GroupLock, Queue
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    QueueFactory,
)

pytestmark = pytest.mark.django_db


# -- queues -----------------------------------------------------------------------------------


def test_stats_count_every_state_per_queue() -> None:
    default = QueueFactory(name="default")
    EntryFactory(deferred=True)
    EntryFactory.create_batch(2)  # awaiting compute
    running = EntryFactory(group_key="busy", locked=True)
    EntryFactory(group_key="busy")  # waits behind its group's lock: computing
    EntryFactory(disabled=True)
    EntryErrorFactory.create_batch(2, queue=default)  # failed
    EntryErrorFactory(queue=default, requeued_at=timezone.now())
    EntryErrorFactory(queue=default, is_final=False)
    QueueFactory(name="reports", is_paused=True)

    stats = {s.queue: s for s in Queue.objects.stats()}

    assert sorted(stats) == ["default", "reports"]
    counts = stats["default"]
    assert (counts.initial, counts.pending, counts.disabled) == (1, 4, 1)
    assert (counts.computing, counts.awaiting_compute, counts.failed) == (2, 2, 2)
    assert counts.invariant_holds and not counts.is_paused
    empty = stats["reports"]
    assert empty.is_paused
    assert (empty.initial, empty.pending, empty.computing, empty.failed) == (0, 0, 0, 0)
    assert GroupLock.objects.get().key == running.lock_key


def test_stats_can_be_limited_to_some_queues() -> None:
    EntryFactory(queue=QueueFactory(name="emails"))
    EntryFactory()

    stats = Queue.objects.stats(["emails"])

    assert [(s.queue, s.pending) for s in stats] == [("emails", 1)]


def test_stats_in_a_fixed_number_of_queries(django_assert_num_queries: Any) -> None:
    EntryFactory.create_batch(3)
    EntryFactory(queue=QueueFactory(name="emails"))

    # Stored states, pending entries by their lock, locks by their entries, failures, queues.
    with django_assert_num_queries(5):
        assert len(Queue.objects.stats()) == 2


def test_pause_and_resume_report_whether_anything_changed() -> None:
    QueueFactory(name="default")

    assert Queue.objects.pause("default") == 1
    assert Queue.objects.pause("default") == 0
    assert Queue.objects.get(name="default").is_paused
    assert Queue.objects.resume("default") == 1
    assert Queue.objects.resume("default") == 0
    assert not Queue.objects.get(name="default").is_paused


def test_pausing_an_unknown_queue_raises_queue_not_found() -> None:
    with pytest.raises(QueueNotFound, match=r"^Queue 'nope' does not exist\.$"):
        Queue.objects.pause("nope")
