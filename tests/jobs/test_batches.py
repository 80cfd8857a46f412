"""Batches (``django_iq.batch()``) run by a real worker on the test database: the callback runs
once, after every member ended, with the counts of members that succeeded and failed, judged
by what the jobs recorded (docs/howto/workflows.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction

import django_iq
from django_iq.exceptions import (
    InvalidJobArguments,
    InvalidJobOptions,
    JobNotRegistered,
    NestedBatch,
)
from django_iq.models import Batch, Entry, EntryDependency, EntryError
from django_iq.worker import WorkerProcess
from tests.testapp.jobs import batch_done, batch_member, noop, record, refresh_account, step
from tests.testapp.models import RecordedRun

pytestmark = pytest.mark.django_db(transaction=True)

LATER = timedelta(hours=1)


def drain() -> None:
    assert WorkerProcess(burst=True, processing_threads=4).run(install_signal_handlers=False) == 0


def callback_runs(batch_id: int) -> list[str]:
    """The counts each run of the batch's callback was called with, ``succeeded/failed``."""
    return list(
        RecordedRun.objects.filter(token=f"batch:{batch_id}").values_list("group_key", flat=True)
    )


def test_the_callback_runs_once_with_the_counts_of_successes_and_final_failures() -> None:
    with django_iq.batch(on_complete=batch_done, label="-nightly") as b:
        for i in range(10):
            batch_member.enqueue(f"m{i}", fail=i % 4 == 0)  # Fail: final at once
        step.enqueue("exhausted", fail=True)  # max_attempts=1: its only attempt fails
        django_iq.enqueue_many(batch_member, [((f"many{i}",), {}) for i in range(3)])

    drain()

    assert callback_runs(b.id) == ["10/4-nightly"]
    batch = Batch.objects.get(pk=b.id)
    assert (batch.total, batch.failed) == (14, 4)
    assert batch.closed_at is not None and batch.completed_at is not None
    assert not Entry.objects.exists() and not EntryDependency.objects.exists()


def test_the_callback_starts_after_every_member_ended() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        for i in range(3):
            batch_member.using(run_at=LATER).enqueue(f"late{i}", seconds=0.05)
    callback = Entry.objects.get(job_name=batch_done.name)
    assert (callback.state, callback.blockers) == ("blocked", 3)

    drain()  # the members are not due: nothing can run, the callback least of all
    assert not RecordedRun.objects.exists()
    assert Entry.objects.get(pk=callback.pk).state == "blocked"

    Entry.objects.run_now(Entry.objects.filter(batch_id=b.id).values_list("pk", flat=True))
    drain()

    (started,) = RecordedRun.objects.filter(token=f"batch:{b.id}").values_list(
        "started_at", flat=True
    )
    ends = RecordedRun.objects.filter(token__startswith="late").values_list(
        "finished_at", flat=True
    )
    assert len(ends) == 3 and started >= max(end or 0 for end in ends)
    assert callback_runs(b.id) == ["3/0"]


def test_members_that_end_before_the_block_closes_do_not_release_the_callback() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        batch_member.enqueue("early")
        batch_member.enqueue("early-fail", fail=True)
        drain()  # both members end while the block is still open
        assert RecordedRun.objects.filter(token__startswith="early").count() == 2
        callback = Entry.objects.get(job_name=batch_done.name)
        assert (callback.state, callback.blockers) == ("blocked", 1)
    assert Entry.objects.get(pk=callback.pk).state == "pending"

    drain()

    assert callback_runs(b.id) == ["1/1"]


def test_a_cancelled_member_counts_as_failed() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        kept = batch_member.enqueue("kept")
        dropped = batch_member.using(run_at=LATER).enqueue("dropped")

    assert Entry.objects.cancel([dropped.pk]) == (1, 0)
    drain()

    assert callback_runs(b.id) == ["1/1"]
    assert RecordedRun.objects.filter(token="kept").count() == 1 and kept.batch_id == b.id


def test_a_member_failed_by_its_parent_counts_as_failed() -> None:
    parent = step.enqueue("parent", fail=True)
    drain()
    with django_iq.batch(on_complete=batch_done) as b:
        orphan = batch_member.using(after=[parent]).enqueue("orphan")  # ParentFailed at once
        batch_member.enqueue("fine")

    assert EntryError.objects.get(entry_id=orphan.pk).exception_class.endswith("ParentFailed")
    drain()

    assert callback_runs(b.id) == ["1/1"]


def test_a_failed_callback_requeued_from_its_error_runs_with_the_counts() -> None:
    with django_iq.batch(on_complete=batch_done, label=":broken") as b:
        batch_member.enqueue("member")
        batch_member.enqueue("member-fail", fail=True)
    drain()
    (error,) = EntryError.objects.filter(job_name=batch_done.name, is_final=True)
    assert error.kwargs == {"label": ":broken", "batch_id": b.id, "succeeded": 1, "failed": 1}

    RecordedRun.objects.create(token="repaired", pid=0, started_at=0)
    EntryError.objects.requeue([error])
    drain()

    assert callback_runs(b.id) == ["1/1:broken"]


def test_an_empty_batch_calls_on_complete_at_once_with_zeros() -> None:
    with django_iq.batch(on_complete=batch_done.name) as b:
        pass
    callback = Entry.objects.get(job_name=batch_done.name)
    assert callback.state == "pending"
    assert callback.kwargs == {"batch_id": b.id}

    drain()

    assert callback_runs(b.id) == ["0/0"]


def test_a_block_that_raises_keeps_its_members_and_still_calls_back_once() -> None:
    with pytest.raises(RuntimeError, match="stopped"), django_iq.batch(on_complete=batch_done) as b:
        batch_member.enqueue("before-the-error")
        raise RuntimeError("stopped halfway")

    drain()

    assert callback_runs(b.id) == ["1/0"]
    assert Batch.objects.get(pk=b.id).closed_at is not None


def test_a_block_that_raises_before_any_member_leaves_nothing() -> None:
    with pytest.raises(RuntimeError, match="nothing"), django_iq.batch(on_complete=batch_done):
        raise RuntimeError("nothing enqueued")

    assert not Batch.objects.exists() and not Entry.objects.exists()


def test_a_rolled_back_outer_transaction_takes_the_whole_batch_with_it() -> None:
    with pytest.raises(ValueError, match="undo"), transaction.atomic():
        with django_iq.batch(on_complete=batch_done):
            batch_member.enqueue("rolled-back")
        raise ValueError("undo everything")

    assert not Batch.objects.exists() and not Entry.objects.exists()
    assert not EntryDependency.objects.exists()


def test_a_database_error_in_the_block_leaves_the_batch_to_the_rollback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(DatabaseError), transaction.atomic():
        with django_iq.batch(on_complete=batch_done):
            batch_member.enqueue("rolled-back")
            with connection.cursor() as cursor:
                cursor.execute("SELECT * FROM no_such_table")

    assert not Batch.objects.exists() and not Entry.objects.exists()
    if connection.vendor == "postgresql":  # the error aborted the transaction: no close
        assert "not closed: its transaction is broken" in caplog.text


def test_a_batch_has_an_id_once_its_block_is_entered() -> None:
    block = django_iq.batch(on_complete=batch_done)
    with pytest.raises(AttributeError, match="once its block is entered"):
        _ = block.id
    assert not Batch.objects.exists()


def test_the_members_of_a_committed_outer_transaction_run_then_the_callback() -> None:
    with transaction.atomic(), django_iq.batch(on_complete=batch_done) as b:
        django_iq.enqueue_many(batch_member, [((f"t{i}",), {"fail": i == 0}) for i in range(5)])

    drain()

    assert callback_runs(b.id) == ["4/1"]


def test_a_task_enqueued_through_the_tasks_backend_is_a_member() -> None:
    from tests.testapp import tasks

    with django_iq.batch(on_complete=batch_done) as b:
        result = tasks.add.enqueue(2, 3)
    assert Entry.objects.get(result_id=result.id).batch_id == b.id

    drain()

    assert callback_runs(b.id) == ["1/0"]


def test_a_unique_jobs_duplicate_does_not_join_the_batch() -> None:
    first = refresh_account.enqueue(7)
    with django_iq.batch(on_complete=batch_done) as b:
        again = refresh_account.enqueue(7)
        fresh = refresh_account.enqueue(8)

    assert again.is_duplicate and again.pk == first.pk and again.batch_id is None
    assert fresh.batch_id == b.id and Batch.objects.get(pk=b.id).total == 1


def test_a_batch_inside_a_batch_is_refused() -> None:
    with django_iq.batch(on_complete=batch_done) as outer:
        with pytest.raises(NestedBatch, match=f"batch {outer.id}.*do not nest"):
            with django_iq.batch(on_complete=batch_done):
                pass  # pragma: no cover (never entered)
        noop.enqueue()

    assert Batch.objects.count() == 1
    assert Batch.objects.get().total == 1


def test_entries_enqueued_outside_the_block_are_not_members() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        batch_member.enqueue("inside")
    outside = record.enqueue("outside")

    assert outside.batch_id is None
    assert Batch.objects.get(pk=b.id).total == 1


@pytest.mark.parametrize(
    ("on_complete", "kwargs", "error", "match"),
    [
        ("tests.testapp.jobs.nope", {}, JobNotRegistered, "not a registered job"),
        (len, {}, JobNotRegistered, "Expected a @job function"),
        (batch_done, {"label": object()}, InvalidJobArguments, "label"),
        (batch_done, {"failed": 3}, InvalidJobArguments, "failed cannot be given"),
        (record, {}, InvalidJobArguments, "cannot be called with"),
        (batch_done, {"colour": "red"}, InvalidJobArguments, "colour"),
        (batch_done.using(unique_key="k"), {}, InvalidJobOptions, "unique key"),
        (batch_done.using(after=[1]), {}, InvalidJobOptions, "cannot wait"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    on_complete: object, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        with django_iq.batch(on_complete, **kwargs):  # type: ignore[arg-type]
            noop.enqueue()  # pragma: no cover (never entered)

    assert not Batch.objects.exists() and not Entry.objects.exists()
