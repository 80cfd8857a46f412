"""Unique jobs: ``using(unique_key=...)`` and ``@job(unique=True)``. While an entry holds a key,
enqueueing another with it returns that entry and writes nothing; the database's unique
constraint decides between concurrent callers (docs/howto/unique-jobs.md)."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from django_iq.exceptions import InvalidJobOptions
from django_iq.models import Entry
from django_iq.worker import WorkerProcess
from tests.conftest import concurrently
from tests.testapp.jobs import record, refresh_account

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_enqueue_with_the_key_returns_the_waiting_entry_and_writes_nothing() -> None:
    first = record.using(unique_key="nightly-report").enqueue("a")
    again = record.using(unique_key="nightly-report").enqueue("b")

    assert not first.is_duplicate and again.is_duplicate
    assert again.pk == first.pk and again.args == ["a"], "the entry that was there"
    assert Entry.objects.count() == 1


def test_unique_jobs_key_on_the_job_and_its_arguments() -> None:
    one = refresh_account.enqueue(7)
    same = refresh_account.enqueue(7)
    same_by_keyword = refresh_account.enqueue(account_id=7)
    other = refresh_account.enqueue(8)
    full = refresh_account.enqueue(7, full=True)

    assert same.is_duplicate and same.pk == one.pk
    assert not same_by_keyword.is_duplicate, "args and kwargs are keyed as stored"
    assert not other.is_duplicate and not full.is_duplicate
    assert Entry.objects.count() == 4
    assert one.unique_key.startswith("u:") and len(one.unique_key) == 66


def test_once_the_entry_has_run_the_key_is_free_again() -> None:
    record.using(unique_key="k").enqueue("first")
    WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False)

    later = record.using(unique_key="k").enqueue("second")

    assert not later.is_duplicate and Entry.objects.get().args == ["second"]


def test_enqueue_many_keeps_one_entry_per_key_and_returns_one_object_per_call() -> None:
    calls = [((7,), {}), ((8,), {}), ((7,), {})]

    entries = refresh_account.enqueue_many(calls)

    assert [e.is_duplicate for e in entries] == [False, False, True]
    assert entries[2].pk == entries[0].pk and Entry.objects.count() == 2


def test_fifty_concurrent_enqueues_with_one_key_make_one_entry() -> None:
    entries = concurrently(lambda: record.using(unique_key="race").enqueue("racer"))

    assert Entry.objects.filter(unique_key="race").count() == 1
    assert {e.pk for e in entries} == {Entry.objects.get(unique_key="race").pk}
    assert sorted(e.is_duplicate for e in entries) == [False] + [True] * 49


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": ""}, "unique_key must be a string of 1 to 200"),
        ({"unique_key": "x" * 201}, "unique_key must be a string of 1 to 200"),
        ({"unique_key": 5}, "unique_key must be a string"),
    ],
)
def test_a_bad_unique_key_is_refused_and_nothing_is_written(options: dict, message: str) -> None:
    with pytest.raises(InvalidJobOptions, match=message):
        record.using(**options).enqueue("x")
    assert not Entry.objects.exists()


def test_unique_must_be_a_bool() -> None:
    from django_iq import job

    with pytest.raises(InvalidJobOptions, match="unique must be True or False"):
        job(unique="yes")


def test_inside_a_transaction_the_entry_committed_meanwhile_is_returned() -> None:
    from django.db import transaction

    if connections["default"].vendor == "sqlite":
        pytest.skip("SQLite serializes writers: no other entry can commit meanwhile")

    def other_caller() -> None:
        try:
            record.using(unique_key="meanwhile").enqueue("theirs")
        finally:
            connections.close_all()

    with transaction.atomic():
        assert not Entry.objects.exists()  # this transaction's snapshot starts here
        thread = threading.Thread(target=other_caller)
        thread.start()
        thread.join(30)
        mine = record.using(unique_key="meanwhile").enqueue("mine")

    assert mine.is_duplicate and mine.args == ["theirs"]
    assert Entry.objects.filter(unique_key="meanwhile").count() == 1
