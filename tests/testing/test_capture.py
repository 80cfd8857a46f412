"""What a test enqueued, through every way of enqueueing, with the ``iq_jobs`` fixture and
``IQTestMixin``, and the messages of their failing assertions."""

from __future__ import annotations

import io
import re
import unittest
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase

import django_iq
from django_iq.queries import COPY_ENQUEUE_MIN_ROWS
from django_iq.testing import SUCCEEDED, EnqueuedJobs, IQTestMixin
from tests.testapp import jobs as jobs_module
from tests.testapp import tasks
from tests.testapp.jobs import (
    batch_done,
    checks_total,
    record,
    send_welcome,
    sign_up,
    unrecorded,
)
from tests.testapp.models import JobRun


@pytest.mark.django_db
def test_the_fixture_sees_every_way_of_enqueueing(iq_jobs: EnqueuedJobs) -> None:
    django_iq.enqueue(record, "by-function")
    record.enqueue("by-job")
    django_iq.enqueue("tests.testapp.jobs.record", "by-name")
    record.using(queue="reports", priority=5).enqueue("by-using")
    record.enqueue_many([(("many-1",), {}), (("many-2",), {})])
    with django_iq.batch(on_complete=batch_done, label="-b"):
        record.enqueue("in-batch")
    tasks.add.enqueue(1, 2)

    iq_jobs.assert_enqueued(record, count=7)
    iq_jobs.assert_enqueued(record, args=["by-using"], queue="reports")
    (callback,) = iq_jobs.assert_enqueued(batch_done, count=1)
    assert (callback.kwargs["label"], callback.state) == ("-b", "blocked")
    iq_jobs.assert_enqueued(tasks.add, args=[1, 2])
    iq_jobs.assert_enqueued("tests.testapp.tasks.add", kwargs={})
    (using,) = iq_jobs.enqueued(record, args=["by-using"])
    assert (using.queue, using.priority, using.state) == ("reports", 5, "pending")
    assert len(iq_jobs.enqueued()) == 9


@pytest.mark.django_db
def test_a_large_enqueue_many_is_seen_in_full(iq_jobs: EnqueuedJobs) -> None:
    # On PostgreSQL this many rows go through COPY.
    record.enqueue_many([((f"t{i}",), {}) for i in range(COPY_ENQUEUE_MIN_ROWS)])

    iq_jobs.assert_enqueued(record, count=COPY_ENQUEUE_MIN_ROWS)
    iq_jobs.assert_enqueued(record, args=[f"t{COPY_ENQUEUE_MIN_ROWS - 1}"], count=1)


@pytest.mark.django_db
def test_entries_enqueued_before_the_capture_are_left_out() -> None:
    record.enqueue("before")
    capture = EnqueuedJobs().start()
    record.enqueue("after")

    assert [item.args for item in capture.enqueued()] == [["after"]]
    capture.stop()


@pytest.mark.django_db
def test_entries_that_ran_still_count_and_run_delegates_to_run_jobs(
    iq_jobs: EnqueuedJobs,
) -> None:
    sign_up("ada@example.com")
    unrecorded.enqueue("no-outcome")

    runs = iq_jobs.run()

    assert [ran.status for ran in runs] == [SUCCEEDED, SUCCEEDED]
    iq_jobs.assert_enqueued(send_welcome, args=["ada@example.com"], queue="emails", count=1)
    iq_jobs.assert_enqueued(unrecorded, args=["no-outcome"])
    assert [item.state for item in iq_jobs.enqueued()] == [None, None]


@pytest.mark.django_db
def test_an_enqueue_rolled_back_does_not_count(iq_jobs: EnqueuedJobs) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        record.enqueue("rolled-back")
        raise RuntimeError("undo")
    record.enqueue("kept")

    iq_jobs.assert_not_enqueued(record, args=["rolled-back"])
    iq_jobs.assert_enqueued(record, args=["kept"], count=1)


@pytest.mark.django_db
def test_a_failing_assert_enqueued_says_what_was_enqueued(iq_jobs: EnqueuedJobs) -> None:
    first = record.enqueue("a")

    with pytest.raises(AssertionError) as failed:
        iq_jobs.assert_enqueued(record, args=["b"], queue="default")

    assert str(failed.value) == (
        "Expected at least 1 entry of tests.testapp.jobs.record args=['b'] queue='default' "
        "enqueued, found 0. Enqueued since the capture began:\n"
        f"  tests.testapp.jobs.record args=['a'] kwargs={{}} queue='default' "
        f"(entry {first.pk}, pending)"
    )


@pytest.mark.django_db
def test_a_failing_count_and_an_empty_capture_say_so(iq_jobs: EnqueuedJobs) -> None:
    with pytest.raises(AssertionError, match=r"Nothing was enqueued since the capture began\."):
        iq_jobs.assert_enqueued(send_welcome)
    send_welcome.enqueue("x@example.com")
    send_welcome.enqueue("y@example.com")

    expected = "Expected 1 entry of tests.testapp.jobs.send_welcome enqueued, found 2."
    with pytest.raises(AssertionError, match=re.escape(expected)):
        iq_jobs.assert_enqueued(send_welcome, count=1)


# The frames of django_iq.testing, which a failure's traceback leaves out.
OWN_FRAMES = str(Path(django_iq.__file__).parent / "testing")


@pytest.mark.django_db
def test_pytest_shows_a_failing_assertion_at_the_tests_line(iq_jobs: EnqueuedJobs) -> None:
    send_welcome.enqueue("ada@example.com")

    with pytest.raises(AssertionError) as not_found:
        iq_jobs.assert_enqueued(send_welcome, args=["grace@example.com"])
    with pytest.raises(AssertionError) as found:
        iq_jobs.assert_not_enqueued(send_welcome)

    for raised in (not_found, found):
        # pytest's own filter of the frames it shows (``__tracebackhide__``).
        shown = raised.traceback.filter(raised)
        assert [entry.path for entry in shown] == [Path(__file__)]
    assert str(not_found.value).startswith(
        "Expected at least 1 entry of tests.testapp.jobs.send_welcome "
        "args=['grace@example.com'] enqueued, found 0. Enqueued since the capture began:\n"
        "  tests.testapp.jobs.send_welcome args=['ada@example.com']"
    )


@pytest.mark.django_db
def test_unittest_shows_a_failing_assertion_at_the_tests_line() -> None:
    class SignUpTests(IQTestMixin, unittest.TestCase):
        def test_not_found(self) -> None:
            send_welcome.enqueue("ada@example.com")
            self.assertEnqueued(send_welcome, args=["grace@example.com"])

        def test_found(self) -> None:
            send_welcome.enqueue("ada@example.com")
            self.assertNotEnqueued(send_welcome)

    report = io.StringIO()
    suite = unittest.TestSuite([SignUpTests("test_not_found"), SignUpTests("test_found")])
    result = unittest.TextTestRunner(stream=report).run(suite)

    assert len(result.failures) == 2
    for _, traceback in result.failures:
        assert OWN_FRAMES not in traceback
        assert f'File "{__file__}"' in traceback
    assert 'self.assertEnqueued(send_welcome, args=["grace@example.com"])' in report.getvalue()
    assert (
        "AssertionError: Expected at least 1 entry of tests.testapp.jobs.send_welcome "
        "args=['grace@example.com'] enqueued, found 0." in report.getvalue()
    )
    assert (
        "AssertionError: Expected no entry of tests.testapp.jobs.send_welcome enqueued, found 1:"
        in report.getvalue()
    )


@pytest.mark.django_db
def test_unittest_keeps_the_frames_of_a_jobs_own_assertion_raised_by_run_jobs() -> None:
    class TotalTests(IQTestMixin, unittest.TestCase):
        def test_total(self) -> None:
            checks_total.enqueue(3, 4)
            self.run_jobs(raise_errors=True)

    report = io.StringIO()
    result = unittest.TextTestRunner(stream=report).run(TotalTests("test_total"))

    ((_, traceback),) = result.failures
    assert f'File "{__file__}"' in traceback
    assert "self.run_jobs(raise_errors=True)" in traceback
    assert f'File "{jobs_module.__file__}"' in traceback
    assert "assert total == expected" in traceback
    assert traceback.rstrip().endswith("AssertionError: total 4 != expected 3")


@pytest.mark.django_db
def test_a_failing_assert_not_enqueued_lists_the_matches(iq_jobs: EnqueuedJobs) -> None:
    entry = send_welcome.enqueue("z@example.com")

    with pytest.raises(AssertionError) as failed:
        iq_jobs.assert_not_enqueued(send_welcome)

    assert str(failed.value) == (
        "Expected no entry of tests.testapp.jobs.send_welcome enqueued, found 1:\n"
        "  tests.testapp.jobs.send_welcome args=['z@example.com'] kwargs={} "
        f"queue='emails' (entry {entry.pk}, pending)"
    )


@pytest.mark.django_db
def test_a_target_that_is_no_job_is_refused(iq_jobs: EnqueuedJobs) -> None:
    with pytest.raises(TypeError, match="Expected a @job function, a Django task or a job's"):
        iq_jobs.enqueued(42)


@pytest.mark.django_db(transaction=True)
def test_the_fixture_works_in_a_transactional_test(iq_jobs: EnqueuedJobs) -> None:
    sign_up("tx@example.com")

    iq_jobs.run()

    iq_jobs.assert_enqueued(send_welcome, args=["tx@example.com"])
    assert JobRun.objects.filter(token="welcome:tx@example.com").exists()
    assert not connection.in_atomic_block


class MixinTests(IQTestMixin, TestCase):
    def test_assert_enqueued_and_run_jobs(self) -> None:
        sign_up("grace@example.com")

        self.assertEnqueued(send_welcome, args=["grace@example.com"], queue="emails", count=1)
        self.assertNotEnqueued(record)
        (ran,) = self.run_jobs()

        self.assertEqual(ran.return_value, "sent to grace@example.com")
        self.assertEnqueued(send_welcome, count=1)
        self.assertEqual([item.job_name for item in self.enqueued()], [send_welcome.name])

    def test_failing_assertions_raise_assertion_error_with_the_entries(self) -> None:
        record.enqueue("r")

        with self.assertRaisesMessage(
            AssertionError, "Expected at least 1 entry of tests.testapp.jobs.send_welcome"
        ):
            self.assertEnqueued(send_welcome)
        with self.assertRaisesMessage(AssertionError, "tests.testapp.jobs.record args=['r']"):
            self.assertNotEnqueued(record, args=["r"])

    def test_each_test_starts_with_an_empty_capture(self) -> None:
        self.assertEqual(self.enqueued(), [])


class TransactionMixinTests(IQTestMixin, TransactionTestCase):
    def test_the_mixin_works_in_a_transaction_test_case(self) -> None:
        tasks.add.enqueue(20, 22)

        (ran,) = self.run_jobs()

        self.assertEqual(ran.return_value, 42)
        self.assertEnqueued(tasks.add, args=[20, 22], count=1)
