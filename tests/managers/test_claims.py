"""Claims against the real database: priority then FIFO, group locks, paused and capped queues,
and the fixed number of queries a claim costs."""

from __future__ import annotations

from typing import Any

import pytest

from django_iq.models import Entry, GroupLock, Queue
from tests.factories import (
    EntryFactory,
    QueueFactory,
    WorkerFactory,
    complete,
)
from tests.managers.conftest import claim_one, claimed_ids
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db


# -- claim ------------------------------------------------------------------------------------


def test_claim_takes_the_highest_priority_first_then_the_oldest() -> None:
    low_1 = EntryFactory(priority=0)
    high_1 = EntryFactory(priority=50)
    low_2 = EntryFactory(priority=0)
    lowest = EntryFactory(priority=-100)
    high_2 = EntryFactory(priority=50)

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    assert claimed_ids(claims) == [high_1.pk, high_2.pk, low_1.pk, low_2.pk, lowest.pk]
    assert all(len(claim.entries) == 1 for claim in claims)


def test_claim_takes_at_most_limit_entries_in_claim_order() -> None:
    EntryFactory(priority=1)
    top = EntryFactory(priority=9)
    second = EntryFactory(priority=5)

    claims = Entry.objects.claim(WorkerFactory(), 2, "default")

    assert claimed_ids(claims) == [top.pk, second.pk]
    assert Entry.objects.awaiting_compute().count() == 1


def test_claim_creates_one_group_lock_per_lock_key_held_by_the_worker() -> None:
    worker = WorkerFactory()
    first_a = EntryFactory(group_key="a")
    EntryFactory(group_key="b")
    EntryFactory(group_key="a")
    alone = EntryFactory()

    claims = Entry.objects.claim(worker, 10, "default")

    locks = {lock.key: lock for lock in GroupLock.objects.all()}
    assert set(locks) == {"g:a", "g:b", alone.lock_key}
    assert {claim.lock_key: claim.lock_id for claim in claims} == {
        key: lock.pk for key, lock in locks.items()
    }
    assert {lock.worker_id for lock in locks.values()} == {worker.pk}
    assert {lock.queue_id for lock in locks.values()} == {"default"}
    assert locks["g:a"].entry_id == first_a.pk, "the lock names the first entry of its claim"


def test_entries_sharing_a_group_key_come_in_one_claim_in_claim_order() -> None:
    first = EntryFactory(group_key="acct-1")
    other = EntryFactory(group_key="acct-2")
    urgent = EntryFactory(group_key="acct-1", priority=10)
    last = EntryFactory(group_key="acct-1")

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    by_key = {claim.lock_key: [e.pk for e in claim.entries] for claim in claims}
    assert by_key == {"g:acct-1": [urgent.pk, first.pk, last.pk], "g:acct-2": [other.pk]}


def test_a_locked_group_is_not_claimed_again() -> None:
    EntryFactory(group_key="acct-1")
    Entry.objects.claim(WorkerFactory(), 10, "default")
    later = record.using(group_key="acct-1").enqueue("later")

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []
    assert list(Entry.objects.computing().filter(pk=later.pk)) == [later]


def test_claim_skips_entries_locked_by_another_worker() -> None:
    EntryFactory(locked=True)
    free = EntryFactory()

    claims = Entry.objects.claim(WorkerFactory(), 10, "default")

    assert claimed_ids(claims) == [free.pk]
    assert GroupLock.objects.count() == 2


def test_claim_without_a_worker_records_no_owner() -> None:
    EntryFactory()

    claim = claim_one()

    assert GroupLock.objects.get(pk=claim.lock_id).worker_id is None


def test_deferred_entries_are_not_claimed_until_promoted() -> None:
    deferred = EntryFactory(deferred=True)

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []
    Entry.objects.run_now([deferred.pk])
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [deferred.pk]


def test_claim_only_takes_entries_of_the_queue_asked_for() -> None:
    EntryFactory(queue=QueueFactory(name="emails"))
    mine = EntryFactory()

    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [mine.pk]


def test_a_paused_queue_yields_nothing_until_resumed() -> None:
    entry = EntryFactory()
    Queue.objects.pause("default")

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []

    Queue.objects.resume("default")
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [entry.pk]


def test_claiming_from_a_queue_that_does_not_exist_yields_nothing() -> None:
    assert Entry.objects.claim(WorkerFactory(), 10, "no-such-queue") == []


def test_max_concurrency_caps_the_claims_running_at_once_in_a_queue() -> None:
    capped = QueueFactory(name="capped", max_concurrency=2)
    EntryFactory.create_batch(5, queue=capped)
    worker = WorkerFactory()

    first = Entry.objects.claim(worker, 10, "capped")
    assert len(first) == 2
    assert Entry.objects.claim(worker, 10, "capped") == [], "the cap is reached"

    done = first[0]
    complete(done.entries[0], done.lock_id)
    assert len(Entry.objects.claim(worker, 10, "capped")) == 1


# -- the claim's query count: the hot path of every scheduling pass --------------------------


def test_claim_costs_a_fixed_number_of_queries(django_assert_num_queries: Any) -> None:
    EntryFactory.create_batch(3, group_key="g")
    EntryFactory.create_batch(3)
    worker = WorkerFactory()

    # savepoint, queue row, the worker's row (a shared lock, only if the worker is live),
    # candidates (FOR UPDATE SKIP LOCKED), lock insert, release savepoint
    with django_assert_num_queries(6):
        claims = Entry.objects.claim(worker, 10, "default")

    assert len(claims) == 4


def test_claim_of_an_empty_queue_stops_after_the_candidate_query(
    django_assert_num_queries: Any,
) -> None:
    QueueFactory(name="default")
    worker = WorkerFactory()

    with django_assert_num_queries(5):
        assert Entry.objects.claim(worker, 10, "default") == []
