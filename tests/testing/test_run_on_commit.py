"""``RUN_ON_COMMIT``: entries run in the enqueuing process once its transaction commits, through
``run_jobs``; nothing runs for a rollback; failures leave their error records and retries and
deferred entries stay for a worker."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import TestCase

from django_iq.models import Entry, EntryError, RunOutcome
from tests.conftest import iq_settings_with
from tests.testapp import tasks
from tests.testapp.jobs import always_fails, chain, record, sign_up
from tests.testapp.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


@iq_settings_with(RUN_ON_COMMIT=True)
def test_entries_run_right_after_the_transaction_commits() -> None:
    with transaction.atomic():
        sign_up("ada@example.com")
        record.enqueue("also")
        # Not before the commit: the job must not see what its caller has not committed.
        assert not JobRun.objects.exists()
        assert Entry.objects.count() == 2

    assert set(JobRun.objects.values_list("token", flat=True)) == {
        "welcome:ada@example.com",
        "also",
    }
    assert not Entry.objects.exists()
    assert RunOutcome.objects.filter(status="succeeded", worker_name="inline").count() == 2


@iq_settings_with(RUN_ON_COMMIT=True)
def test_an_enqueue_outside_a_transaction_runs_at_once() -> None:
    record.enqueue("autocommit")

    assert JobRun.objects.filter(token="autocommit").exists()
    assert not Entry.objects.exists()


@iq_settings_with(RUN_ON_COMMIT=True)
def test_nothing_runs_when_the_transaction_rolls_back() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        record.enqueue("undone")
        raise RuntimeError("roll back")

    assert not JobRun.objects.exists() and not Entry.objects.exists()


@iq_settings_with(RUN_ON_COMMIT=True, BACKOFF_BASE_SECONDS=3600, BACKOFF_MAX_SECONDS=3600)
def test_a_failure_is_recorded_and_its_retry_waits_for_a_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with transaction.atomic():
        entry = always_fails.enqueue("broken")

    error = EntryError.objects.get(entry_id=entry.pk)
    assert (error.message, error.is_final, error.worker_name) == ("broken", False, "inline")
    waiting = Entry.objects.get(pk=entry.pk)
    assert (waiting.state, waiting.attempts) == ("initial", 1)
    assert any(
        line.levelno == logging.WARNING and "job raised" in line.getMessage()
        for line in caplog.records
    )


@iq_settings_with(RUN_ON_COMMIT=True)
def test_deferred_entries_stay_for_a_worker() -> None:
    entry = record.using(run_at=timedelta(hours=1)).enqueue("later")

    assert Entry.objects.get().pk == entry.pk and Entry.objects.get().state == "initial"
    assert not JobRun.objects.exists()


@iq_settings_with(RUN_ON_COMMIT=True)
def test_entries_the_jobs_enqueue_run_in_the_same_pass() -> None:
    with transaction.atomic():
        chain.enqueue("c", 2)

    assert sorted(JobRun.objects.values_list("token", flat=True)) == ["c:0", "c:1", "c:2"]


@iq_settings_with(RUN_ON_COMMIT=True)
def test_a_django_task_runs_after_commit() -> None:
    with transaction.atomic():
        result = tasks.add.enqueue(4, 5)

    result.refresh()
    assert result.return_value == 9


def test_without_the_setting_nothing_runs() -> None:
    with transaction.atomic():
        record.enqueue("waits")

    assert Entry.objects.get().state == "pending"
    assert not JobRun.objects.exists()


class RunOnCommitInTestCaseTests(TestCase):
    @iq_settings_with(RUN_ON_COMMIT=True)
    def test_captured_on_commit_callbacks_run_the_entries(self) -> None:
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            record.enqueue("one")
            record.enqueue("two")

        self.assertEqual(len(callbacks), 1)  # one run per transaction, however many entries
        self.assertEqual(set(JobRun.objects.values_list("token", flat=True)), {"one", "two"})
