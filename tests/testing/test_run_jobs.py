"""``run_jobs`` runs entries through the worker's paths in the test's own thread and
connection: inside a ``TestCase``'s transaction, in a ``TransactionTestCase`` and in pytest
tests, with retries, group locks, dependencies, Tasks and unregistered jobs as a worker has
them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import TestCase, TransactionTestCase
from django.utils import timezone

from django_iq import inline_runs
from django_iq.exceptions import JobNotRegistered
from django_iq.models import Entry, EntryError, GroupLock, RunOutcome
from django_iq.tasks_compat import TaskResultStatus
from django_iq.testing import FAILED, RETRYING, SNOOZED, SUCCEEDED, TooManyRuns, run_jobs
from tests.conftest import iq_settings_with
from tests.factories import EntryFactory, GroupLockFactory
from tests.testapp import tasks
from tests.testapp.jobs import always_fails, chain, flaky, polls, record, step
from tests.testapp.models import JobRun, RecordedRun


class RunJobsBehaviour:
    """The same tests under both kinds of Django test case (bound below)."""

    def test_a_success_runs_the_job_removes_the_entry_and_records_the_outcome(self) -> None:
        entry = record.enqueue("one")

        (ran,) = run_jobs()

        assert (ran.entry_id, ran.job_name, ran.status, ran.return_value) == (
            entry.pk,
            "tests.testapp.jobs.record",
            SUCCEEDED,
            "one",
        )
        assert JobRun.objects.filter(token="one").exists()
        assert not Entry.objects.exists() and not GroupLock.objects.exists()
        assert RunOutcome.objects.get(entry_id=entry.pk).status == "succeeded"

    def test_a_failure_leaves_an_error_record_and_waits_for_its_retry(self) -> None:
        entry = flaky.enqueue("f", fail_times=1)

        with iq_settings_with(BACKOFF_BASE_SECONDS=3600, BACKOFF_MAX_SECONDS=3600):
            (ran,) = run_jobs()

        assert ran.status == RETRYING and isinstance(ran.exception, RuntimeError)
        error = EntryError.objects.get(entry_id=entry.pk)
        assert (error, error.is_final, error.attempt) == (ran.error, False, 1)
        waiting = Entry.objects.get(pk=entry.pk)
        assert (waiting.state, waiting.attempts) == ("initial", 1)
        assert waiting.run_at > timezone.now() + timedelta(minutes=30)
        # The retry is deferred: a plain call leaves it; include_deferred runs it at once.
        assert run_jobs() == []
        (retried,) = run_jobs(include_deferred=True)
        assert (retried.status, retried.attempt, retried.return_value) == (SUCCEEDED, 2, "f")
        assert not Entry.objects.exists()

    def test_a_failure_with_no_attempt_left_is_final(self) -> None:
        entry = always_fails.enqueue("boom")

        statuses = [ran.status for ran in run_jobs(include_deferred=True)]

        assert statuses == [RETRYING, FAILED]
        assert list(
            EntryError.objects.filter(entry_id=entry.pk)
            .order_by("attempt")
            .values_list("attempt", "is_final", "message")
        ) == [(1, False, "boom"), (2, True, "boom")]
        assert not Entry.objects.exists()

    def test_a_snooze_puts_the_entry_back_without_an_error_record(self) -> None:
        entry = polls.enqueue("p", ready_after=2)  # raises Snooze(0) on its first two runs

        (snoozed,) = run_jobs()  # run_at is now later than when the call began: it waits
        assert (snoozed.entry_id, snoozed.status, snoozed.attempt) == (entry.pk, SNOOZED, 1)
        assert Entry.objects.get(pk=entry.pk).snoozes == 1
        runs = run_jobs(include_deferred=True)
        assert [(ran.status, ran.attempt) for ran in runs] == [(SNOOZED, 1), (SUCCEEDED, 1)]
        assert runs[-1].return_value == "p"
        assert not EntryError.objects.exists() and not Entry.objects.exists()

    def test_raise_errors_raises_the_jobs_exception_after_recording_it(self) -> None:
        always_fails.enqueue("loud")

        with pytest.raises(ValueError, match=r"^loud$"):
            run_jobs(raise_errors=True)

        assert EntryError.objects.filter(message="loud").count() == 1

    def test_a_group_held_by_someone_else_is_not_run_and_one_claim_runs_a_group_in_order(
        self,
    ) -> None:
        held = [step.using(group_key="held").enqueue(f"h{i}") for i in range(2)]
        GroupLockFactory(key=held[0].lock_key, queue_id="default")
        mine = [step.using(group_key="mine").enqueue(f"m{i}") for i in range(3)]

        runs = run_jobs()

        assert [ran.entry_id for ran in runs] == [entry.pk for entry in mine]
        assert set(Entry.objects.values_list("pk", flat=True)) == {entry.pk for entry in held}
        assert list(GroupLock.objects.values_list("key", flat=True)) == ["g:held"]

    def test_children_released_by_their_parent_run_in_the_same_call(self) -> None:
        parent = step.enqueue("parent")
        child = step.using(after=[parent]).enqueue("child")
        grandchild = step.using(after=[child]).enqueue("grandchild")

        runs = run_jobs()

        assert [ran.entry_id for ran in runs] == [parent.pk, child.pk, grandchild.pk]
        assert list(RecordedRun.objects.order_by("pk").values_list("token", flat=True)) == [
            "parent",
            "child",
            "grandchild",
        ]

    def test_a_django_task_runs_and_its_result_is_readable(self) -> None:
        result = tasks.add.enqueue(2, 3)

        (ran,) = run_jobs()

        assert (ran.job_name, ran.return_value) == (tasks.add.module_path, 5)
        result.refresh()
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)

    def test_an_unregistered_job_is_not_run_and_stays_pending(self) -> None:
        stranger = EntryFactory(job_name="elsewhere.jobs.unknown")
        record.enqueue("known")

        runs = run_jobs()

        assert [ran.job_name for ran in runs] == ["tests.testapp.jobs.record"]
        assert Entry.objects.get().pk == stranger.pk
        assert Entry.objects.get().state == "pending"

    def test_queue_and_job_narrow_what_runs(self) -> None:
        flaky.enqueue("in-emails", fail_times=0)
        record.enqueue("in-default")
        chain.enqueue("c", 0)

        assert [ran.job_name for ran in run_jobs("emails")] == ["tests.testapp.jobs.flaky"]
        assert [ran.job_name for ran in run_jobs(job=chain)] == ["tests.testapp.jobs.chain"]
        assert list(Entry.objects.values_list("job_name", flat=True)) == [
            "tests.testapp.jobs.record"
        ]

    def test_deferred_entries_wait_unless_now_is_past_them(self) -> None:
        later = record.using(run_at=timedelta(hours=1)).enqueue("later")

        assert run_jobs() == []
        assert run_jobs(now=timezone.now() + timedelta(minutes=30)) == []
        (ran,) = run_jobs(now=timezone.now() + timedelta(hours=2))
        assert ran.entry_id == later.pk

    def test_entries_enqueued_by_jobs_run_in_the_same_call_and_limit_stops_early(self) -> None:
        chain.enqueue("c", 3)

        assert len(run_jobs(limit=2)) == 2
        assert len(run_jobs()) == 2
        assert sorted(JobRun.objects.values_list("token", flat=True)) == [
            "c:0",
            "c:1",
            "c:2",
            "c:3",
        ]

    def test_a_job_enqueueing_itself_without_end_stops_with_a_clear_error(self) -> None:
        chain.enqueue("endless", 50)
        limit = inline_runs.MAX_RUNS
        inline_runs.MAX_RUNS = 5
        try:
            with pytest.raises(TooManyRuns, match="run_jobs ran 5 entries and more are ready"):
                run_jobs()
        finally:
            inline_runs.MAX_RUNS = limit

    def test_the_connection_stays_open_and_usable(self) -> None:
        connection.ensure_connection()
        raw = connection.connection
        in_atomic = connection.in_atomic_block
        always_fails.enqueue("x")
        record.enqueue("y")

        run_jobs(include_deferred=True)

        assert connection.connection is raw and connection.in_atomic_block == in_atomic
        assert JobRun.objects.filter(token="y").count() == 1


class RunJobsInTestCaseTests(RunJobsBehaviour, TestCase):
    def test_runs_happen_inside_the_tests_transaction(self) -> None:
        record.enqueue("inside")
        run_jobs()
        assert connection.in_atomic_block
        assert JobRun.objects.filter(token="inside").exists()


class RunJobsInTransactionTestCaseTests(RunJobsBehaviour, TransactionTestCase):
    def test_runs_commit_as_a_workers_would(self) -> None:
        record.enqueue("committed")
        run_jobs()
        assert not connection.in_atomic_block
        assert JobRun.objects.filter(token="committed").exists()


@pytest.mark.django_db
def test_run_jobs_in_a_pytest_test_runs_and_records_a_failure() -> None:
    record.enqueue("p")
    always_fails.enqueue("nope")

    runs = run_jobs()

    assert [(ran.job_name, ran.status) for ran in runs] == [
        ("tests.testapp.jobs.record", SUCCEEDED),
        ("tests.testapp.jobs.always_fails", RETRYING),
    ]
    assert EntryError.objects.get().message == "nope"


@pytest.mark.django_db(transaction=True)
def test_run_jobs_in_a_transactional_pytest_test_runs_a_chain() -> None:
    parent = step.enqueue("tp")
    step.using(after=[parent]).enqueue("tc")

    assert [ran.status for ran in run_jobs()] == [SUCCEEDED, SUCCEEDED]
    assert not Entry.objects.exists()


@pytest.mark.django_db
def test_a_job_name_that_is_not_registered_is_refused_with_a_suggestion() -> None:
    with pytest.raises(JobNotRegistered, match=r"Did you mean 'tests.testapp.jobs.record'\?"):
        run_jobs(job="tests.testapp.jobs.recrod")


@pytest.mark.django_db
def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit must be a positive number of runs, got 0"):
        run_jobs(limit=0)
