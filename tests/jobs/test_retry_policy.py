"""The retry policy, run by a real worker on the test database: Fail, RetryAfter, Snooze,
retry_on and dont_retry_on (docs/howto/retries.md)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_iq import Fail, RetryAfter, Snooze, job
from django_iq.exceptions import InvalidJobOptions
from django_iq.models import Entry, EntryError
from django_iq.worker import WorkerProcess
from tests.factories import attempt_errors
from tests.testapp.jobs import (
    comes_back,
    gives_up,
    never_retries_values,
    polls,
    retries_connections_only,
)
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> None:
    assert WorkerProcess(burst=True, processing_threads=2).run(install_signal_handlers=False) == 0


def runs(token: str) -> int:
    return JobRun.objects.filter(token__startswith=f"{token}:run").count()


def errors(token: str) -> list[tuple[int, str, bool]]:
    return attempt_errors(message__contains=token)


def test_fail_ends_the_entry_at_once_with_a_final_error_record() -> None:
    gives_up.enqueue("fail-1")

    drain()

    assert runs("fail-1") == 1, "five attempts were allowed; Fail used one"
    assert errors("fail-1") == [(1, "django_iq.exceptions.Fail", True)]
    assert not Entry.objects.exists()


def test_retry_after_retries_at_the_time_asked_and_counts_the_attempt() -> None:
    entry = comes_back.enqueue("later-1", 300)
    before = timezone.now()

    drain()  # the retry is 300 s away, past what --burst waits for

    entry.refresh_from_db()
    assert (entry.state, entry.attempts, runs("later-1")) == ("initial", 1, 1)
    wait = (entry.run_at - before).total_seconds()
    assert 299 <= wait <= 301, f"retry in {wait:.1f} s, not after the job's backoff"
    assert errors("come back later") == [(1, "django_iq.exceptions.RetryAfter", False)]

    Entry.objects.run_now([entry.pk])
    drain()
    assert runs("later-1") == 2 and not Entry.objects.exists()


def test_snooze_puts_the_entry_back_without_an_attempt_or_an_error() -> None:
    polls.enqueue("poll-1", 3)  # max_attempts=1: any counted attempt would end it

    drain()

    assert runs("poll-1") == 4 and JobRun.objects.filter(token="poll-1:run3").exists()
    assert not Entry.objects.exists(), "the fourth run succeeded"
    assert not EntryError.objects.exists(), "a snooze is not a failure"


def test_a_job_that_snoozes_past_its_limit_fails_for_good() -> None:
    polls.enqueue("poll-2", 100)  # max_snoozes=3

    drain()

    assert runs("poll-2") == 4, "three snoozes, then the fourth ends it"
    (error,) = EntryError.objects.all()
    assert (error.exception_class, error.is_final, error.attempt) == (
        "django_iq.exceptions.SnoozeLimitReached",
        True,
        1,
    )
    assert "snoozed 3 times" in error.message and not Entry.objects.exists()


@pytest.mark.parametrize(("error", "attempts"), [("connection", 3), ("other", 1)])
def test_retry_on_retries_only_the_exceptions_it_names(error: str, attempts: int) -> None:
    token = f"only-{error}"
    retries_connections_only.enqueue(token, error)

    drain()

    assert runs(token) == attempts
    assert [final for _, _, final in errors(token)] == [False] * (attempts - 1) + [True]


@pytest.mark.parametrize(("error", "attempts"), [("value", 1), ("runtime", 3)])
def test_dont_retry_on_ends_the_entry_on_the_exceptions_it_names(error: str, attempts: int) -> None:
    token = f"never-{error}"
    never_retries_values.enqueue(token, error)

    drain()

    assert runs(token) == attempts
    assert errors(token)[-1][2] is True and len(errors(token)) == attempts


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_on": "ValueError"}, "retry_on takes exception classes"),
        ({"dont_retry_on": (ValueError, 3)}, "dont_retry_on takes exception classes"),
        ({"max_snoozes": -1}, "max_snoozes must be an integer from 0"),
    ],
)
def test_bad_retry_options_are_refused_at_declaration(options: dict, message: str) -> None:
    with pytest.raises(InvalidJobOptions, match=message):
        job(**options)


@pytest.mark.parametrize(
    "make", [lambda: RetryAfter(-1), lambda: Snooze("soon"), lambda: Snooze(True)]
)
def test_a_bad_delay_is_refused_when_the_exception_is_made(make) -> None:
    with pytest.raises(InvalidJobOptions, match="number of seconds from 0"):
        make()


def test_fail_retry_after_and_snooze_are_importable_from_the_package() -> None:
    import django_iq

    assert (django_iq.Fail, django_iq.RetryAfter, django_iq.Snooze) == (Fail, RetryAfter, Snooze)
