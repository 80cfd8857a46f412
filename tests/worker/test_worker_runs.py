"""A worker run in this process against the real database: order, pause, disable, retries."""

from __future__ import annotations

import pytest
from django.db.models import JSONField, Value

from django_iq.models import Entry, EntryError, GroupLock, Queue, Worker
from django_iq.worker import WorkerProcess
from tests.testapp.jobs import always_fails, flaky, record
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def drain(**options: object) -> WorkerProcess:
    worker = WorkerProcess(burst=True, **options)  # type: ignore[arg-type]
    assert worker.run(install_signal_handlers=False) == 0
    return worker


def test_one_thread_runs_higher_priority_first_then_fifo() -> None:
    record.using(priority=0).enqueue("low-1")
    record.using(priority=50).enqueue("high-1")
    record.using(priority=0).enqueue("low-2")
    record.using(priority=50).enqueue("high-2")
    record.using(priority=-100).enqueue("lowest")

    drain(processing_threads=1)

    order = list(JobRun.objects.order_by("pk").values_list("token", flat=True))
    assert order == ["high-1", "high-2", "low-1", "low-2", "lowest"]


def test_paused_queue_is_not_served_and_resumed_queue_is() -> None:
    record.using(queue="reports").enqueue("paused-one")
    record.enqueue("served-one")
    Queue.objects.pause("reports")

    drain(processing_threads=2)

    assert set(JobRun.objects.values_list("token", flat=True)) == {"served-one"}
    assert Entry.objects.filter(queue="reports", state="pending").count() == 1

    Queue.objects.resume("reports")
    drain(processing_threads=2)
    assert JobRun.objects.filter(token="paused-one").exists()


def test_disabled_job_does_not_run_until_enabled() -> None:
    record.enqueue("before-disable")
    Entry.objects.disable(record.name)
    record.enqueue("while-disabled")
    flaky.enqueue("other-job", 0)

    drain(processing_threads=2)

    assert set(JobRun.objects.values_list("token", flat=True)) == {"other-job"}
    assert Entry.objects.filter(job_name=record.name, state="disabled").count() == 2

    Entry.objects.enable(record.name)
    drain(processing_threads=2)
    assert {"before-disable", "while-disabled"} <= set(
        JobRun.objects.values_list("token", flat=True)
    )


def test_failing_job_retries_with_backoff_then_succeeds() -> None:
    flaky.enqueue("retry-me", 2)

    drain(processing_threads=1)

    assert JobRun.objects.filter(token="retry-me").exists()
    errors = list(
        EntryError.objects.order_by("attempt").values_list("attempt", "is_final", "exception_class")
    )
    assert errors == [(1, False, "builtins.RuntimeError"), (2, False, "builtins.RuntimeError")]
    first, second = EntryError.objects.order_by("attempt")
    assert second.failed_at > first.failed_at
    assert Entry.objects.count() == 0


def test_exhausted_attempts_leave_a_final_error_with_traceback_and_requeue_runs_it_again() -> None:
    always_fails.enqueue("kaput")

    drain(processing_threads=1)

    assert Entry.objects.count() == 0
    final = EntryError.objects.get(is_final=True)
    assert final.attempt == 2 and final.max_attempts == 2
    assert final.exception_class == "builtins.ValueError"
    assert final.message == "kaput"
    assert "Traceback (most recent call last)" in final.traceback
    assert "raise ValueError(message)" in final.traceback
    assert EntryError.objects.filter(entry_id=final.entry_id).count() == 2, (
        "attempt history is kept"
    )
    (stats,) = [s for s in Queue.objects.stats() if s.queue == "default"]
    assert stats.failed == 1

    (requeued,) = EntryError.objects.requeue([final])
    assert requeued.state == "pending" and requeued.args == ["kaput"]
    drain(processing_threads=1)
    assert EntryError.objects.filter(is_final=True, requeued_at__isnull=True).count() == 1
    assert EntryError.objects.count() == 4


def test_an_entry_of_a_job_the_worker_does_not_know_is_never_attempted() -> None:
    Queue.objects.ensure("default")
    Entry.objects.create(
        queue_id="default", job_name="os.system", args=["true"], lock_key="e:manual", max_attempts=1
    )
    record.enqueue("known")

    worker = drain(processing_threads=1)

    unknown = Entry.objects.get(job_name="os.system")
    assert (unknown.state, unknown.attempts) == ("pending", 0), (
        "it waits for a worker that knows it"
    )
    assert not EntryError.objects.exists() and not GroupLock.objects.exists()
    assert JobRun.objects.filter(token="known").exists(), "known jobs flow past it"
    names = Worker.objects.get(name=worker.name).job_names
    assert record.name in names and "os.system" not in names


def test_a_worker_with_the_job_registered_runs_what_another_left() -> None:
    Queue.objects.ensure("default")
    name = "tests.testapp.late_jobs.arrives_later"
    Entry.objects.create(queue_id="default", job_name=name, args=["late"], lock_key="e:late")

    drain(processing_threads=1)
    assert Entry.objects.filter(job_name=name, attempts=0).exists()

    import tests.testapp.late_jobs  # noqa: F401 (deployed here now: the job registers)

    drain(processing_threads=1)
    assert JobRun.objects.filter(token="late").exists() and not Entry.objects.exists()
    assert not EntryError.objects.exists()


def test_a_job_name_given_to_the_worker_but_not_registered_fails_for_good() -> None:
    Queue.objects.ensure("default")
    Entry.objects.create(
        queue_id="default", job_name="os.system", args=["true"], lock_key="e:manual", max_attempts=1
    )

    drain(processing_threads=1, job_names=["os.system"])

    error = EntryError.objects.get()
    assert error.exception_class == "django_iq.exceptions.JobNotRegistered"
    assert "'os.system' is not a registered job" in error.message
    assert error.is_final
    assert GroupLock.objects.count() == 0


def test_worker_registers_itself_and_marks_itself_stopped() -> None:
    record.enqueue("x")
    worker = drain(processing_threads=3, name="unit-node")

    row = Worker.objects.get(name=worker.name)
    assert row.name.startswith("unit-node:")
    assert row.processing_threads == 3
    assert row.stopped_at is not None and not row.died, "a clean exit is not a death"
    assert worker.processed == 1


def test_worker_records_finished_work_per_minute_and_in_totals() -> None:
    from django_iq.models import QueueMinute, QueueTotal

    record.enqueue_many([((f"m-{i}",), {}) for i in range(4)])
    always_fails.enqueue("counted")

    drain(processing_threads=2)

    minutes = QueueMinute.objects.filter(queue="default")
    assert sum(m.done for m in minutes) == 4
    assert sum(m.failed for m in minutes) == 2, "both attempts of always_fails count as failures"
    total = QueueTotal.objects.get(queue="default")
    assert (total.done, total.failed) == (4, 2)
    assert total.le_600 == 6, "every job took under 600 s: the histogram is cumulative"
    assert total.busy_seconds > 0


@pytest.mark.parametrize(
    ("args", "kwargs", "what"),
    [
        ({"not": "a list"}, {}, "args must be a JSON array"),
        ([], ["not", "a dict"], "kwargs"),
        (Value(None, JSONField()), {}, "args must be a JSON array, got NoneType None"),
        ([], Value(None, JSONField()), "kwargs must be a JSON object, got NoneType None"),
    ],
    ids=["args an object", "kwargs a list", "args JSON null", "kwargs JSON null"],
)
def test_a_row_written_by_hand_with_a_malformed_call_fails_for_good_and_others_run(
    args: object, kwargs: object, what: str
) -> None:
    bad = record.using(max_attempts=5).enqueue("placeholder")
    Entry.objects.filter(pk=bad.pk).update(args=args, kwargs=kwargs)  # as a hand-written row
    record.enqueue("good")

    drain(processing_threads=2)

    assert list(JobRun.objects.values_list("token", flat=True)) == ["good"]
    error = EntryError.objects.get(entry_id=bad.pk)
    assert error.is_final and error.attempt == 1, "retrying a malformed row cannot help"
    assert error.exception_class == "django_iq.exceptions.InvalidJobArguments"
    assert what in error.message
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
