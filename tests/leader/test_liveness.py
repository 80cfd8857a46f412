"""Liveness by construction: claims refuse a dead or silent worker, a late heartbeat beats the
leader declaring its worker dead, and a lock is stamped after the waits of its claim."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from django.db import connection, connections, transaction
from django.db.models import F

from django_iq.models import Entry, GroupLock, Queue, Worker
from tests.conftest import iq_settings_with, wait_until
from tests.factories import EntryFactory, QueueFactory, complete

pytestmark = pytest.mark.django_db(transaction=True)
T = TypeVar("T")


def register(name: str = "host:1") -> Worker:
    return Worker.objects.register(
        name=name, role="worker", host="host", pid=1, queues=[], processing_threads=4
    )


def beat(worker: Worker) -> bool:
    return Worker.objects.heartbeat(
        worker, busy_threads=0, cpu_percent=0, memory_percent=0, is_throttled=False
    )


def make_silent(worker: Worker, seconds: float = 60) -> None:
    """As if the worker's last heartbeat had landed ``seconds`` ago (database time)."""
    Worker.objects.filter(pk=worker.pk).update(
        heartbeat_at=F("heartbeat_at") - timedelta(seconds=seconds)
    )


@pytest.fixture
def pool() -> Iterator[Callable[[Callable[[], T]], Future[T]]]:
    """Run callables in threads, each with its own database connection (closed at the end)."""
    executor = ThreadPoolExecutor(max_workers=4)

    def submit(action: Callable[[], T]) -> Future[T]:
        def run() -> T:
            try:
                return action()
            finally:
                connections.close_all()

        return executor.submit(run)

    yield submit
    executor.shutdown(wait=True)


@contextmanager
def row_held(
    pool: Callable[[Callable[[], Any]], Future[Any]], rows: Any, *, no_key: bool
) -> Iterator[Future[Any]]:
    """Hold one row locked from another connection (``FOR NO KEY UPDATE`` or ``FOR UPDATE``)
    until the block ends, as an operator's or another program's open transaction would."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            assert list(rows.select_for_update(no_key=no_key).values_list("pk"))
            taken.set()
            release.wait(30)

    holder = pool(hold)
    assert taken.wait(10), "the other connection could not lock the row"
    try:
        yield holder
    finally:
        release.set()
        holder.result(10)


def backends_waiting_for_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def database_clock() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("SELECT CLOCK_TIMESTAMP()")
        return cursor.fetchone()[0]


# -- claims refuse a worker that is not live ---------------------------------------------------


@pytest.mark.parametrize("is_capped", [False, None], ids=["single-statement", "general"])
def test_a_worker_declared_dead_claims_nothing(is_capped: bool | None) -> None:
    EntryFactory.create_batch(2)
    worker = register()
    make_silent(worker)
    assert Worker.objects.declare_dead(worker.pk, 30)

    assert Entry.objects.claim(worker, 10, "default", is_capped=is_capped) == []
    assert not GroupLock.objects.exists()
    assert not beat(worker), "its heartbeat tells it to register again"


@pytest.mark.parametrize("is_capped", [False, None], ids=["single-statement", "general"])
def test_a_silent_worker_claims_nothing_until_its_heartbeat_lands(is_capped: bool | None) -> None:
    EntryFactory.create_batch(2)
    worker = register()
    make_silent(worker)

    with iq_settings_with(WORKER_SILENT_AFTER_SECONDS=30):
        assert Entry.objects.claim(worker, 10, "default", is_capped=is_capped) == []
        assert beat(worker)
        claims = Entry.objects.claim(worker, 10, "default", is_capped=is_capped)

    assert len(claims) == 2
    assert set(GroupLock.objects.values_list("worker_id", flat=True)) == {worker.pk}


def test_a_worker_stopped_cleanly_claims_nothing_on_a_capped_queue() -> None:
    QueueFactory(name="capped", max_concurrency=4)
    EntryFactory(queue_id="capped")
    worker = register()
    Worker.objects.stop(worker)

    assert Entry.objects.claim(worker, 10, "capped") == []


def test_declaring_a_silent_worker_dead_keeps_its_locks_for_recovery() -> None:
    EntryFactory()
    worker = register()
    (claim,) = Entry.objects.claim(worker, 10, "default")
    make_silent(worker)

    assert Worker.objects.declare_dead(worker.pk, 30)

    stored = Worker.objects.get(pk=worker.pk)
    assert stored.stopped_at is not None and stored.died
    assert GroupLock.objects.get(pk=claim.lock_id).worker_id == worker.pk
    assert not Worker.objects.declare_dead(worker.pk, 30), "a worker is declared dead once"


def test_a_worker_that_is_not_silent_is_not_declared_dead() -> None:
    worker = register()

    assert not Worker.objects.declare_dead(worker.pk, 30)
    assert Worker.objects.get(pk=worker.pk).stopped_at is None


# -- row locks and timing (PostgreSQL, where another connection can hold a row) ----------------


@pytest.mark.postgresql
def test_a_late_heartbeat_that_lands_first_keeps_its_worker_alive(
    pool: Callable[[Callable[[], Any]], Future[Any]],
) -> None:
    """Another connection holds the worker's row past the silence limit. The heartbeat waits
    for it, and the leader, finding the worker silent, waits behind the heartbeat to declare
    it dead; once the row is free the heartbeat lands and the leader leaves the worker alone."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: the waiters are observed in pg_stat_activity")
    worker = register()
    make_silent(worker)
    assert Worker.objects.silent(30).filter(pk=worker.pk).exists()

    with row_held(pool, Worker.objects.filter(pk=worker.pk), no_key=True):
        heartbeat = pool(lambda: beat(worker))
        wait_until(lambda: backends_waiting_for_locks() >= 1, message="the heartbeat to wait")
        declare = pool(lambda: Worker.objects.declare_dead(worker.pk, 30))
        wait_until(lambda: backends_waiting_for_locks() >= 2, message="the leader to wait")

    assert heartbeat.result(10) is True
    assert declare.result(10) is False, "the leader declared a worker dead whose heartbeat landed"
    assert Worker.objects.get(pk=worker.pk).stopped_at is None


@contextmanager
def claim_waiting_for_its_queue(
    pool: Callable[[Callable[[], Any]], Future[Any]],
) -> Iterator[tuple[Worker, Future[Any]]]:
    """A worker's claim on a capped queue, waiting while another connection holds the queue's
    row; the row is freed when the block ends."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: the waiter is observed in pg_stat_activity")
    QueueFactory(name="capped", max_concurrency=4)
    EntryFactory(queue_id="capped")
    worker = register()
    with row_held(pool, Queue.objects.filter(name="capped"), no_key=False):
        claim = pool(lambda: Entry.objects.claim(worker, 10, "capped"))
        wait_until(lambda: backends_waiting_for_locks() >= 1, message="the claim to wait")
        yield worker, claim


@pytest.mark.postgresql
def test_a_claim_that_waited_for_its_capped_queue_is_stamped_after_the_wait(
    pool: Callable[[Callable[[], Any]], Future[Any]],
) -> None:
    """Recovery compares a lock's age with the worker's reports: a lock stamped before a long
    wait for the queue row would look forgotten at once."""
    with claim_waiting_for_its_queue(pool) as (_, claim):
        released_at = database_clock()

    (claimed,) = claim.result(10)
    assert GroupLock.objects.get(pk=claimed.lock_id).locked_at >= released_at


@pytest.mark.postgresql
def test_a_claim_still_waiting_when_its_worker_is_declared_dead_claims_nothing(
    pool: Callable[[Callable[[], Any]], Future[Any]],
) -> None:
    """A claim that was slow (here: waiting for its capped queue's row) while its worker went
    silent and was declared dead must not commit a lock under the dead row."""
    with claim_waiting_for_its_queue(pool) as (worker, claim):
        make_silent(worker)
        assert Worker.objects.declare_dead(worker.pk, 30)

    assert claim.result(10) == []
    assert not GroupLock.objects.exists()


@pytest.mark.parametrize("outcome", ["failed with a retry", "succeeded"])
def test_recovery_charges_no_entry_of_a_group_claim_whose_outcome_was_written(
    outcome: str,
) -> None:
    from django.utils import timezone

    from django_iq.duties import RecoveryDuty
    from django_iq.leader import Leader
    from django_iq.models import EntryError

    first = EntryFactory(group_key="g", lock_key="g:g")
    second = EntryFactory(group_key="g", lock_key="g:g")
    worker = register()
    (claim,) = Entry.objects.claim(worker, 10, "default")
    assert [e.pk for e in claim.entries] == [first.pk, second.pk]
    # The worker ran the first entry of the claim and wrote its outcome (not the claim's last:
    # the lock stays), then died before it moved on to the second.
    if outcome == "succeeded":
        complete(claim.entries[0], None)
    else:
        Entry.objects.fail(
            claim.entries[0],
            None,
            exception_class="builtins.ValueError",
            message="first",
            traceback="",
            retry_at=timezone.now() + timedelta(hours=1),
            worker_name=worker.name,
        )
    make_silent(worker)

    Leader(name="leader", duties=[RecoveryDuty()], lease_seconds=30).run_once(timezone.now())

    assert not GroupLock.objects.exists()
    assert EntryError.objects.filter(exception_class__endswith="WorkerLost").count() == 0
    assert Entry.objects.get(pk=second.pk).attempts == 0
    if outcome != "succeeded":
        retried = Entry.objects.get(pk=first.pk)
        assert (retried.attempts, retried.state) == (1, "initial"), "charged once, not twice"
        assert EntryError.objects.filter(entry_id=first.pk).count() == 1
