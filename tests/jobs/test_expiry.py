"""Expiry (``@job(expires=...)``, ``using(expires=...)``): an entry not started by its expiry
never runs. It ends with an ``expired`` outcome record, its batch counts it failed, its
dependants follow ``on_parent_failure``, ``wait()`` raises ``JobExpired``. Found when a worker
comes to it (the claim hands it over, the job never sees it) and by the leader's expiry duty.
Real processes: tests/concurrency/test_expiry_processes.py."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

import django_iq
from django_iq import job
from django_iq.duties import ExpiryDuty, default_duties
from django_iq.exceptions import InvalidJobOptions
from django_iq.leader import Leader
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from django_iq.testing import run_jobs
from tests.testapp.jobs import batch_done, batch_member, expiring, record, step
from tests.testapp.models import JobRun, RecordedRun

pytestmark = pytest.mark.django_db

PAST = datetime(2020, 1, 1, tzinfo=UTC)


def test_an_entry_past_its_expiry_is_never_handed_to_its_job() -> None:
    late = record.using(expires=timezone.now() - timedelta(seconds=1)).enqueue("late")
    fresh = record.using(expires=timedelta(minutes=5)).enqueue("fresh")

    runs = {run.entry_id: run for run in run_jobs()}

    assert runs[late.pk].status == "expired" and runs[fresh.pk].status == "succeeded"
    assert list(JobRun.objects.values_list("token", flat=True)) == ["fresh"]
    outcome = RunOutcome.objects.get(entry_id=late.pk)
    assert (outcome.status, outcome.started_at, outcome.worker_name) == ("expired", None, "")
    assert outcome.exception_class == "django_iq.exceptions.EntryExpired"
    assert not Entry.objects.exists() and not GroupLock.objects.exists()
    assert not EntryError.objects.exists(), "an expiry is not a failed attempt"
    with pytest.raises(django_iq.JobExpired) as caught:
        django_iq.wait(late, timeout=1)
    assert caught.value.entry_id == late.pk


def test_a_job_s_expiry_counts_from_each_enqueue() -> None:
    first = expiring.enqueue("first")
    time.sleep(0.15)  # expiring: expires=0.1
    second = expiring.enqueue("second")

    statuses = {run.entry_id: run.status for run in run_jobs()}

    assert statuses == {first.pk: "expired", second.pk: "succeeded"}


def test_a_deferred_entry_expires_counting_from_when_it_is_due() -> None:
    run_at = timezone.now() + timedelta(hours=1)
    entry = record.using(run_at=run_at, expires=timedelta(minutes=10)).enqueue("later")
    fixed = record.using(expires=datetime(2099, 1, 1, tzinfo=UTC)).enqueue("fixed")

    assert Entry.objects.get(pk=entry.pk).expires_at == run_at + timedelta(minutes=10)
    assert Entry.objects.get(pk=fixed.pk).expires_at == datetime(2099, 1, 1, tzinfo=UTC)
    assert Entry.objects.get(pk=fixed.pk).state == "pending"


def test_the_leader_ends_expired_entries_that_no_worker_comes_to() -> None:
    expired = [record.using(queue="emails", expires=PAST).enqueue(f"e{i}") for i in range(3)]
    kept = record.using(queue="emails", expires=timedelta(hours=1)).enqueue("kept")
    plain = record.using(queue="emails").enqueue("plain")

    ran = Leader(name="a", duties=[ExpiryDuty()], lease_seconds=30).run_once().ran["expiry"]

    assert ran == 3
    assert set(Entry.objects.values_list("pk", flat=True)) == {kept.pk, plain.pk}
    assert [o.status for o in django_iq.as_completed(expired, timeout=0)] == ["expired"] * 3


def test_the_leader_leaves_an_expired_entry_a_worker_holds() -> None:
    held = record.using(group_key="g1", expires=PAST).enqueue("held")
    GroupLock.objects.create(key=held.lock_key, queue_id="default", entry_id=held.pk)

    assert Entry.objects.expire_due() == 0

    assert Entry.objects.filter(pk=held.pk).exists(), "a run that started in time goes on"


def test_expiry_is_one_of_the_default_duties() -> None:
    assert "expiry" in [duty.name for duty in default_duties()]


def test_an_expired_parent_ends_its_children_as_a_failure_does() -> None:
    parent = record.using(expires=PAST).enqueue("parent")
    doomed = step.using(after=[parent]).enqueue("doomed")
    runs_anyway = step.using(after=[parent], on_parent_failure="run").enqueue("anyway")

    assert Entry.objects.expire_due() == 1

    error = EntryError.objects.get(entry_id=doomed.pk)
    assert error.exception_class.endswith("ParentFailed") and "expired" in error.message
    assert Entry.objects.get(pk=runs_anyway.pk).state == "pending"
    run_jobs()
    assert list(RecordedRun.objects.values_list("token", flat=True)) == ["anyway"]


def test_an_expired_member_counts_as_failed_in_its_batch() -> None:
    with django_iq.batch(on_complete=batch_done) as b:
        batch_member.enqueue("kept")
        batch_member.using(expires=PAST).enqueue("expired")

    run_jobs()

    assert RecordedRun.objects.get(token=f"batch:{b.id}").group_key == "1/1"


@pytest.mark.parametrize(
    "expires",
    [0, -1, -0.5, math.nan, math.inf, "60", True, timedelta(0), timedelta(seconds=-1), 10**30],
    ids=repr,
)
def test_an_expiry_that_is_not_a_positive_finite_time_is_refused(expires: object) -> None:
    with pytest.raises(InvalidJobOptions, match="expires"):
        record.using(expires=expires).enqueue("bad")
    with pytest.raises(InvalidJobOptions, match="expires"):
        job(expires=expires)(_never)

    assert not Entry.objects.exists(), "nothing written"


def test_an_expiry_datetime_must_be_aware_and_is_for_using_only() -> None:
    with pytest.raises(InvalidJobOptions, match="no timezone"):
        record.using(expires=datetime(2099, 1, 1)).enqueue("naive")
    with pytest.raises(InvalidJobOptions, match="a datetime only with using"):
        job(expires=datetime(2099, 1, 1, tzinfo=UTC))(_never)

    assert not Entry.objects.exists()


def _never() -> None:
    raise AssertionError("never registered")


def test_a_backlog_of_held_expired_entries_does_not_hide_the_others() -> None:
    held = [record.using(group_key="busy", expires=PAST).enqueue(f"h{i}") for i in range(3)]
    GroupLock.objects.create(key=held[0].lock_key, queue_id="default", entry_id=held[0].pk)
    free = record.using(queue="emails", expires=PAST).enqueue("free")

    assert Entry.objects.expire_due(limit=2) == 1

    assert not Entry.objects.filter(pk=free.pk).exists()
    assert Entry.objects.filter(group_key="busy").count() == 3


def test_a_retry_due_after_the_expiry_ends_expired_and_says_the_attempts_failed() -> None:
    entry = record.using(expires=PAST).enqueue("retried")
    Entry.objects.filter(pk=entry.pk).update(attempts=2)

    assert Entry.objects.expire_due() == 1

    outcome = RunOutcome.objects.get(entry_id=entry.pk)
    assert (outcome.status, outcome.attempt) == ("expired", 3)
    assert "before its retry (attempt 3) started; 2 earlier attempt(s) had failed" in (
        outcome.traceback
    )
    with pytest.raises(django_iq.JobExpired, match=r"its retry started \(2 attempt"):
        django_iq.wait(entry, timeout=0)
