"""What operators and the leader do to waiting entries, against the real database: disable and
enable a job, requeue a failed entry, promote deferred entries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq.models import DisabledJob, Entry, EntryError
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    WorkerFactory,
)
from tests.managers.conftest import claimed_ids
from tests.testapp.jobs import flaky, record

pytestmark = pytest.mark.django_db


# -- disable / enable -------------------------------------------------------------------------


def test_a_disabled_job_yields_nothing_including_entries_enqueued_while_disabled() -> None:
    before = record.enqueue("before")
    other = flaky.using(queue="default").enqueue("other", 0)

    assert Entry.objects.disable(record.name) == 1
    during = record.enqueue("during")

    assert set(Entry.objects.disabled().values_list("pk", flat=True)) == {before.pk, during.pk}
    assert during.state == "disabled"
    assert claimed_ids(Entry.objects.claim(WorkerFactory(), 10, "default")) == [other.pk]


def test_a_pending_entry_of_a_disabled_job_is_not_claimed() -> None:
    Entry.objects.disable(record.name)
    EntryFactory(job_name=record.name)  # written past the manager, e.g. by a migration

    assert Entry.objects.claim(WorkerFactory(), 10, "default") == []


def test_disabling_twice_keeps_one_marker() -> None:
    Entry.objects.disable(record.name)
    Entry.objects.disable(record.name)

    assert DisabledJob.objects.filter(job_name=record.name).count() == 1


def test_enable_restores_initial_or_pending_by_run_at_and_keeps_priority() -> None:
    due = record.using(priority=30).enqueue("due")
    later = record.using(priority=-7, run_at=timedelta(hours=1)).enqueue("later")
    Entry.objects.disable(record.name)
    during = record.using(priority=12).enqueue("during")

    assert Entry.objects.enable(record.name) == 3

    states = dict(Entry.objects.values_list("pk", "state"))
    assert states == {due.pk: "pending", later.pk: "initial", during.pk: "pending"}
    priorities = dict(Entry.objects.values_list("pk", "priority"))
    assert priorities == {due.pk: 30, later.pk: -7, during.pk: 12}
    assert not DisabledJob.objects.exists()
    assert record.enqueue("after").state == "pending"


# -- requeue ----------------------------------------------------------------------------------


def test_requeue_creates_a_pending_entry_and_marks_the_error_requeued() -> None:
    error = EntryErrorFactory(
        args=["again"], kwargs={"seconds": 0}, priority=7, group_key="acct", max_attempts=4
    )

    (entry,) = EntryError.objects.requeue([error])

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.state, stored.queue_id, stored.job_name) == (
        "pending",
        "default",
        error.job_name,
    )
    assert (stored.args, stored.kwargs, stored.priority) == (["again"], {"seconds": 0}, 7)
    assert (stored.group_key, stored.lock_key) == ("acct", "g:acct")
    assert (stored.attempts, stored.max_attempts) == (0, 4)
    error.refresh_from_db()
    assert error.requeued_at is not None
    assert not EntryError.objects.failed().exists()


def test_requeue_skips_errors_already_requeued_or_not_final() -> None:
    error = EntryErrorFactory()
    EntryError.objects.requeue([error])
    retrying = EntryErrorFactory(is_final=False)

    assert EntryError.objects.requeue(EntryError.objects.all()) == []
    assert Entry.objects.count() == 1
    retrying.refresh_from_db()
    assert retrying.requeued_at is None


def test_requeue_of_a_disabled_job_gives_a_disabled_entry() -> None:
    Entry.objects.disable(record.name)
    error = EntryErrorFactory(job_name=record.name)

    (entry,) = EntryError.objects.requeue([error])

    assert Entry.objects.get(pk=entry.pk).state == "disabled"


# -- promote ----------------------------------------------------------------------------------


def test_promote_due_makes_deferred_entries_whose_time_has_come_pending() -> None:
    now = timezone.now()
    due = EntryFactory(deferred=True, run_at=now - timedelta(seconds=1))
    exactly = EntryFactory(deferred=True, run_at=now)
    later = EntryFactory(deferred=True, run_at=now + timedelta(seconds=1))

    assert Entry.objects.promote_due(now) == 2

    states = dict(Entry.objects.values_list("pk", "state"))
    assert states == {due.pk: "pending", exactly.pk: "pending", later.pk: "initial"}


def test_promote_due_takes_at_most_limit_entries_oldest_run_at_first() -> None:
    now = timezone.now()
    newer = EntryFactory(deferred=True, run_at=now - timedelta(seconds=1))
    older = EntryFactory(deferred=True, run_at=now - timedelta(seconds=2))

    assert Entry.objects.promote_due(now, limit=1) == 1

    assert list(Entry.objects.pending()) == [older]
    assert list(Entry.objects.initial()) == [newer]


def test_promote_due_leaves_disabled_entries_alone() -> None:
    EntryFactory(disabled=True, run_at=timezone.now() - timedelta(hours=1))

    assert Entry.objects.promote_due() == 0
