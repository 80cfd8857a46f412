"""``django_iq.set_progress()`` and ``django_iq.progress()`` through the testing helpers: bad
reports refused with nothing written, the last report kept, reports bounded to one write per
interval. Real worker processes: tests/concurrency/test_progress_processes.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.test import override_settings
from django.utils import timezone

import django_iq
from django_iq.context import HeldProgress, running
from django_iq.models import Entry
from django_iq.progress_reports import Progress, flush_held
from django_iq.testing import run_jobs
from tests.conftest import held_in_another_session
from tests.testapp.jobs import (
    BAD_PROGRESS,
    bad_progress,
    progress_async,
    progress_in_a_loop,
    progress_then_retry,
    reports_and_returns,
    returns_after,
)

pytestmark = pytest.mark.django_db


@contextmanager
def progress_writes() -> Iterator[list[tuple[float, ...]]]:
    """Collect the parameters of each progress ``UPDATE`` this thread's connection sends."""
    writes: list[tuple[float, ...]] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if sql.lstrip().upper().startswith("UPDATE") and "progress_done" in sql:
            writes.append(tuple(params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield writes


def test_progress_is_none_before_the_first_report() -> None:
    entry = returns_after.enqueue(1)

    assert django_iq.progress(entry) is None
    assert django_iq.progress(entry.pk) is None


def test_the_last_report_of_a_run_is_read_back_while_the_entry_is_there() -> None:
    entry = progress_then_retry.enqueue(3)

    [outcome] = run_jobs()

    assert outcome.status == "retrying", "the job fails its attempt so that the entry stays"
    report = django_iq.progress(entry)
    assert report is not None
    assert (report.done, report.total, report.note) == (3.0, 3.0, "step 3")
    assert report.percent == 100.0
    assert str(report) == "3 of 3 (100%) — step 3"
    assert report.reported_at <= Entry.objects.get(pk=entry.pk).run_at


def test_a_run_inside_a_transaction_writes_only_its_last_report_as_it_ends() -> None:
    """The test's transaction is the job's: every report is held, and the last written once."""
    entry = progress_then_retry.enqueue(5)

    with progress_writes() as writes:
        run_jobs()

    assert len(writes) == 1, writes
    assert (writes[0][0], writes[0][1], writes[0][2]) == (5.0, 5.0, "step 5")
    assert django_iq.progress(entry).done == 5.0  # type: ignore[union-attr]


def test_an_entry_that_ended_has_no_progress_and_an_unknown_id_is_not_found() -> None:
    ended = returns_after.enqueue(1)
    run_jobs()

    assert django_iq.progress(ended) is None
    with pytest.raises(django_iq.EntryNotFound, match="987654321"):
        django_iq.progress(987654321)


@pytest.mark.parametrize("bad", ["12", 0, -1, None, 1.5, True], ids=repr)
def test_what_is_not_an_entry_or_an_id_is_refused(bad: object) -> None:
    with pytest.raises(django_iq.InvalidArgument, match="not an entry or an entry id"):
        django_iq.progress(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", sorted(BAD_PROGRESS))
def test_a_bad_report_raises_invalid_argument_and_writes_nothing(kind: str) -> None:
    entry = bad_progress.enqueue(kind)

    [outcome] = run_jobs()

    assert isinstance(outcome.exception, django_iq.InvalidArgument), outcome
    assert "set_progress()" in str(outcome.exception)
    report = django_iq.progress(entry)
    assert report is not None
    assert (report.done, report.total, report.note) == (1.0, 10.0, "good"), (
        "the good report before the bad one is the one kept"
    )


def test_set_progress_outside_a_job_raises_not_in_job() -> None:
    entry = returns_after.enqueue(1)

    with pytest.raises(django_iq.NotInJob, match="outside a job"):
        django_iq.set_progress(1, 2)

    assert issubclass(django_iq.NotInJob, RuntimeError)
    assert django_iq.progress(entry) is None


@pytest.mark.django_db(transaction=True)
@override_settings(DJANGO_IQ={**settings.DJANGO_IQ, "PROGRESS_INTERVAL_SECONDS": 0.2})
def test_a_thousand_reports_write_about_once_per_interval_and_the_last_one_is_kept() -> None:
    """Counted honestly: ``run_jobs`` runs the job in this thread, on this connection, so every
    progress ``UPDATE`` the run sends goes through the execute wrapper (outside a transaction,
    as a worker's job runs: reports are written as they come, at most once per interval). Runs
    of 1,000 reports over about a second may write at most ``duration / interval`` times (the
    interval counted from the run's start), plus the last one written as the run ends."""
    entry = progress_in_a_loop.enqueue(1000, 0.001)

    started = time.monotonic()
    with progress_writes() as writes:
        run_jobs()
    duration = time.monotonic() - started

    assert 2 <= len(writes) <= duration / 0.2 + 1, (len(writes), duration)
    assert writes[0][0] > 1.0, "the first write comes an interval after the run's start"
    assert writes[-1][0] == 1000.0, "the last report is written as the run ends"
    assert django_iq.progress(entry).done == 1000.0  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
@override_settings(DJANGO_IQ={**settings.DJANGO_IQ, "PROGRESS_INTERVAL_SECONDS": 0.2})
def test_reports_in_a_tight_loop_write_once_as_the_run_ends() -> None:
    """1,000 reports in well under an interval from the run's start: only the last is
    written, as the run ends (before its failure is written)."""
    entry = progress_in_a_loop.enqueue(1000, 0)

    with progress_writes() as writes:
        run_jobs()

    assert [w[0] for w in writes] == [1000.0]
    assert django_iq.progress(entry).done == 1000.0  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
def test_a_job_that_never_reports_writes_no_progress() -> None:
    entry = returns_after.enqueue(1)

    with progress_writes() as writes:
        [outcome] = run_jobs()

    assert outcome.succeeded and writes == []
    assert not Entry.objects.filter(pk=entry.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_retry_keeps_the_last_attempts_report_until_it_reports_again() -> None:
    entry = progress_then_retry.enqueue(4)
    run_jobs()
    first = django_iq.progress(entry)
    assert first is not None and first.done == 4.0

    run_jobs(now=timezone.now() + timedelta(minutes=2), limit=1)  # its retry, due in a minute

    second = django_iq.progress(entry)
    assert second is not None and second.done == 4.0
    assert second.reported_at > first.reported_at, "the new attempt's report replaced it"


@pytest.mark.django_db(transaction=True)
def test_a_coroutine_job_reports_progress_written_as_its_run_ends() -> None:
    """Its event loop may not run the ORM: its reports are held, and the last one written by
    the run's thread as the run ends."""
    entry = progress_async.enqueue(3)

    with progress_writes() as writes:
        [outcome] = run_jobs()

    assert outcome.status == "retrying", outcome
    assert [w[0] for w in writes] == [3.0]
    report = django_iq.progress(entry)
    assert report is not None and (report.done, report.note) == (3.0, "async step 3")


@pytest.mark.django_db(transaction=True)
@override_settings(DJANGO_IQ={**settings.DJANGO_IQ, "PROGRESS_INTERVAL_SECONDS": 0.2})
def test_a_report_the_database_refuses_is_kept_and_written_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database refuses the first progress ``UPDATE`` (an execute wrapper raising, as a
    dropped connection would), the third report's, an interval after the run's start: the job
    goes on, its attempt counts as the interval's write (the database is not asked again at
    the next report), and the report held then is written as the run ends."""
    entry = progress_in_a_loop.enqueue(3, 0.15)
    tried: list[float] = []

    def refuse_first(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if sql.lstrip().upper().startswith("UPDATE") and "progress_done" in sql:
            tried.append(params[0])
            if len(tried) == 1:
                raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_first):
        [outcome] = run_jobs()

    assert outcome.status == "retrying" and isinstance(outcome.exception, django_iq.RetryAfter)
    assert tried == [3.0, 3.0]
    assert "could not write progress" in caplog.text
    assert django_iq.progress(entry).done == 3.0  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
def test_a_short_run_that_succeeds_writes_no_progress() -> None:
    """Its reports came within the interval from its start, and its entry goes with its
    success: nothing is written for it."""
    reports_and_returns.enqueue(100)

    with progress_writes() as writes:
        [outcome] = run_jobs()

    assert outcome.succeeded and outcome.return_value == 100
    assert writes == []


def a_run_holding(entry: Entry) -> HeldProgress:
    held = HeldProgress(entry.pk, None, entry.job_name)
    held.held = Progress(1.0, 2.0, "held", timezone.now())
    return held


@pytest.mark.django_db(transaction=True)
def test_the_heartbeats_flush_never_waits_for_a_write_under_way() -> None:
    entry = returns_after.enqueue(1)
    held = a_run_holding(entry)

    with running(entry, "worker", None, held):
        with held.write_lock:  # the job's own write of its report, under way
            started = time.monotonic()
            assert flush_held() == 0
            assert time.monotonic() - started < 0.5, "skipped, not waited for"
        assert flush_held() == 1

    assert django_iq.progress(entry).note == "held"  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
def test_the_heartbeats_flush_skips_an_entry_row_another_transaction_holds(vendor: str) -> None:
    if vendor == "sqlite":
        pytest.skip("SQLite has no row locks: a writer waits for the file")
    entry = returns_after.enqueue(1)
    held = a_run_holding(entry)

    with held_in_another_session(lambda: Entry.objects.select_for_update().get(pk=entry.pk)) as end:
        with running(entry, "worker", None, held):
            started = time.monotonic()
            assert flush_held() == 0
            assert time.monotonic() - started < 0.5, "skipped, not waited for"
            assert held.held is not None, "still held, for the next heartbeat"
            end()
            assert flush_held() == 1

    assert django_iq.progress(entry).note == "held"  # type: ignore[union-attr]
