"""Job timeouts, run by a real worker on the test database: ``JobTimeout`` raised at the
deadline, retried per policy (docs/howto/timeouts.md). A job blocked in C past the grace period
makes its process exit at once: tests/concurrency/test_timeouts_any_database.py and
test_stuck_runs_processes.py run that case in worker processes of their own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.test import override_settings

from django_iq import job
from django_iq.exceptions import InvalidJobOptions, JobTimeout
from django_iq.models import Entry, EntryError, GroupLock
from django_iq.worker import WorkerProcess
from tests.factories import attempt_errors
from tests.testapp.jobs import (
    catches_exceptions,
    overruns,
    overruns_async,
    record,
    wait_for_file,
)
from tests.testapp.models import JobRun, RecordedRun

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = "django_iq.exceptions.JobTimeout"


def errors(job_name: str) -> list[tuple[int, str, bool]]:
    return attempt_errors(job_name=job_name)


def test_a_job_past_its_timeout_fails_with_job_timeout_and_is_retried_while_others_flow() -> None:
    overruns.enqueue("slow", 30)
    tokens = [f"quick-{n}" for n in range(20)]
    for token in tokens:
        record.enqueue(token)
    started = time.monotonic()

    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0

    assert time.monotonic() - started < 10, "a 30 s job was cut at 0.3 s, twice"
    assert errors(overruns.name) == [(1, TIMEOUT, False), (2, TIMEOUT, True)]
    runs = list(RecordedRun.objects.filter(token="slow").values_list("started_at", "finished_at"))
    assert len(runs) == 2 and all(finished is None for _, finished in runs), "cut, not finished"
    message = EntryError.objects.filter(job_name=overruns.name).first().message  # type: ignore[union-attr]
    assert "ran past its timeout of 0.3 s" in message
    assert set(JobRun.objects.values_list("token", flat=True)) == set(tokens)
    assert not Entry.objects.exists() and not GroupLock.objects.exists()


def test_using_timeout_overrides_the_jobs_and_is_stored_with_the_entry() -> None:
    entry = overruns.using(timeout=60).enqueue("patient", 0.6)
    assert entry.timeout_seconds == 60.0
    assert overruns.enqueue("x", 0).timeout_seconds == 0.3
    assert record.enqueue("y").timeout_seconds is None

    Entry.objects.exclude(pk=entry.pk).delete()
    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0

    assert not EntryError.objects.exists(), "0.6 s is within the 60 s given with using()"
    assert RecordedRun.objects.get(token="patient").finished_at is not None


@override_settings(DJANGO_IQ={"DEFAULT_TIMEOUT_SECONDS": 0.3})
def test_default_timeout_seconds_applies_to_jobs_without_one(tmp_path: Path) -> None:
    record.enqueue("default-timeout")
    # A job without a timeout of its own, polling for a file that never comes.
    wait_for_file.using(max_attempts=1).enqueue("too-slow", str(tmp_path / "never"), 30.0)

    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0

    assert errors(wait_for_file.name) == [(1, TIMEOUT, True)]
    assert JobRun.objects.filter(token="default-timeout").exists()


def test_a_coroutine_past_its_timeout_is_cancelled_with_job_timeout() -> None:
    overruns_async.enqueue("async", 30)
    started = time.monotonic()

    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0

    assert time.monotonic() - started < 10
    assert errors(overruns_async.name) == [(1, TIMEOUT, True)]


@pytest.mark.parametrize("bad", [0, -1, True, "30", float("nan"), float("inf"), 400 * 86_400])
def test_bad_timeouts_are_refused_at_the_boundary_and_write_nothing(bad: object) -> None:
    with pytest.raises(InvalidJobOptions, match="timeout"):
        record.using(timeout=bad).enqueue("never")
    with pytest.raises(InvalidJobOptions, match="timeout"):
        job(timeout=bad)
    assert not Entry.objects.exists()


def test_job_timeout_goes_through_a_jobs_except_exception() -> None:
    catches_exceptions.enqueue(30)

    assert WorkerProcess(burst=True, processing_threads=1).run(install_signal_handlers=False) == 0

    assert errors(catches_exceptions.name) == [(1, TIMEOUT, True)]
    assert not issubclass(JobTimeout, Exception)
