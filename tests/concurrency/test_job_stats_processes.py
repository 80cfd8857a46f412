"""Per-job statistics with several worker processes on PostgreSQL: each process flushes its
tally into the same rows (job, minute, bucket), and the last hour adds up to the runs and the
failures the jobs themselves recorded, with quantiles matching the durations they recorded."""

from __future__ import annotations

import math

import pytest
from django.utils import timezone

from django_iq.managers.jobstats import QUANTILE_RELATIVE_ERROR
from django_iq.models import EntryError, JobMinute
from tests.processes import finish, start_command
from tests.testapp.jobs import step
from tests.testapp.models import RecordedRun

pytestmark = [pytest.mark.postgresql, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# What a run adds to the work it records: its two queries, the worker's bookkeeping.
OVERHEAD_SECONDS = 0.05


def at_rank(durations: list[float], q: float) -> float:
    ordered = sorted(durations)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_the_last_hour_adds_up_what_every_worker_process_ran() -> None:
    step.enqueue_many([((f"short-{i}", 0.01), {}) for i in range(90)])
    step.enqueue_many([((f"long-{i}", 0.15, i < 10), {}) for i in range(30)])

    workers = [start_command("runworker", "--burst", "--threads", "3") for _ in range(3)]
    for worker in workers:
        code, output = finish(worker, 180)
        assert code == 0, output[-3000:]

    recorded = [
        finished - started
        for started, finished in RecordedRun.objects.values_list("started_at", "finished_at")
    ]
    assert len(recorded) == 120, "each entry ran once"
    assert RecordedRun.objects.values("pid").distinct().count() >= 2
    (stats,) = JobMinute.objects.last_hour(timezone.now())
    assert stats.job_name == step.name
    assert stats.runs == len(recorded)
    assert stats.failed == EntryError.objects.filter(job_name=step.name).count() == 10
    for q, estimate in ((0.5, stats.p50_seconds), (0.95, stats.p95_seconds)):
        true = at_rank(recorded, q)
        assert estimate is not None
        assert true * (1 - QUANTILE_RELATIVE_ERROR) <= estimate, (q, estimate, true)
        assert estimate <= (true + OVERHEAD_SECONDS) * (1 + QUANTILE_RELATIVE_ERROR), (q, true)
