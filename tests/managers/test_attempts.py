"""How attempts end, against the real database: a success deletes the entry and its lock, a
failure retries or ends with a final error record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from tests.conftest import iq_settings_with
from tests.factories import (
    EntryFactory,
    WorkerFactory,
    complete,
)
from tests.managers.conftest import claim_one
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db


def fail(entry: Entry, lock_id: int | None, **overrides: Any) -> EntryError:
    options: dict[str, Any] = {
        "exception_class": "builtins.ValueError",
        "message": "boom",
        "traceback": "Traceback (most recent call last):\nValueError: boom\n",
        "retry_at": timezone.now() + timedelta(minutes=1),
        "worker_name": "host:1",
    }
    options.update(overrides)
    return Entry.objects.fail(entry, lock_id, **options)


# -- complete ---------------------------------------------------------------------------------


def test_complete_deletes_the_entry_and_its_lock() -> None:
    EntryFactory()
    claim = claim_one(WorkerFactory())

    assert complete(claim.entries[0], claim.lock_id) is True

    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()


def test_complete_without_a_lock_id_keeps_the_lock_for_the_rest_of_the_claim() -> None:
    EntryFactory.create_batch(2, group_key="g")
    claim = claim_one(WorkerFactory())

    assert complete(claim.entries[0], None) is True

    assert list(Entry.objects.values_list("pk", flat=True)) == [claim.entries[1].pk]
    assert GroupLock.objects.filter(pk=claim.lock_id).exists()


def test_complete_reports_a_lock_that_recovery_already_released() -> None:
    EntryFactory()
    claim = claim_one(WorkerFactory())
    GroupLock.objects.release([claim.lock_id])

    assert complete(claim.entries[0], claim.lock_id) is False
    assert not Entry.objects.exists()


# -- fail -------------------------------------------------------------------------------------


def test_fail_with_attempts_left_defers_the_entry_and_records_an_error() -> None:
    EntryFactory(max_attempts=3, args=["token"], kwargs={"seconds": 1}, priority=4)
    claim = claim_one(WorkerFactory())
    entry = claim.entries[0]
    now = timezone.now()
    retry_at = now + timedelta(seconds=30)

    error = fail(entry, claim.lock_id, retry_at=retry_at, now=now)

    stored = Entry.objects.get(pk=entry.pk)
    assert (stored.state, stored.run_at, stored.attempts) == ("initial", retry_at, 1)
    assert not GroupLock.objects.exists()
    assert EntryError.objects.get() == error
    assert (error.entry_id, error.queue_id, error.job_name) == (entry.pk, "default", entry.job_name)
    assert (error.args, error.kwargs, error.priority) == (["token"], {"seconds": 1}, 4)
    assert (error.attempt, error.max_attempts, error.is_final) == (1, 3, False)
    assert (error.exception_class, error.message) == ("builtins.ValueError", "boom")
    assert error.traceback.endswith("ValueError: boom\n")
    assert (error.worker_name, error.failed_at) == ("host:1", now)


def test_a_retried_entry_counts_each_attempt() -> None:
    EntryFactory(max_attempts=5)
    for attempt in (1, 2, 3):
        Entry.objects.promote_due(timezone.now() + timedelta(minutes=5))
        claim = claim_one(WorkerFactory())
        fail(claim.entries[0], claim.lock_id)
        assert Entry.objects.get().attempts == attempt

    assert list(EntryError.objects.order_by("attempt").values_list("attempt", flat=True)) == [
        1,
        2,
        3,
    ]


def test_the_final_failure_deletes_the_entry_and_keeps_a_final_error() -> None:
    EntryFactory(max_attempts=2, attempts=1)
    claim = claim_one(WorkerFactory())

    error = fail(claim.entries[0], claim.lock_id)

    assert not Entry.objects.exists()
    assert not GroupLock.objects.exists()
    assert (error.attempt, error.is_final) == (2, True)
    assert error.traceback == "Traceback (most recent call last):\nValueError: boom\n"
    assert list(EntryError.objects.failed()) == [error]


def test_a_failure_without_retry_at_is_final_even_with_attempts_left() -> None:
    EntryFactory(max_attempts=10)
    claim = claim_one(WorkerFactory())

    error = fail(claim.entries[0], claim.lock_id, retry_at=None)

    assert error.is_final and not Entry.objects.exists()


def test_an_oversized_traceback_is_truncated_to_the_limit_keeping_its_end() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())
    traceback = "Traceback (most recent call last):\n" + "  frame\n" * 1000 + "ValueError: boom\n"

    with iq_settings_with(TRACEBACK_MAX_CHARS=1000):
        error = fail(claim.entries[0], claim.lock_id, traceback=traceback)

    stored = EntryError.objects.get(pk=error.pk).traceback
    assert len(stored) == 1000
    assert stored.startswith("... (truncated)\n")
    assert stored.endswith("  frame\nValueError: boom\n")


def test_a_traceback_at_the_limit_is_kept_whole() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())
    traceback = "x" * 999 + "\n"

    with iq_settings_with(TRACEBACK_MAX_CHARS=1000):
        error = fail(claim.entries[0], claim.lock_id, traceback=traceback)

    assert EntryError.objects.get(pk=error.pk).traceback == traceback


def test_a_failure_message_with_characters_the_database_rejects_is_still_recorded() -> None:
    EntryFactory(max_attempts=1)
    claim = claim_one(WorkerFactory())

    error = fail(
        claim.entries[0],
        claim.lock_id,
        exception_class="mod.Bad\x00Name\udc80",
        message="bad byte \x00 and \ud800 here",
        traceback="Traceback\nValueError: bad byte \x00\n",
    )

    stored = EntryError.objects.get(pk=error.pk)
    assert stored.exception_class == "mod.Bad\\x00Name\\udc80"
    assert stored.message == "bad byte \\x00 and \\ud800 here"
    assert stored.traceback == "Traceback\nValueError: bad byte \\x00\n"
    assert RunOutcome.objects.get().exception_class == "mod.Bad\\x00Name\\udc80"
    assert not Entry.objects.exists()


def test_an_entry_disabled_while_it_ran_stays_disabled_after_a_failure() -> None:
    EntryFactory(job_name=record.name, max_attempts=3)
    claim = claim_one(WorkerFactory())
    Entry.objects.disable(record.name)

    fail(claim.entries[0], claim.lock_id)

    stored = Entry.objects.get()
    assert (stored.state, stored.attempts) == ("disabled", 1)
