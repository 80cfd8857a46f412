"""Bulk writes racing each other on real connections: a worker acknowledging many entries at
once while an operator cancels, disables or requeues the same rows. None may deadlock out to
the caller: the managers lock rows in one order and retry a deadlock victim themselves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

import pytest
from django.db import connection, connections, transaction

from django_iq import enqueue_many
from django_iq.managers import Success
from django_iq.models import Entry, EntryError, GroupLock, Worker
from tests.conftest import wait_until
from tests.factories import WorkerFactory
from tests.testapp.jobs import always_fails, record

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "sqlite", reason="SQLite serializes writers: no row locks"
    ),
]

ENTRIES = 500
ROUNDS = 6


def claimed(
    worker: Worker, job_calls: list[tuple[tuple[object, ...], dict[str, object]]]
) -> list[Success]:
    entries = enqueue_many(record, job_calls)
    # Rows updated since they were written (a retry, a priority change) no longer lie in id
    # order: a scan in storage order then meets them in another order than a lookup by ids.
    moved = [entry.pk for entry in entries[::3]]
    Entry.objects.filter(pk__in=moved).update(priority=1)
    claims = Entry.objects.claim(worker, len(job_calls), "default")
    return [Success(entry, claim.lock_id) for claim in claims for entry in claim.entries]


def race(*actions: Callable[[], object]) -> list[BaseException]:
    """Run ``actions`` at once, each on its own connection; return what they raised."""
    barrier = threading.Barrier(len(actions))
    raised: list[BaseException] = []

    def run(action: Callable[[], object]) -> None:
        try:
            barrier.wait(10)
            action()
        except BaseException as exc:
            raised.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return raised


@pytest.mark.parametrize("operation", ["cancel", "disable", "run_now"])
def test_complete_many_never_deadlocks_with_a_bulk_operation(operation: str) -> None:
    worker = WorkerFactory()
    for round_number in range(ROUNDS):
        calls = [((f"r{round_number}-{i}",), {}) for i in range(ENTRIES)]
        done = claimed(worker, calls)
        ids = [success.entry.pk for success in done]
        # Descending, as an admin page sorted newest first would send them.
        operations: dict[str, Callable[[], object]] = {
            "cancel": partial(Entry.objects.cancel, list(reversed(ids))),
            "disable": partial(Entry.objects.disable, record.name),
            "run_now": partial(Entry.objects.run_now, list(reversed(ids))),
        }
        raised = race(
            partial(Entry.objects.complete_many, done[::2]),
            operations[operation],
            partial(Entry.objects.complete_many, done[1::2]),
        )
        assert raised == [], f"round {round_number}: {raised!r}"
        assert not GroupLock.objects.exists()
        Entry.objects.enable(record.name)
        Entry.objects.all().delete()


def test_failures_and_requeues_never_deadlock() -> None:
    worker = WorkerFactory()
    for round_number in range(ROUNDS):
        enqueue_many(always_fails, [((f"f{round_number}-{i}",), {}) for i in range(ENTRIES)])
        claims = Entry.objects.claim(worker, ENTRIES, "default")
        done = [(entry, claim.lock_id) for claim in claims for entry in claim.entries]

        def fail_all(part: list) -> None:
            for entry, lock_id in part:
                Entry.objects.fail(
                    entry,
                    lock_id,
                    exception_class="builtins.ValueError",
                    message="no",
                    traceback="",
                    retry_at=None,
                    worker_name=worker.name,
                )

        fail_all(done[: ENTRIES // 2])
        first_half = list(EntryError.objects.order_by("-pk"))
        raised = race(
            partial(fail_all, done[ENTRIES // 2 :]),
            partial(EntryError.objects.requeue, first_half),
            partial(Entry.objects.disable, always_fails.name),
        )
        assert raised == [], f"round {round_number}: {raised!r}"
        Entry.objects.enable(always_fails.name)
        Entry.objects.all().delete()
        EntryError.objects.all().delete()


def waiting_on_a_lock() -> bool:
    """Whether another session of this database waits for a row lock now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        (count,) = cursor.fetchone()
    return bool(count)


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="only PostgreSQL says which side of a deadlock is the victim (the first to wait)",
)
def test_a_deadlock_victim_inside_a_manager_is_run_again_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = enqueue_many(record, [(("first",), {}), (("second",), {})])
    holding, go_on = threading.Event(), threading.Event()
    other_raised: list[BaseException] = []

    def other_transaction() -> None:
        """Lock the rows in the opposite order to the managers: the second, then the first.
        The manager waits first, so PostgreSQL's deadlock check fires in its session: it is
        the victim."""
        try:
            with transaction.atomic():
                list(Entry.objects.filter(pk=second.pk).select_for_update())
                holding.set()
                go_on.wait(30)
                list(Entry.objects.filter(pk=first.pk).select_for_update())
        except BaseException as exc:
            other_raised.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_transaction)
    thread.start()
    assert holding.wait(10)
    disabled: list[int] = []

    def disable() -> None:
        try:
            disabled.append(Entry.objects.disable(record.name))
        finally:
            connections.close_all()

    manager = threading.Thread(target=disable)
    with caplog.at_level(logging.INFO, logger="django_iq"):
        manager.start()
        wait_until(waiting_on_a_lock, timeout=10, message="the manager to wait for the row")
        go_on.set()
        thread.join(60)
        manager.join(60)

    assert other_raised == []
    assert disabled == [2], "the manager's transaction was run again and disabled both entries"
    assert any("lock conflict in disable" in r.getMessage() for r in caplog.records)
    assert set(Entry.objects.filter(job_name=record.name).values_list("state", flat=True)) == {
        "disabled"
    }
