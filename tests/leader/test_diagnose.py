"""duties/recovery.py ``diagnose()``: which locks are stuck, and whether releasing one counts an
attempt of its entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_iq.duties import diagnose
from django_iq.models import GroupLock, Worker
from tests.factories import EntryFactory, GroupLockFactory, WorkerFactory

pytestmark = pytest.mark.django_db

MARGIN = timedelta(seconds=2)


def lock_of(worker: Worker | None, *, taken_ago: float = 0.0) -> GroupLock:
    entry = EntryFactory()
    lock = GroupLockFactory(entry_for_key=entry, worker=worker)
    GroupLock.objects.filter(pk=lock.pk).update(
        locked_at=timezone.now() - timedelta(seconds=taken_ago)
    )
    return GroupLock.objects.select_related("worker").get(pk=lock.pk)


def test_a_live_worker_reporting_the_lock_is_not_stuck() -> None:
    worker = WorkerFactory()
    lock = lock_of(worker, taken_ago=60)
    Worker.objects.filter(pk=worker.pk).update(held_lock_ids=[lock.pk], held_at=timezone.now())

    assert diagnose(GroupLock.objects.select_related("worker").get(pk=lock.pk), MARGIN) is None


def test_a_lock_newer_than_the_last_report_is_not_stuck_yet() -> None:
    worker = WorkerFactory()
    Worker.objects.filter(pk=worker.pk).update(held_lock_ids=[], held_at=timezone.now())
    lock = lock_of(worker, taken_ago=0)

    assert diagnose(lock, MARGIN) is None


def test_a_worker_that_has_not_reported_yet_is_given_the_benefit_of_the_doubt() -> None:
    lock = lock_of(WorkerFactory(), taken_ago=600)

    assert diagnose(lock, MARGIN) is None


def test_a_lock_with_no_worker_is_stuck_and_counts_an_attempt() -> None:
    stuck = diagnose(lock_of(None), MARGIN)

    assert stuck is not None
    assert stuck.counts_attempt is True
    assert "has no worker" in stuck.reason


def test_a_lock_of_a_stopped_worker_is_stuck_and_counts_an_attempt() -> None:
    worker = WorkerFactory(stopped_at=timezone.now())
    stuck = diagnose(lock_of(worker), MARGIN)

    assert stuck is not None
    assert stuck.counts_attempt is True
    assert f"Worker {worker.name} stopped at" in stuck.reason


def test_a_lock_of_a_worker_declared_dead_says_so() -> None:
    worker = WorkerFactory(stopped_at=timezone.now(), died=True)
    stuck = diagnose(lock_of(worker), MARGIN)

    assert stuck is not None
    assert stuck.counts_attempt is True
    assert f"Worker {worker.name} was found dead" in stuck.reason


def test_a_live_worker_that_no_longer_reports_an_old_lock_releases_it_without_an_attempt() -> None:
    worker = WorkerFactory()
    lock = lock_of(worker, taken_ago=60)
    Worker.objects.filter(pk=worker.pk).update(held_lock_ids=[], held_at=timezone.now())
    lock = GroupLock.objects.select_related("worker").get(pk=lock.pk)

    stuck = diagnose(lock, MARGIN)

    assert stuck is not None
    assert stuck.counts_attempt is False
    assert "no longer holds lock" in stuck.reason
