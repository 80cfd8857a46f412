"""Batched acknowledgements: complete_many, the AckWriter, and a worker that writes through it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connections
from django.utils import timezone

from django_iq import signals
from django_iq.acks import Ack, AckWriter
from django_iq.managers import Claim, Success
from django_iq.models import CronJob, Entry, EntryError, GroupLock, RunOutcome, Worker
from django_iq.processing import Processor
from django_iq.worker import WorkerProcess
from tests.factories import CronJobFactory, EntryFactory, WorkerFactory
from tests.testapp.jobs import always_fails, record
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def claim_all(worker: Worker, queue: str = "default") -> list[Claim]:
    return Entry.objects.claim(worker, 100, queue)


def test_complete_many_deletes_the_entries_and_locks_and_reports_lost_locks() -> None:
    EntryFactory.create_batch(3)
    claims = claim_all(WorkerFactory())
    assert len(claims) == 3
    GroupLock.objects.release([claims[2].lock_id])  # recovery got there first

    lost = Entry.objects.complete_many([Success(c.entries[0], c.lock_id) for c in claims])

    assert lost == {claims[2].lock_id}
    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()


def test_complete_many_records_outcomes_cron_runs_and_group_progress_together() -> None:
    cron_job = CronJobFactory(job_name=record.name)
    task_entry = EntryFactory(result_id="r" * 32, args=["task"])
    cron_entry = CronJob.objects.schedule_next(cron_job, timezone.now(), max_attempts=3)
    assert cron_entry is not None
    Entry.objects.filter(pk=cron_entry.pk).update(run_at=timezone.now(), state="pending")
    EntryFactory.create_batch(2, group_key="g")
    claims = claim_all(WorkerFactory())
    by_kind = {
        ("result" if c.entries[0].result_id else "cron" if c.entries[0].cron_job_id else "g"): c
        for c in claims
    }
    group = by_kind["g"]
    assert len(group.entries) == 2
    finished = timezone.now() - timedelta(seconds=5)

    lost = Entry.objects.complete_many(
        [
            Success(by_kind["result"].entries[0], by_kind["result"].lock_id, {"sum": 3}, finished),
            Success(by_kind["cron"].entries[0], by_kind["cron"].lock_id, None, finished),
            # A group claim going on: its first entry done, its lock kept for the second.
            Success(group.entries[0], None),
        ]
    )

    assert lost == set()
    outcome = RunOutcome.objects.get(result_id="r" * 32)
    assert (outcome.entry_id, outcome.status, outcome.return_value, outcome.finished_at) == (
        task_entry.pk,
        "succeeded",
        {"sum": 3},
        finished,
    )
    assert RunOutcome.objects.count() == 3, "one record per success, the group's first too"
    cron_job.refresh_from_db()
    assert cron_job.last_run_at == finished
    (successor,) = Entry.objects.filter(cron_job_id=cron_job.pk)
    assert successor.pk != cron_entry.pk and successor.state == "initial"
    lock = GroupLock.objects.get(pk=group.lock_id)
    assert lock.entry_id is None, "the lock no longer points at a finished entry"
    assert list(Entry.objects.filter(group_key="g").values_list("pk", flat=True)) == [
        group.entries[1].pk
    ]


def test_the_writer_writes_a_batch_then_settles_each_claim_once() -> None:
    EntryFactory.create_batch(5)
    claims = claim_all(WorkerFactory())
    settled: list[tuple[int, bool]] = []

    def on_settled(claim: Claim) -> None:
        pk = claim.entries[0].pk
        settled.append((pk, Entry.objects.filter(pk=pk).exists()))

    writer = AckWriter("test:1", on_settled=on_settled, batch_size=2)
    acks = [Ack(c.entries[0], c.lock_id, claim=c) for c in claims]
    for ack in acks:
        writer.put(ack)
    writer.start()
    writer.close()

    assert sorted(settled) == sorted((c.entries[0].pk, False) for c in claims)
    assert all(ack.done.is_set() for ack in acks)
    assert writer.written == 5 and writer.pending() == 0
    assert not GroupLock.objects.exists()


def test_complete_many_writes_successes_and_their_records_in_one_statement(
    django_assert_max_num_queries: Any,
) -> None:
    EntryFactory.create_batch(3, job_name=record.name, result_id=None)
    claims = claim_all(WorkerFactory())
    finished = timezone.now()
    done = [
        Success(c.entries[0], c.lock_id, [i], finished, worker_name="host:7", duration_seconds=2)
        for i, c in enumerate(claims)
    ]

    expected = 1 if connections["default"].vendor == "postgresql" else 20
    with django_assert_max_num_queries(expected):
        assert Entry.objects.complete_many(done) == set()

    rows = RunOutcome.objects.order_by("entry_id")
    assert [(row.entry_id, row.return_value) for row in rows] == [
        (c.entries[0].pk, [i]) for i, c in enumerate(claims)
    ]
    for row in rows:
        assert (row.worker_name, row.duration_seconds, row.attempt) == ("host:7", 2.0, 1)
        assert row.started_at == finished - timedelta(seconds=2)
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_at_shutdown_the_writer_gives_up_on_an_unreachable_database_and_says_so() -> None:
    EntryFactory()
    (claim,) = claim_all(WorkerFactory())
    settled: list[Claim] = []
    lost: list[tuple[Claim, Entry]] = []
    finished = threading.Event()
    signals.entry_finished.connect(lambda **kwargs: finished.set(), weak=False, dispatch_uid="t")
    writer = AckWriter(on_settled=settled.append, on_lost=lambda *given: lost.append(given))
    ack = Ack(claim.entries[0], claim.lock_id, claim=claim)
    writer.put(ack)
    try:
        with (
            mock.patch.object(
                type(Entry.objects), "complete_many", side_effect=OperationalError("down")
            ),
            mock.patch("django_iq.dbconn.time.sleep"),
        ):
            writer.start()
            writer.close()
    finally:
        signals.entry_finished.disconnect(dispatch_uid="t")

    assert settled == [] and ack.done.is_set(), "never settled: the claim stays held"
    assert lost == [(claim, claim.entries[0])], "the worker is told the outcome was lost"
    assert not finished.is_set(), "nothing was written, so nothing finished"
    assert Entry.objects.filter(pk=claim.entries[0].pk).exists(), "left for recovery to rerun"
    assert GroupLock.objects.filter(pk=claim.lock_id).exists()


def test_a_success_keeps_the_claim_held_until_it_is_written() -> None:
    EntryFactory(job_name=record.name, args=["deferred"])
    (claim,) = claim_all(WorkerFactory())
    settled: list[Claim] = []
    finished = threading.Event()
    signals.entry_finished.connect(lambda **kwargs: finished.set(), weak=False, dispatch_uid="t")
    try:
        writer = AckWriter("test:1", on_settled=settled.append)
        processor = Processor("test:1", writer)

        result = processor.run_claim(claim, lambda: False)

        assert (result.done, result.settled) == (1, False)
        assert JobRun.objects.filter(token="deferred").exists(), "the job ran"
        assert settled == [] and not finished.is_set(), "not written yet"
        assert GroupLock.objects.filter(pk=claim.lock_id).exists(), "still locked meanwhile"
        assert not RunOutcome.objects.exists()
        writer.start()
        writer.close()
        assert settled == [claim] and finished.is_set()
        assert not Entry.objects.exists() and not GroupLock.objects.exists()
        assert RunOutcome.objects.get().return_value == "deferred"
    finally:
        signals.entry_finished.disconnect(dispatch_uid="t")


def test_a_failure_that_gives_the_lock_up_waits_for_the_claims_earlier_successes() -> None:
    EntryFactory(job_name=record.name, args=["first"], group_key="g")
    EntryFactory(job_name=always_fails.name, args=["second"], group_key="g", max_attempts=1)
    (claim,) = claim_all(WorkerFactory())
    assert len(claim.entries) == 2
    writer = AckWriter("test:1")  # started later: the first success waits in it
    processor = Processor("test:1", writer)
    results = []

    def run() -> None:
        try:
            results.append(processor.run_claim(claim, bool))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)

    thread.start()
    thread.join(2.0)

    assert thread.is_alive(), "the failure waits for the success before it"
    assert JobRun.objects.filter(token="first").exists()
    assert GroupLock.objects.filter(pk=claim.lock_id).exists()
    assert Entry.objects.count() == 2 and not EntryError.objects.exists()
    writer.start()
    thread.join(10.0)
    writer.close()
    (result,) = results
    assert (result.done, result.failed, result.settled) == (1, 1, True)
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    assert EntryError.objects.get().entry_id == claim.entries[1].pk


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
    settled: list[Claim] = []
    writer = AckWriter(on_settled=settled.append)
    for claim in claims:
        writer.put(Ack(claim.entries[0], claim.lock_id, claim=claim))
    real = Entry.objects.complete_many

    def refuse_batches(done: list[Success], jobs: Any = None) -> set[int]:
        if len(done) > 1:
            raise ValueError("a bad row")
        return real(done, jobs)

    with mock.patch.object(type(Entry.objects), "complete_many", side_effect=refuse_batches):
        writer.start()
        writer.close()

    assert settled == claims and writer.written == 3
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
