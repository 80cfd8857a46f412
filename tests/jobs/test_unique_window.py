"""Unique jobs with a window: ``unique_for`` keeps a key taken for that long after the entry
holding it finished (docs/howto/unique-jobs.md). Windows are ended by writing their end in the
past, not by waiting, except in the one test that checks a short window ends by itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_iq import job
from django_iq.duties import PruningDuty
from django_iq.exceptions import InvalidJobOptions
from django_iq.leader import Leader
from django_iq.managers import Success
from django_iq.models import Entry, UniqueKey
from django_iq.options import JobOptions
from django_iq.worker import WorkerProcess
from tests.conftest import concurrently, wait_until
from tests.factories import complete
from tests.testapp.jobs import gives_up, record, refresh_account

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = timedelta(hours=1)


def end_window(key: str) -> None:
    """Move ``key``'s window into the past, as if its time had passed."""
    UniqueKey.objects.filter(key=key).update(expires_at=timezone.now() - HOUR)


def run_worker() -> None:
    WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False)


def fail(entry: Entry, *, final: bool) -> None:
    Entry.objects.fail(
        entry,
        None,
        exception_class="builtins.RuntimeError",
        message="boom",
        traceback="",
        retry_at=None if final else timezone.now() + HOUR,
    )


def test_inside_the_window_after_a_success_an_enqueue_writes_nothing() -> None:
    first = record.using(unique_key="report", unique_for=timedelta(minutes=10)).enqueue("a")
    run_worker()

    again = record.using(unique_key="report", unique_for=600).enqueue("b")

    assert not first.is_duplicate and again.is_duplicate
    assert again.pk is None, "the entry that held the key is gone: an unsaved entry comes back"
    assert (again.job_name, again.args, again.unique_key) == (record.name, ["b"], "report")
    assert not Entry.objects.exists()
    window = UniqueKey.objects.get(key="report")
    assert window.window == timedelta(minutes=10), "the window of the enqueue that took the key"
    starts_in = window.expires_at - UniqueKey.objects.annotate(now=Now()).get().now
    assert timedelta(minutes=9) < starts_in <= timedelta(minutes=10)


# (group key, finish): a success of an ungrouped entry takes PostgreSQL's one statement, that of
# a group's entry mid-claim (no lock to delete) the ORM's transaction, as elsewhere.
FINISHES: dict[str, tuple[str | None, Callable[[Entry], Any]]] = {
    "success in one statement": (None, lambda entry: complete(entry, None)),
    "success in a transaction": ("g", lambda entry: complete(entry, None)),
    "final failure": (None, lambda entry: fail(entry, final=True)),
}


@pytest.mark.parametrize(("group_key", "finish"), FINISHES.values(), ids=FINISHES.keys())
def test_the_window_starts_when_the_entry_finishes(
    group_key: str | None, finish: Callable[[Entry], Any]
) -> None:
    entry = record.using(unique_key="k", unique_for=HOUR, group_key=group_key).enqueue("a")
    assert UniqueKey.objects.get(key="k").expires_at is None, "taken while the entry exists"

    finish(entry)

    assert not Entry.objects.exists()
    assert UniqueKey.objects.get(key="k").expires_at > timezone.now() + HOUR / 2
    later = record.using(unique_key="k", unique_for=HOUR).enqueue("b")
    assert later.is_duplicate and later.pk is None and not Entry.objects.exists()


def test_the_window_starts_after_a_job_fails_for_good_in_a_worker() -> None:
    gives_up.using(unique_key="account:9", unique_for=HOUR).enqueue("account:9")
    run_worker()

    again = gives_up.using(unique_key="account:9", unique_for=HOUR).enqueue("account:9")

    assert again.is_duplicate and again.pk is None and not Entry.objects.exists()


def test_a_failed_attempt_that_will_be_retried_keeps_the_entry_holding_the_key() -> None:
    entry = record.using(unique_key="k", unique_for=HOUR).enqueue("a")
    fail(entry, final=False)

    again = record.using(unique_key="k", unique_for=HOUR).enqueue("b")

    assert again.is_duplicate and again.pk == entry.pk and again.args == ["a"]
    assert UniqueKey.objects.get(key="k").expires_at is None


def test_after_the_window_the_next_enqueue_writes_a_new_entry() -> None:
    record.using(unique_key="k", unique_for=HOUR).enqueue("a")
    run_worker()
    end_window("k")

    later = record.using(unique_key="k", unique_for=timedelta(minutes=5)).enqueue("b")

    assert not later.is_duplicate and Entry.objects.get().args == ["b"]
    key = UniqueKey.objects.get(key="k")
    assert key.expires_at is None and key.window == timedelta(minutes=5)


def test_a_short_window_ends_by_itself() -> None:
    record.using(unique_key="k", unique_for=0.5).enqueue("a")
    run_worker()
    assert record.using(unique_key="k", unique_for=0.5).enqueue("b").is_duplicate

    later = wait_until(
        lambda: (e := record.using(unique_key="k", unique_for=0.5).enqueue("c")).pk and e,
        timeout=10,
        message="the window of half a second to end",
    )

    assert isinstance(later, Entry) and not later.is_duplicate
    assert Entry.objects.get().args == ["c"]


def test_a_cancelled_entry_frees_its_key_without_a_window() -> None:
    entry = record.using(unique_key="k", unique_for=HOUR).enqueue("a")
    assert Entry.objects.cancel([entry.pk]) == (1, 0)

    later = record.using(unique_key="k", unique_for=HOUR).enqueue("b")

    assert not later.is_duplicate and Entry.objects.get().args == ["b"]


def test_enqueue_many_with_a_window_keeps_one_entry_per_key() -> None:
    windowed = refresh_account.using(unique_for=HOUR)

    entries = windowed.enqueue_many([((7,), {}), ((8,), {}), ((7,), {})])

    assert [e.is_duplicate for e in entries] == [False, False, True]
    assert entries[2].pk == entries[0].pk and Entry.objects.count() == 2
    assert UniqueKey.objects.count() == 2


def test_a_unique_key_without_a_window_writes_no_key_row_and_finishes_without_one() -> None:
    entry = record.using(unique_key="plain").enqueue("a")
    complete(entry, None)

    assert not UniqueKey.objects.exists()
    assert record.using(unique_key="plain").enqueue("b").pk is not None


def test_a_batch_of_successes_without_unique_keys_does_not_touch_the_key_table() -> None:
    entries = record.enqueue_many([(("a",), {}), (("b",), {})])
    with CaptureQueriesContext(connection) as queries:
        Entry.objects.complete_many([Success(entry, None) for entry in entries])

    table = UniqueKey._meta.db_table
    assert not [q["sql"] for q in queries.captured_queries if table in q["sql"]]


def test_fifty_concurrent_enqueues_inside_a_window_write_nothing() -> None:
    record.using(unique_key="race", unique_for=HOUR).enqueue("first")
    run_worker()

    entries = concurrently(lambda: record.using(unique_key="race", unique_for=HOUR).enqueue("x"))

    assert [(e.pk, e.is_duplicate) for e in entries] == [(None, True)] * 50
    assert not Entry.objects.exists()


def test_fifty_concurrent_enqueues_after_a_window_make_exactly_one_entry() -> None:
    record.using(unique_key="race", unique_for=HOUR).enqueue("first")
    run_worker()
    end_window("race")

    entries = concurrently(lambda: record.using(unique_key="race", unique_for=HOUR).enqueue("x"))

    (entry,) = Entry.objects.filter(unique_key="race")
    assert {e.pk for e in entries} == {entry.pk}
    assert sorted(e.is_duplicate for e in entries) == [False] + [True] * 49


def test_enqueues_racing_the_finish_of_the_entry_holding_the_key_write_nothing() -> None:
    entry = record.using(unique_key="race", unique_for=HOUR).enqueue("first")

    def finish_slowly() -> None:
        with transaction.atomic():
            complete(entry, None)
            # Held open so that the enqueues find no window yet and wait on the entry's key.
            time.sleep(0.3)

    entries = concurrently(
        lambda: record.using(unique_key="race", unique_for=HOUR).enqueue("x"),
        also=finish_slowly,
    )

    assert not Entry.objects.exists(), "an enqueue slipped in between the finish and its window"
    assert {e.pk for e in entries} <= {entry.pk, None}
    assert all(e.is_duplicate for e in entries)
    assert UniqueKey.objects.get(key="race").expires_at is not None


def test_pruning_deletes_the_keys_whose_window_has_passed() -> None:
    for key in ("passed", "running", "held"):
        record.using(unique_key=key, unique_for=HOUR).enqueue(key)
    Entry.objects.filter(unique_key__in=["passed", "running"]).delete()
    UniqueKey.objects.filter(key="running").update(expires_at=timezone.now() + HOUR)
    end_window("passed")
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(timezone.now()).ran["pruning"]

    assert result.unique_keys == 1
    assert set(UniqueKey.objects.values_list("key", flat=True)) == {"running", "held"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": 0}, "unique_for must be a timedelta or a number of seconds, more than 0"),
        ({"unique_for": -5}, "more than 0 and at most 31,536,000 \\(a year\\), got -5"),
        ({"unique_for": timedelta(0)}, "more than 0"),
        ({"unique_for": timedelta(days=366)}, "at most 31,536,000"),
        ({"unique_for": float("inf")}, "got inf"),
        ({"unique_for": float("nan")}, "got nan"),
        ({"unique_for": 10**400}, "more than 0"),
        ({"unique_for": 1e-9}, "a microsecond or more"),
        ({"unique_for": True}, "got bool True"),
        ({"unique_for": "60"}, "got str '60'"),
    ],
)
def test_a_bad_window_is_refused_and_nothing_is_written(options: dict, message: str) -> None:
    with pytest.raises(InvalidJobOptions, match=message):
        record.using(unique_key="k", **options).enqueue("x")
    assert not Entry.objects.exists() and not UniqueKey.objects.exists()


def test_a_window_without_a_key_is_refused() -> None:
    with pytest.raises(InvalidJobOptions, match="unique_for needs a unique key"):
        record.using(unique_for=60).enqueue("x")
    with pytest.raises(InvalidJobOptions, match="pass unique=True to @job"):
        job(unique_for=60)
    assert not Entry.objects.exists() and not UniqueKey.objects.exists()


def test_a_window_is_taken_as_a_timedelta_or_seconds() -> None:
    assert JobOptions(unique=True, unique_for=90).unique_for == timedelta(seconds=90)
    assert record.using(unique_key="k", unique_for=1.5).options.unique_for == timedelta(seconds=1.5)
