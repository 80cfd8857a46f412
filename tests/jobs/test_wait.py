"""``django_iq.wait()`` and ``as_completed()`` (and their async twins) through the testing
helpers: entries run by ``run_jobs`` are waited for in the test's own transaction, which is how a
test asserts on results. Real worker processes: tests/concurrency/test_waiting_processes.py."""

from __future__ import annotations

import math

import pytest

import django_iq
from django_iq.models import Entry, EntryError, RunOutcome
from django_iq.testing import run_jobs
from tests.conftest import run_async
from tests.testapp.jobs import returns_after, unrecorded, waits_for

pytestmark = pytest.mark.django_db


def test_wait_returns_the_return_value_of_an_entry_or_its_id() -> None:
    entry = returns_after.enqueue({"total": 3})
    run_jobs()

    assert django_iq.wait(entry) == {"total": 3}
    assert django_iq.wait(entry.pk, timeout=0) == {"total": 3}


def test_wait_raises_job_failed_naming_the_exception_and_its_message() -> None:
    entry = returns_after.enqueue(None, fail="no such account")
    run_jobs()

    with pytest.raises(django_iq.JobFailed) as caught:
        django_iq.wait(entry)

    assert caught.value.exception_class == "builtins.ValueError"
    assert caught.value.message == "no such account"
    assert caught.value.entry_id == entry.pk
    assert "ValueError: no such account" in str(caught.value)
    assert returns_after.name in str(caught.value)


def test_wait_raises_job_cancelled_for_an_entry_cancelled_while_it_waited() -> None:
    entry = returns_after.enqueue(1)
    assert Entry.objects.cancel([entry.pk]) == (1, 0)

    with pytest.raises(django_iq.JobCancelled) as caught:
        django_iq.wait(entry, timeout=1)

    assert caught.value.entry_id == entry.pk
    assert not isinstance(caught.value, Exception), "like asyncio.CancelledError"


def test_a_wait_that_times_out_raises_a_timeout_error_naming_the_entry() -> None:
    entry = returns_after.enqueue(1)

    with pytest.raises(django_iq.WaitTimeout) as caught:
        django_iq.wait(entry, timeout=0.05)

    assert isinstance(caught.value, TimeoutError)
    assert caught.value.entry_ids == [entry.pk]
    assert Entry.objects.filter(pk=entry.pk).exists(), "the entry is left to run"


def test_as_completed_yields_each_outcome_in_the_order_the_entries_ended() -> None:
    first = returns_after.enqueue("a")
    second = returns_after.enqueue(None, fail="b failed")
    third = returns_after.enqueue("c")
    run_jobs()
    cancelled = returns_after.enqueue("d")
    Entry.objects.cancel([cancelled.pk])

    outcomes = list(django_iq.as_completed([third, first.pk, cancelled, second], timeout=1))

    assert [(o.entry_id, o.status) for o in outcomes] == [
        (first.pk, "succeeded"),
        (second.pk, "failed"),
        (third.pk, "succeeded"),
        (cancelled.pk, "cancelled"),
    ]
    assert [o.return_value for o in outcomes] == ["a", None, "c", None]
    assert (
        outcomes[1].message == "b failed" and outcomes[1].exception_class == "builtins.ValueError"
    )
    assert all(o.attempt == 1 for o in outcomes[:3])


def test_as_completed_yields_the_ended_and_then_times_out_on_the_rest() -> None:
    done = returns_after.enqueue("done")
    run_jobs()
    waiting = returns_after.enqueue("waiting")

    seen = []
    with pytest.raises(django_iq.WaitTimeout) as caught:
        for outcome in django_iq.as_completed([done, waiting], timeout=0.05):
            seen.append(outcome.entry_id)

    assert seen == [done.pk]
    assert caught.value.entry_ids == [waiting.pk]


@pytest.mark.django_db(transaction=True)
def test_the_async_twins_wait_without_blocking_and_give_the_same_answers() -> None:
    ok = returns_after.enqueue([1, 2])
    bad = returns_after.enqueue(None, fail="nope")
    run_jobs()

    async def both() -> tuple[object, list[str]]:
        value = await django_iq.await_(ok, timeout=1)
        statuses = [o.status async for o in django_iq.aas_completed([ok, bad])]
        return value, statuses

    assert run_async(both) == ([1, 2], ["succeeded", "failed"])
    with pytest.raises(django_iq.JobFailed):
        run_async(django_iq.await_, bad)
    with pytest.raises(django_iq.WaitTimeout):
        run_async(django_iq.await_, returns_after.enqueue(0), timeout=0.05)


def test_a_job_waiting_for_an_entry_of_its_own_queue_is_refused() -> None:
    other = returns_after.enqueue("x")
    waiter = waits_for.enqueue(other.pk)

    (run,) = run_jobs(job=waits_for)

    assert run.status == "failed"
    error = EntryError.objects.get(entry_id=waiter.pk)
    assert error.exception_class == "django_iq.exceptions.WaitRefused"
    assert "of its own queue 'default'" in error.message
    assert not Entry.objects.get(pk=other.pk).awaited, "refused before anything was written"


def test_a_job_may_wait_for_an_entry_of_another_queue() -> None:
    other = returns_after.using(queue="emails").enqueue("from emails")
    run_jobs(job=returns_after)
    waiter = waits_for.enqueue(other.pk)

    (run,) = run_jobs(job=waits_for)

    assert run.status == "succeeded" and run.return_value == "from emails"
    assert django_iq.wait(waiter) == "from emails"


def test_an_unknown_id_raises_entry_not_found() -> None:
    known = returns_after.enqueue(1)
    run_jobs()

    with pytest.raises(django_iq.EntryNotFound) as caught:
        list(django_iq.as_completed([known, 987654321], timeout=1))

    assert caught.value.entry_ids == [987654321]
    assert isinstance(caught.value, LookupError)


def test_entries_of_a_job_that_keeps_no_outcomes_are_refused() -> None:
    entry = unrecorded.enqueue("t")

    with pytest.raises(django_iq.InvalidArgument, match="keep_outcomes=False"):
        django_iq.wait(entry, timeout=1)


@pytest.mark.parametrize("timeout", [-1, math.nan, math.inf, -math.inf, "5", True], ids=repr)
def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused(timeout: object) -> None:
    entry = returns_after.enqueue(1)

    with pytest.raises(django_iq.InvalidArgument, match="timeout"):
        django_iq.wait(entry, timeout=timeout)  # type: ignore[arg-type]

    assert not Entry.objects.get(pk=entry.pk).awaited, "nothing written"


@pytest.mark.parametrize("entries", [[0], [-3], ["12"], [1.5], [True], [None], "12", 12], ids=repr)
def test_what_is_not_an_entry_or_an_id_is_refused(entries: object) -> None:
    with pytest.raises(django_iq.InvalidArgument):
        list(django_iq.as_completed(entries, timeout=0))  # type: ignore[arg-type]


def test_an_unsaved_entry_is_refused() -> None:
    with pytest.raises(django_iq.InvalidArgument, match="never saved"):
        django_iq.wait(Entry(job_name=returns_after.name), timeout=0)


def test_outcome_records_are_found_by_entry_id_through_an_index() -> None:
    entry = returns_after.enqueue("indexed")
    run_jobs()

    assert RunOutcome.objects.filter(entry_id=entry.pk).count() == 1
    indexes = {index.name for index in RunOutcome._meta.indexes}
    assert "iq_outcome_entry_idx" in indexes
