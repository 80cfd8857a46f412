"""Queue statistics count each state on its own from stored rows, in one snapshot: green on
healthy data, red on corrupted data (an entry locked by a worker that is not live, a lock whose
entry is gone), on every database."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_iq.managers import QueueStats
from django_iq.models import Entry, GroupLock, Queue, Worker
from django_iq.queries import snapshot_reads
from django_iq.states import COUNTED_STATES, EntryState
from tests.factories import EntryFactory, GroupLockFactory, QueueFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def default_stats() -> QueueStats:
    (stats,) = Queue.objects.stats(["default"])
    return stats


def test_healthy_rows_count_every_state_and_the_invariant_holds() -> None:
    live = WorkerFactory()
    EntryFactory.create_batch(2)
    EntryFactory(locked=True, lock__worker=live)
    EntryFactory(deferred=True)
    EntryFactory(disabled=True)

    stats = default_stats()

    assert {state: stats.count(state) for state in COUNTED_STATES} == {
        "initial": 1,
        "pending": 3,
        "disabled": 1,
        "blocked": 0,
        "computing": 1,
        "running": 0,
        "awaiting_compute": 2,
        "failed": 0,
    }
    assert (stats.locked_by_dead_workers, stats.locks_without_entries) == (0, 0)
    assert stats.invariant_holds and stats.is_consistent
    assert stats.broken_counts == {}


def test_every_stored_state_is_counted_without_naming_it() -> None:
    EntryFactory()

    stats = default_stats()

    assert sorted(stats.stored) == sorted(EntryState.values)
    assert [stats.count(state) for state in EntryState.values] == [
        stats.stored[state] for state in EntryState.values
    ]


def test_an_entry_locked_by_a_stopped_worker_breaks_the_invariant() -> None:
    stopped = WorkerFactory()
    Worker.objects.stop(stopped)
    EntryFactory(locked=True, lock__worker=stopped)
    EntryFactory()

    stats = default_stats()

    assert (stats.pending, stats.computing, stats.awaiting_compute) == (2, 0, 1)
    assert stats.locked_by_dead_workers == 1
    assert not stats.invariant_holds and not stats.is_consistent
    assert stats.broken_counts == {"locked_by_dead_workers": 1}


def test_an_entry_locked_by_a_silent_worker_breaks_the_invariant() -> None:
    silent = WorkerFactory(heartbeat_at=timezone.now() - timedelta(hours=1))
    EntryFactory(locked=True, lock__worker=silent)

    stats = default_stats()

    assert (stats.pending, stats.computing, stats.locked_by_dead_workers) == (1, 0, 1)
    assert not stats.invariant_holds


def test_an_entry_locked_by_a_lock_without_a_worker_breaks_the_invariant() -> None:
    EntryFactory(locked=True, lock__worker=None)

    stats = default_stats()

    assert (stats.pending, stats.computing, stats.locked_by_dead_workers) == (1, 0, 1)
    assert not stats.invariant_holds


def test_a_lock_whose_entry_was_deleted_is_counted_without_an_entry() -> None:
    entry = EntryFactory(locked=True)
    Entry.objects.filter(pk=entry.pk).delete()
    GroupLockFactory(queue=QueueFactory(name="emails"))  # a lock of another queue, no entry

    stats = default_stats()

    assert stats.locks_without_entries == 1
    assert stats.invariant_holds, "no pending entry is miscounted: only the lock is left"
    assert not stats.is_consistent
    assert stats.broken_counts == {"locks_without_entries": 1}
    assert GroupLock.objects.count() == 2


def test_a_group_lock_covers_its_waiting_siblings_and_the_lock_is_not_an_orphan() -> None:
    EntryFactory(group_key="busy", locked=True)
    EntryFactory(group_key="busy")
    # Disabling a job leaves its running entry disabled under its lock: not corruption.
    running = EntryFactory(locked=True)
    Entry.objects.filter(pk=running.pk).update(state=EntryState.DISABLED)

    stats = default_stats()

    assert (stats.computing, stats.locks_without_entries, stats.live_locks) == (2, 0, 2)
    assert stats.is_consistent


@pytest.mark.django_db(transaction=True)
def test_reads_in_a_snapshot_do_not_see_what_commits_meanwhile() -> None:
    queue = QueueFactory(name="default")
    EntryFactory(queue=queue)

    def commit_another() -> None:
        try:
            EntryFactory(queue=queue)
        finally:
            connections.close_all()

    with snapshot_reads(connection.alias):
        before = Entry.objects.count()
        writer = threading.Thread(target=commit_another)
        writer.start()
        writer.join(timeout=30)
        assert not writer.is_alive(), "the write waited on the snapshot: it must not block"
        during = Entry.objects.count()

    assert (before, during) == (1, 1), "a read in the snapshot saw a later commit"
    assert Entry.objects.count() == 2, "the other transaction committed"


@pytest.mark.django_db(transaction=True)
def test_stats_read_in_one_snapshot_that_opens_and_closes(django_assert_num_queries: Any) -> None:
    EntryFactory()
    opening = {"postgresql": 1, "mysql": 2, "sqlite": 1}[connection.vendor]

    # The five reads, the statements opening the snapshot, and COMMIT.
    with django_assert_num_queries(5 + opening + 1) as captured:
        Queue.objects.stats()

    sql = [query["sql"].upper() for query in captured.captured_queries]
    assert sql[opening - 1].startswith(("START TRANSACTION", "BEGIN"))
    assert sql[-1] == "COMMIT"
    assert connection.get_autocommit() and not connection.in_atomic_block
