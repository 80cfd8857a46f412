"""Group locks through their manager: release and adopt."""

from __future__ import annotations

from typing import Any

import pytest

from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock, Worker
from tests.factories import (
    EntryFactory,
    GroupLockFactory,
    WorkerFactory,
)
from tests.managers.conftest import claim_one, claimed_ids

pytestmark = pytest.mark.django_db


# -- locks ------------------------------------------------------------------------------------


def test_release_deletes_the_locks_so_their_entries_are_claimable_again() -> None:
    EntryFactory.create_batch(2, group_key="g")
    worker = WorkerFactory()
    claim = claim_one(worker)
    other_lock = GroupLockFactory()

    assert GroupLock.objects.release([claim.lock_id]) == 1

    assert list(GroupLock.objects.all()) == [other_lock]
    again = Entry.objects.claim(worker, 10, "default")
    assert claimed_ids(again) == [e.pk for e in claim.entries]


def test_release_of_nothing_is_a_no_op(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        assert GroupLock.objects.release([]) == 0


def test_adopt_takes_only_locks_that_have_no_worker() -> None:
    EntryFactory.create_batch(3)
    old, new, other = WorkerFactory(), WorkerFactory(), WorkerFactory()
    mine = claim_one_each(old, 2)
    theirs = Entry.objects.claim(other, 1, "default")
    Worker.objects.mark_stopped(Worker.objects.filter(pk=old.pk), died=True)

    taken = GroupLock.objects.adopt([c.lock_id for c in mine + theirs], new)

    assert taken == 2
    assert set(GroupLock.objects.filter(worker=new).values_list("pk", flat=True)) == {
        c.lock_id for c in mine
    }
    assert GroupLock.objects.get(pk=theirs[0].lock_id).worker_id == other.pk


def claim_one_each(worker: Worker, count: int) -> list[Claim]:
    claims = Entry.objects.claim(worker, count, "default")
    assert len(claims) == count
    return claims
