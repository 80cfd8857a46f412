"""``django_iq.cancel()`` of work a real ``runworker`` process is running, on whichever database
the suite runs on: a sync job stops with ``JobCancelled`` raised in its thread, a coroutine job's
task is cancelled, a job blocked in ``time.sleep`` is given up after the grace period (its
process replaced), and an entry waiting in the worker's claim ends before it starts. Each is
never retried, leaves a ``cancelled`` outcome record, and frees its group. Judged by what the
jobs recorded (start, end, whether they saw ``cancel_requested()``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

import django_iq
from django_iq.models import Entry, EntryError, RunOutcome, Worker
from tests.conftest import wait_until
from tests.processes import Command, command_env, finish, start_command
from tests.testapp.jobs import cancellable, cancellable_async, record, sleeps_in_c
from tests.testapp.models import JobRun, RecordedRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GRACE_SECONDS = 1.0


def started(token: str) -> RecordedRun:
    return wait_until(
        lambda: RecordedRun.objects.filter(token=token).first(),
        message=f"{token} to start",
    )  # type: ignore[return-value]


@pytest.fixture
def worker() -> Iterator[Command]:
    command = start_command(
        "runworker",
        "--processes",
        "1",
        "--threads",
        "2",
        env=command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE_SECONDS)),
    )
    wait_until(
        lambda: Worker.objects.filter(stopped_at__isnull=True).exists(), message="the worker up"
    )
    yield command
    command.send_signal(signal.SIGTERM)
    code, output = finish(command, 60)
    assert code == 0, output[-3000:]


@pytest.mark.parametrize("job", [cancellable, cancellable_async], ids=["sync", "coroutine"])
def test_a_running_job_is_stopped_and_its_group_freed(worker: Command, job: object) -> None:
    entry = job.using(group_key="g").enqueue("running")  # type: ignore[attr-defined]
    after = record.using(group_key="g").enqueue("after")
    run = started("running")

    report = django_iq.cancel(entry)
    asked = time.time()

    assert report.requested == [entry.pk]
    with pytest.raises(django_iq.JobCancelled):
        django_iq.wait(entry, timeout=30)
    run.refresh_from_db()
    assert run.finished_at is not None and run.finished_at - asked < 5, "stopped, not run out"
    assert run.group_key == "saw-cancel", "cancel_requested() was true as it ended"
    assert django_iq.wait(after, timeout=30) == "after", "its group's next entry ran"
    assert JobRun.objects.get(token="after").started_at >= run.finished_at
    outcome = RunOutcome.objects.get(entry_id=entry.pk)
    assert outcome.status == "cancelled" and outcome.started_at is not None
    assert outcome.worker_name.startswith(Worker.objects.filter(pid__gt=0).first().name[:3])
    assert RecordedRun.objects.filter(token="running").count() == 1, "never retried"
    assert not EntryError.objects.exists(), "a cancel is no failed attempt"


def test_a_job_blocked_in_c_is_given_up_after_the_grace_and_never_runs_again() -> None:
    # Two supervised children: the one given up exits at once, and is replaced.
    supervisor = start_command(
        "runworker",
        "--processes",
        "2",
        "--threads",
        "1",
        env=command_env(DJANGO_IQ_TIMEOUT_GRACE_SECONDS=str(GRACE_SECONDS)),
    )
    live = Worker.objects.filter(stopped_at__isnull=True)
    wait_until(lambda: live.count() == 2, message="two children up")
    first_children = set(live.values_list("pid", flat=True))
    entry = sleeps_in_c.enqueue("blocked", 30)
    run = started("blocked")

    django_iq.cancel(entry)

    with pytest.raises(django_iq.JobCancelled):
        django_iq.wait(entry, timeout=30)
    outcome = RunOutcome.objects.get(entry_id=entry.pk)
    assert "given up" in outcome.traceback
    run.refresh_from_db()
    assert run.finished_at is None, "it was left while blocked"
    wait_until(
        lambda: live.exclude(pid__in=first_children).exists(),
        message="the given-up process replaced",
    )
    after = record.enqueue("next")
    assert django_iq.wait(after, timeout=30) == "next"
    assert RecordedRun.objects.filter(token="blocked").count() == 1, "never retried"
    supervisor.send_signal(signal.SIGTERM)
    code, output = finish(supervisor, 60)
    assert code == 0, output[-3000:]


def test_an_entry_waiting_in_the_worker_s_claim_ends_before_it_starts(worker: Command) -> None:
    first = cancellable.using(group_key="pair").enqueue("first", 1.5)
    second = record.using(group_key="pair").enqueue("second")
    started("first")

    report = django_iq.cancel(second)

    assert report.requested == [second.pk], "held by the worker's claim"
    with pytest.raises(django_iq.JobCancelled):
        django_iq.wait(second, timeout=30)
    assert django_iq.wait(first, timeout=30) == "first", "the running one went on"
    assert not JobRun.objects.filter(token="second").exists()
    assert RunOutcome.objects.get(entry_id=second.pk).started_at is None
    assert not Entry.objects.exists()


@pytest.mark.postgresql
def test_on_postgresql_the_cancel_reaches_the_worker_by_notification() -> None:
    """Heartbeats 10 s apart: only the notification can bring the cancel within a second."""
    env = command_env(
        DJANGO_IQ_HEARTBEAT_INTERVAL_SECONDS="10", DJANGO_IQ_WORKER_SILENT_AFTER_SECONDS="60"
    )
    command = start_command("runworker", "--threads", "1", env=env)
    try:
        entry = cancellable.enqueue("notified")
        run = started("notified")
        time.sleep(0.5)  # well past the first heartbeat after its claim

        django_iq.cancel(entry)
        asked = time.time()
        with pytest.raises(django_iq.JobCancelled):
            django_iq.wait(entry, timeout=30)
    finally:
        command.send_signal(signal.SIGTERM)
        code, output = finish(command, 60)
    assert code == 0, output[-3000:]
    run.refresh_from_db()
    assert run.finished_at is not None and run.finished_at - asked < 1.0, output[-2000:]
