"""Enqueue-to-start latency tallied by real workers, and queue depth sampled by the leader:
what the dashboard's depth and latency charts read."""

from __future__ import annotations

import math
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_iq.duties import PruningDuty, SamplingDuty
from django_iq.leader import Leader
from django_iq.managers.jobstats import QUANTILE_RELATIVE_ERROR, bucket_of, bucket_seconds
from django_iq.managers.queue_metrics import minute_of
from django_iq.managers.series import ready_at
from django_iq.models import QueueDepthMinute, QueueLatencyMinute, RunOutcome
from django_iq.tally import Tally
from django_iq.worker import WorkerProcess
from tests.conftest import iq_settings_with
from tests.factories import EntryFactory, QueueFactory

pytestmark = pytest.mark.django_db

NOOP = "tests.testapp.jobs.noop"
NOW = datetime(2026, 1, 5, 10, 30, 40, tzinfo=UTC)


def exact_quantile(values: list[float], q: float) -> float:
    """The value at the quantile's rank: the ceil(q * n)-th smallest, as the histogram ranks."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_a_tally_flush_writes_each_start_in_its_queue_minute_and_latency_bucket() -> None:
    tally = Tally()
    tally.add_start("default", NOW, 2.0)
    tally.add_start("default", NOW + timedelta(seconds=5), 2.0)
    tally.add_start("emails", NOW, 30.0)

    tally.flush()

    rows = set(QueueLatencyMinute.objects.values_list("queue", "minute", "bucket", "starts"))
    assert rows == {
        ("default", minute_of(NOW), bucket_of(2.0), 2),
        ("emails", minute_of(NOW), bucket_of(30.0), 1),
    }
    point = QueueLatencyMinute.objects.over(minute_of(NOW), NOW)
    assert (point.starts, point.p50_seconds, point.p95_seconds) == (
        3,
        bucket_seconds(bucket_of(2.0)),
        bucket_seconds(bucket_of(30.0)),
    )


@pytest.mark.django_db(transaction=True)
def test_latency_recorded_by_a_real_worker_matches_the_entries_waits_within_the_stated_error() -> (
    None
):
    now = timezone.now()
    ready: dict[int, datetime] = {}
    for index in range(40):
        enqueued = now - timedelta(seconds=0.5 + index * 1.7)
        entry = EntryFactory(job_name=NOOP, args=[], enqueued_at=enqueued, run_at=enqueued)
        ready[entry.pk] = ready_at(entry.enqueued_at, entry.run_at)
    for index in range(5):
        # Enqueued long ago but due only lately: the wait counts from run_at, the later one.
        due = now - timedelta(seconds=3 + index)
        entry = EntryFactory(
            job_name=NOOP, args=[], enqueued_at=now - timedelta(hours=2), run_at=due
        )
        ready[entry.pk] = ready_at(entry.enqueued_at, entry.run_at)

    worker = WorkerProcess(burst=True, processing_threads=2)
    assert worker.run(install_signal_handlers=False) == 0

    started = dict(RunOutcome.objects.values_list("entry_id", "started_at"))
    assert set(started) == set(ready)
    waits = [(started[pk] - ready[pk]).total_seconds() for pk in ready]
    recorded = QueueLatencyMinute.objects.over(minute_of(now), timezone.now())
    assert recorded.starts == len(ready)
    # The outcome's start and the tally's are taken microseconds apart: a hair more slack.
    bound = QUANTILE_RELATIVE_ERROR + 0.01
    for q, got in ((0.5, recorded.p50_seconds), (0.95, recorded.p95_seconds)):
        expected = exact_quantile(waits, q)
        assert got is not None
        assert abs(got - expected) <= bound * expected, (q, got, expected)
    assert max(waits) < 2 * 3600, "every wait counts from the later of enqueue and run_at"


def sample_states() -> None:
    """3 awaiting compute, 1 running with 2 of its group waiting behind it, 1 deferred, and an
    empty queue."""
    EntryFactory.create_batch(3)
    running = EntryFactory(group_key="g-1", running=True)
    EntryFactory.create_batch(2, group_key="g-1", lock_key=running.lock_key)
    EntryFactory(deferred=True)
    QueueFactory(name="empty")


def test_the_leader_samples_each_queues_depth_once_a_minute() -> None:
    sample_states()
    duty = SamplingDuty()
    leader = Leader(name="sampler", duties=[duty], lease_seconds=30)
    now = timezone.now()

    first = leader.run_once(now).ran["sampling"]
    # Its next pass in the same minute: nothing to do, not even a query.
    again = duty.run_once(now, nullcontext)

    assert (first, again) == (2, 0)
    rows = set(
        QueueDepthMinute.objects.values_list("queue", "minute", "ready", "running", "deferred")
    )
    assert rows == {("default", minute_of(now), 5, 1, 1), ("empty", minute_of(now), 0, 0, 0)}


def test_a_minute_already_sampled_keeps_its_first_sample() -> None:
    sample_states()
    now = timezone.now()
    SamplingDuty().run_once(now, nullcontext)
    EntryFactory.create_batch(4)

    # A leader elected within the same minute: its own first pass writes nothing.
    written = SamplingDuty().run_once(now, nullcontext)

    assert written == 0
    assert QueueDepthMinute.objects.get(queue="default").ready == 5


def test_depth_per_minute_sums_the_queues_and_leaves_unsampled_minutes_empty() -> None:
    minute = minute_of(NOW)
    QueueDepthMinute.objects.create(queue="a", minute=minute, ready=2, running=1, deferred=0)
    QueueDepthMinute.objects.create(queue="b", minute=minute, ready=3, running=0, deferred=4)

    points = QueueDepthMinute.objects.per_minute(minute - timedelta(minutes=2), NOW)

    assert [(p.ready, p.running, p.deferred) for p in points] == [
        (None, None, None),
        (None, None, None),
        (5, 1, 4),
    ]


@iq_settings_with(METRICS_RETENTION_SECONDS=7200)
def test_pruning_removes_latency_and_depth_rows_past_the_metrics_retention() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    for age in (3, 1):
        minute = minute_of(now - timedelta(hours=age))
        QueueLatencyMinute.objects.create(queue="default", minute=minute, bucket=3, starts=1)
        QueueDepthMinute.objects.create(queue="default", minute=minute, ready=1)
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert (result.latency_metrics, result.depth_metrics) == (1, 1)
    kept = minute_of(now - timedelta(hours=1))
    assert list(QueueLatencyMinute.objects.values_list("minute", flat=True)) == [kept]
    assert list(QueueDepthMinute.objects.values_list("minute", flat=True)) == [kept]
