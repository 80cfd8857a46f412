"""Batched acknowledgements: complete_many, the AckWriter, and a worker that writes through it."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError

from django_iq import signals
from django_iq.acks import Ack, AckWriter
from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock, Worker
from django_iq.processing import Processor
from django_iq.worker import WorkerProcess
from tests.factories import EntryFactory, WorkerFactory
from tests.testapp.jobs import record
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def claim_all(worker: Worker, queue: str = "default") -> list[Claim]:
    return Entry.objects.claim(worker, 100, queue)


def test_complete_many_deletes_the_entries_and_locks_and_reports_lost_locks() -> None:
    EntryFactory.create_batch(3)
    claims = claim_all(WorkerFactory())
    assert len(claims) == 3
    GroupLock.objects.release([claims[2].lock_id])  # recovery got there first

    lost = Entry.objects.complete_many([(c.entries[0], c.lock_id) for c in claims])

    assert lost == {claims[2].lock_id}
    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()


def test_complete_many_refuses_entries_with_bookkeeping_of_their_own() -> None:
    entry = EntryFactory(result_id="r" * 32)

    with pytest.raises(ValueError, match="Tasks result or cron job"):
        Entry.objects.complete_many([(entry, None)])
    assert Entry.objects.filter(pk=entry.pk).exists()


def test_the_writer_writes_a_batch_and_calls_back_after_the_commit() -> None:
    EntryFactory.create_batch(5)
    claims = claim_all(WorkerFactory())
    seen: list[tuple[int, bool, bool]] = []

    def callback(entry: Entry) -> Any:
        def written(ok: bool) -> None:
            seen.append((entry.pk, ok, Entry.objects.filter(pk=entry.pk).exists()))

        return written

    writer = AckWriter(batch_size=2)
    for claim in claims:
        writer.put(Ack(claim.entries[0], claim.lock_id, callback(claim.entries[0])))
    writer.start()
    writer.close()

    assert sorted(seen) == sorted((c.entries[0].pk, True, False) for c in claims)
    assert writer.written == 5 and writer.pending() == 0
    assert not GroupLock.objects.exists()


def test_at_shutdown_the_writer_gives_up_on_an_unreachable_database_and_says_so() -> None:
    EntryFactory()
    (claim,) = claim_all(WorkerFactory())
    outcomes: list[bool] = []
    writer = AckWriter()
    writer.put(Ack(claim.entries[0], claim.lock_id, outcomes.append))
    with (
        mock.patch.object(
            type(Entry.objects), "complete_many", side_effect=OperationalError("down")
        ),
        mock.patch("django_iq.dbconn.time.sleep"),
    ):
        writer.start()
        writer.close()

    assert outcomes == [False]
    assert Entry.objects.filter(pk=claim.entries[0].pk).exists(), "left for recovery to rerun"
    assert GroupLock.objects.filter(pk=claim.lock_id).exists()


def test_a_deferred_success_keeps_the_claim_held_until_it_is_written() -> None:
    EntryFactory(job_name=record.name, args=["deferred"])
    (claim,) = claim_all(WorkerFactory())
    released: list[Claim] = []
    finished = threading.Event()
    signals.entry_finished.connect(lambda **kwargs: finished.set(), weak=False, dispatch_uid="t")
    try:
        writer = AckWriter()
        processor = Processor("test:1", acks=writer, on_released=released.append)

        result = processor.run_claim(claim, lambda: False)

        assert result.done == 1
        assert JobRun.objects.filter(token="deferred").exists(), "the job ran"
        assert released == [] and not finished.is_set(), "not written yet"
        assert GroupLock.objects.filter(pk=claim.lock_id).exists(), "still locked meanwhile"
        writer.start()
        writer.close()
        assert released == [claim] and finished.is_set()
        assert not Entry.objects.exists() and not GroupLock.objects.exists()
    finally:
        signals.entry_finished.disconnect(dispatch_uid="t")


def test_group_claims_and_tasks_results_are_written_at_once() -> None:
    EntryFactory.create_batch(2, job_name=record.name, args=["g"], group_key="g")
    (claim,) = claim_all(WorkerFactory())
    released: list[Claim] = []
    writer = AckWriter()  # never started: anything left to it would stay unwritten
    processor = Processor("test:1", acks=writer, on_released=released.append)

    with mock.patch("tests.testapp.jobs.JobRun.objects.create"):
        result = processor.run_claim(claim, lambda: False)

    assert result.done == 2 and writer.pending() == 0
    assert released == [claim]
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_a_worker_writes_every_success_before_it_exits() -> None:
    record.enqueue_many([((f"w{i}",), {}) for i in range(200)])

    worker = WorkerProcess(burst=True, processing_threads=4)
    assert worker.run(install_signal_handlers=False) == 0

    assert JobRun.objects.count() == 200 and worker.processed == 200
    assert worker.acks.written == 200, "every success went through the batch writer"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    assert Worker.objects.get(name=worker.name).stopped_at is not None


def test_a_batch_the_database_refuses_is_written_one_by_one() -> None:
    EntryFactory.create_batch(3)
    claims = claim_all(WorkerFactory())
    outcomes: list[bool] = []
    writer = AckWriter()
    for claim in claims:
        writer.put(Ack(claim.entries[0], claim.lock_id, outcomes.append))
    with mock.patch.object(
        type(Entry.objects), "complete_many", side_effect=ValueError("a bad row")
    ):
        writer.start()
        writer.close()

    assert outcomes == [True, True, True] and writer.written == 3
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
