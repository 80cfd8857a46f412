"""Per-job statistics: a worker's tally per job, minute and duration bucket, flushed with its
queue counts in one transaction; the last hour's runs, failures and quantiles read back from
the rows; the rows pruned with the metrics retention."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import DatabaseError

from django_iq.duties import PruningDuty
from django_iq.leader import Leader
from django_iq.managers.jobstats import (
    BUCKET_BOUNDS_SECONDS,
    BUCKETS,
    QUANTILE_RELATIVE_ERROR,
    bucket_of,
    quantile,
)
from django_iq.models import JobMinute, QueueMinute
from django_iq.tally import Tally
from tests.conftest import iq_settings_with

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 10, 30, 40, tzinfo=UTC)
FAST = "tests.testapp.jobs.noop"
SLOW = "tests.testapp.jobs.record"


def exact_quantile(durations: list[float], q: float) -> float:
    """The duration of the run at the quantile's rank: the ceil(q * n)-th shortest."""
    ordered = sorted(durations)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_the_buckets_run_from_a_millisecond_to_an_hour_in_steps_of_a_quarter() -> None:
    assert BUCKET_BOUNDS_SECONDS[0] == 0.001
    assert BUCKET_BOUNDS_SECONDS[-1] == 3600.0
    ratios = [b / a for a, b in itertools.pairwise(BUCKET_BOUNDS_SECONDS)]
    assert max(ratios) <= 1.25 + 1e-9
    assert (bucket_of(0.0), bucket_of(0.0009), bucket_of(0.001)) == (0, 0, 1)
    assert bucket_of(3599.0) == BUCKETS - 2
    assert bucket_of(3600.0) == bucket_of(86_400.0) == BUCKETS - 1


def test_quantiles_of_any_durations_are_within_the_stated_bound() -> None:
    rng = random.Random(7)
    for _ in range(200):
        durations = [math.exp(rng.uniform(math.log(0.001), math.log(3599))) for _ in range(50)]
        counts: dict[int, int] = {}
        for seconds in durations:
            counts[bucket_of(seconds)] = counts.get(bucket_of(seconds), 0) + 1
        for q in (0.5, 0.95):
            estimate = quantile(counts, q)
            true = exact_quantile(durations, q)
            assert estimate is not None
            assert abs(estimate - true) / true <= QUANTILE_RELATIVE_ERROR + 1e-9
    assert QUANTILE_RELATIVE_ERROR == pytest.approx(1 / 9)
    assert quantile({}, 0.5) is None


def test_flush_writes_runs_failures_and_buckets_per_job_and_the_last_hour_sums_them() -> None:
    tally = Tally()
    minute_ago = NOW - timedelta(minutes=1)
    # FAST: 19 runs of 20 ms and one failure of 30 ms; SLOW: 8 runs of 0.2 s, 2 failing.
    for index in range(19):
        tally.add("default", FAST, 0.02, ok=True, now=NOW if index % 2 else minute_ago)
    tally.add("default", FAST, 0.03, ok=False, now=NOW)
    for index in range(8):
        tally.add("emails", SLOW, 0.2, ok=index >= 2, now=NOW)

    assert tally.flush() == 28

    assert JobMinute.objects.filter(job_name=FAST).count() == 3  # 2 minutes x 20 ms, 1 x 30 ms
    fast, slow = JobMinute.objects.last_hour(NOW)
    assert (fast.job_name, fast.runs, fast.failed) == (FAST, 20, 1)
    assert (slow.job_name, slow.runs, slow.failed) == (SLOW, 8, 2)
    # The 19th of 20 runs (p95) is still a 20 ms one; p95 of SLOW is 0.2 s.
    for stats, p50, p95 in ((fast, 0.02, 0.02), (slow, 0.2, 0.2)):
        assert stats.p50_seconds == pytest.approx(p50, rel=QUANTILE_RELATIVE_ERROR)
        assert stats.p95_seconds == pytest.approx(p95, rel=QUANTILE_RELATIVE_ERROR)
    # The queue counts went in the same flush.
    assert QueueMinute.objects.get(queue="emails", minute=NOW.replace(second=0)).failed == 2


def test_a_second_flush_adds_to_the_same_rows() -> None:
    for _ in range(2):
        tally = Tally()
        tally.add("default", FAST, 0.02, ok=False, now=NOW)
        tally.flush()

    row = JobMinute.objects.get()
    assert (row.runs, row.failed, row.bucket) == (2, 2, bucket_of(0.02))


def test_a_failed_write_writes_nothing_and_keeps_the_counts_for_the_next_flush() -> None:
    tally = Tally()
    tally.add("default", FAST, 0.02, ok=True, now=NOW)
    with (
        mock.patch(
            "django_iq.managers.queue_metrics.upsert_add_all", side_effect=DatabaseError("gone")
        ),
        pytest.raises(DatabaseError),
    ):
        tally.flush()
    assert not QueueMinute.objects.exists()
    tally.add("default", FAST, 0.02, ok=False, now=NOW)

    assert tally.flush() == 2
    (stats,) = JobMinute.objects.last_hour(NOW)
    assert (stats.runs, stats.failed) == (2, 1)
    assert QueueMinute.objects.get().done == 1


def test_the_last_hour_is_the_current_minute_and_the_59_before_it() -> None:
    minute = NOW.replace(second=0)
    for age, runs in ((0, 1), (59, 10), (60, 100), (-1, 1000)):
        JobMinute.objects.create(
            job_name=FAST, minute=minute - timedelta(minutes=age), bucket=5, runs=runs
        )
    JobMinute.objects.create(job_name=SLOW, minute=minute - timedelta(hours=2), bucket=5, runs=1)

    (stats,) = JobMinute.objects.last_hour(NOW)

    assert (stats.job_name, stats.runs) == (FAST, 11)


@iq_settings_with(METRICS_RETENTION_SECONDS=7200)
def test_pruning_removes_job_rows_past_the_metrics_retention() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    old = JobMinute.objects.create(job_name=FAST, minute=now - timedelta(hours=3), bucket=1)
    recent = JobMinute.objects.create(job_name=FAST, minute=now - timedelta(hours=1), bucket=1)
    leader = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30)

    result = leader.run_once(now).ran["pruning"]

    assert result.job_metrics == 1
    assert list(JobMinute.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not JobMinute.objects.filter(pk=old.pk).exists()
