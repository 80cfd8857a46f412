"""``django_iq.cancel()`` on the caller's side: a waiting entry ends at once, one a worker holds
gets a cancel request (carried out by the worker: tests/concurrency/test_cancel_processes.py),
unknown ids are reported for a list and raised for one, bad input is refused with nothing
written; the leader ends requested cancels no worker holds any more."""

from __future__ import annotations

import pytest
from django.utils import timezone

import django_iq
from django_iq.duties import CancelDuty, default_duties
from django_iq.leader import Leader
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from django_iq.testing import run_jobs
from tests.testapp.jobs import record, step
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db


def test_a_waiting_entry_is_cancelled_at_once() -> None:
    entry = record.enqueue("never")

    report = django_iq.cancel(entry)

    assert (report.cancelled, report.requested, report.not_found) == ([entry.pk], [], [])
    assert not Entry.objects.exists()
    assert RunOutcome.objects.get(entry_id=entry.pk).status == "cancelled"
    assert run_jobs() == [] and not JobRun.objects.exists()
    with pytest.raises(django_iq.JobCancelled):
        django_iq.wait(entry, timeout=0)


def test_an_entry_a_worker_holds_gets_a_cancel_request_and_keeps_running() -> None:
    held = record.using(group_key="g").enqueue("held")
    GroupLock.objects.create(key=held.lock_key, queue_id="default", entry_id=held.pk)

    report = django_iq.cancel(held.pk)

    assert (report.cancelled, report.requested) == ([], [held.pk])
    stored = Entry.objects.get(pk=held.pk)
    assert stored.cancel_requested_at is not None, "the worker holding it carries it out"
    first = stored.cancel_requested_at
    django_iq.cancel(held.pk)
    assert Entry.objects.get(pk=held.pk).cancel_requested_at == first, "asked once"


def test_a_list_reports_unknown_ids_and_one_unknown_id_raises() -> None:
    waiting = record.enqueue("w")

    report = django_iq.cancel([waiting, 987654321, waiting.pk])

    assert (report.cancelled, report.not_found) == ([waiting.pk], [987654321])
    with pytest.raises(django_iq.EntryNotFound):
        django_iq.cancel(987654321)
    with pytest.raises(django_iq.EntryNotFound):
        django_iq.cancel(waiting.pk), "already cancelled: gone"


@pytest.mark.parametrize("bad", ["12", 0, -1, None, 1.5, True, [object()], ["3"]], ids=repr)
def test_what_is_not_an_entry_or_an_id_is_refused_with_nothing_written(bad: object) -> None:
    entry = record.enqueue("kept")

    with pytest.raises(django_iq.InvalidArgument):
        django_iq.cancel(bad)  # type: ignore[arg-type]

    assert Entry.objects.filter(pk=entry.pk).exists()


def test_cancelling_a_parent_ends_its_children_and_its_batch_counts_it() -> None:
    parent = record.enqueue("parent")
    child = step.using(after=[parent]).enqueue("child")

    django_iq.cancel(parent)

    error = EntryError.objects.get(entry_id=child.pk)
    assert error.exception_class.endswith("ParentFailed") and "was cancelled" in error.message


def test_the_leader_ends_a_requested_cancel_once_no_worker_holds_the_entry() -> None:
    held = record.using(group_key="g").enqueue("left")
    lock = GroupLock.objects.create(key=held.lock_key, queue_id="default", entry_id=held.pk)
    django_iq.cancel(held)
    leader = Leader(name="a", duties=[CancelDuty()], lease_seconds=30)
    assert leader.run_once().ran["cancels"] == 0, "held: left to the worker"

    lock.delete()  # the claim ended before its worker came to the entry
    assert CancelDuty().run_once(timezone.now(), leader.fence) == 1

    assert not Entry.objects.exists()
    assert RunOutcome.objects.get(entry_id=held.pk).status == "cancelled"
    assert "cancels" in [duty.name for duty in default_duties()]


def test_an_entry_claimed_after_its_cancel_was_requested_never_runs() -> None:
    entry = record.using(group_key="g").enqueue("requested")
    lock = GroupLock.objects.create(key=entry.lock_key, queue_id="default", entry_id=entry.pk)
    django_iq.cancel(entry)
    lock.delete()

    (run,) = run_jobs()

    assert run.status == "cancelled" and not JobRun.objects.exists()
    outcome = RunOutcome.objects.get(entry_id=entry.pk)
    assert (outcome.status, outcome.started_at) == ("cancelled", None)
