"""tally.py ``Tally``: a worker's counts per queue and minute, flushed into the per-minute
rows and the lifetime totals; a failed flush keeps them for the next one."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

import pytest
from django.db import DatabaseError

from django_iq.models import QueueMinute, QueueTotal
from django_iq.tally import Tally

pytestmark = pytest.mark.django_db

MINUTE = datetime(2026, 1, 5, 10, 30, tzinfo=UTC)


def test_flush_writes_counts_per_queue_and_minute_and_forgets_them() -> None:
    tally = Tally()
    tally.add("default", "tests.testapp.jobs.noop", 0.005, ok=True, now=MINUTE.replace(second=10))
    tally.add("default", "tests.testapp.jobs.noop", 0.5, ok=False, now=MINUTE.replace(second=50))
    tally.add("emails", "tests.testapp.jobs.noop", 2.0, ok=True, now=MINUTE)

    assert tally.flush() == 3
    assert tally.flush() == 0

    rows = {
        (r.queue, r.minute, r.done, r.failed, round(r.busy_seconds, 3))
        for r in QueueMinute.objects.all()
    }
    assert rows == {("default", MINUTE, 1, 1, 0.505), ("emails", MINUTE, 1, 0, 2.0)}
    total = QueueTotal.objects.get(queue="default")
    assert (total.done, total.failed) == (1, 1)
    # Cumulative buckets: 5 ms is under every bound, 0.5 s under 1 s and above.
    assert (total.le_0_01, total.le_0_1, total.le_1, total.le_600) == (1, 1, 2, 2)


def test_a_second_flush_adds_to_the_same_minute() -> None:
    tally = Tally()
    tally.add("default", "tests.testapp.jobs.noop", 0.1, ok=True, now=MINUTE)
    tally.flush()
    tally.add("default", "tests.testapp.jobs.noop", 0.1, ok=True, now=MINUTE)
    tally.flush()

    assert QueueMinute.objects.get(queue="default", minute=MINUTE).done == 2
    assert QueueTotal.objects.get(queue="default").done == 2


def test_a_failed_flush_keeps_the_counts_and_merges_new_ones() -> None:
    tally = Tally()
    tally.add("default", "tests.testapp.jobs.noop", 0.1, ok=True, now=MINUTE)
    with (
        mock.patch.object(
            QueueMinute.objects, "record", side_effect=DatabaseError("server closed")
        ),
        pytest.raises(DatabaseError),
    ):
        tally.flush()
    tally.add("default", "tests.testapp.jobs.noop", 0.2, ok=False, now=MINUTE)

    assert tally.flush() == 2
    row = QueueMinute.objects.get(queue="default", minute=MINUTE)
    assert (row.done, row.failed) == (1, 1)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_flush_on_postgresql_is_one_statement_that_commits_by_itself() -> None:
    """Every worker adds to the same rows (this minute of a queue, its totals): a flush holds
    their locks only while its one statement runs, never across the worker's round trips."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_iq.models import JobMinute, QueueLatencyMinute

    tally = Tally()
    tally.add("default", "tests.testapp.jobs.noop", 0.005, ok=True, now=MINUTE)
    tally.add_start("default", MINUTE, 0.002)
    with CaptureQueriesContext(connection) as queries:
        assert tally.flush() == 1
    assert len(queries) == 1, [q["sql"][:80] for q in queries]
    assert QueueMinute.objects.get(queue="default").done == 1
    assert QueueTotal.objects.get(queue="default").done == 1
    assert JobMinute.objects.get(job_name="tests.testapp.jobs.noop").runs == 1
    assert QueueLatencyMinute.objects.get(queue="default").starts == 1
