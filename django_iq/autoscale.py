"""The autoscaling signal (docs/howto/autoscaling.md): how many processing threads the work
waiting now needs to be done within ``AUTOSCALE_TARGET_SECONDS``.

Per queue, each job's pending entries (due to run: awaiting compute, or claimed and running)
count at the job's mean duration over the last hour (``JobMinute``); a job with no run in that
hour counts at the mean of the queue's jobs that had runs, else at ``UNMEASURED_RUN_SECONDS``.
A job's share is at most its ``max_concurrency`` threads (a cap the whole cluster keeps; a cap
per key is not a ceiling on the total): threads beyond it would wait. The queue needs the sum,
rounded up, and at least one thread while anything is pending. Prometheus
(``django_iq_threads_needed``), the HTTP API (``GET autoscale/``) and ``iq_status`` show the same
numbers; an autoscaler divides the sum by the threads one worker runs.

Groups are not counted: a queue whose backlog is one group's, run one entry at a time, is
shown as needing the threads its total run time asks for.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Count

from django_iq.conf import iq_settings
from django_iq.managers.jobstats import JobStats
from django_iq.models import Entry, JobMinute, Worker
from django_iq.registry import registered_jobs
from django_iq.states import EntryState

# The duration assumed for a run of a job no queue has measured in the last hour.
UNMEASURED_RUN_SECONDS = 1.0


@dataclass(frozen=True)
class QueueDemand:
    """One queue's pending entries, their run time, and the threads that do it in time."""

    queue: str
    pending: int
    backlog_seconds: float
    threads_needed: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "pending": self.pending,
            "backlog_seconds": round(self.backlog_seconds, 3),
            "threads_needed": self.threads_needed,
        }


@dataclass(frozen=True)
class Demand:
    """Every queue's demand at ``generated_at``, and the threads live workers run now."""

    generated_at: datetime
    target_seconds: float
    queues: tuple[QueueDemand, ...]
    threads_live: int

    @property
    def threads_needed(self) -> int:
        return sum(queue.threads_needed for queue in self.queues)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "target_seconds": self.target_seconds,
            "threads_needed": self.threads_needed,
            "threads_live": self.threads_live,
            "queues": [queue.as_dict() for queue in self.queues],
        }


def _cap(job_name: str) -> int | None:
    """The job's cluster-wide cap on running entries, if it has one."""
    job = registered_jobs().get(job_name)
    if job is None or job.options.max_concurrency is None:
        return None
    if job.options.concurrency_key is not None:
        return None
    return int(job.options.max_concurrency)


def demand_of(
    pending: dict[tuple[str, str], int],
    jobs: list[JobStats],
    target_seconds: float,
    *,
    generated_at: datetime,
    threads_live: int = 0,
) -> Demand:
    """The demand of ``pending`` entries per (queue, job name), from ``jobs``' durations."""
    means = {stats.job_name: stats.mean_seconds for stats in jobs if stats.mean_seconds}
    by_queue: dict[str, dict[str, int]] = defaultdict(dict)
    for (queue, job_name), count in pending.items():
        if count:
            by_queue[queue][job_name] = count
    queues = []
    for queue, counts in sorted(by_queue.items()):
        measured = [means[name] for name in counts if name in means]
        fallback = sum(measured) / len(measured) if measured else UNMEASURED_RUN_SECONDS
        backlog = 0.0
        threads = 0.0
        for job_name, count in counts.items():
            seconds = count * means.get(job_name, fallback)
            backlog += seconds
            share = seconds / target_seconds
            cap = _cap(job_name)
            threads += share if cap is None else min(share, cap)
        needed = max(1, math.ceil(round(threads, 9)))
        queues.append(QueueDemand(queue, sum(counts.values()), backlog, needed))
    return Demand(generated_at, target_seconds, tuple(queues), threads_live)


def pending_by_job() -> dict[tuple[str, str], int]:
    """Pending entries per (queue, job name): one query."""
    rows = (
        Entry.objects.using(router.db_for_read(Entry))
        .filter(state=EntryState.PENDING)
        .values("queue_id", "job_name")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("queue_id", "job_name", "n")
    )
    return {(str(queue), str(job)): int(n) for queue, job, n in rows}


def read_demand(now: datetime, jobs: list[JobStats] | None = None) -> Demand:
    """The demand at ``now``: three queries (pending entries, the last hour's durations unless
    ``jobs`` gives them, the live workers' threads)."""
    if jobs is None:
        jobs = JobMinute.objects.last_hour(now)
    return demand_of(
        pending_by_job(),
        jobs,
        float(iq_settings.AUTOSCALE_TARGET_SECONDS),
        generated_at=now,
        threads_live=Worker.objects.live_processing_threads(),
    )
