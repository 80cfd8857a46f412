"""A worker's tally of finished work and of how long started runs waited, kept in memory and
flushed with each heartbeat, so counting costs no round trip per job."""

from __future__ import annotations

import bisect
import threading
from datetime import datetime

from django.utils import timezone

from django_iq.managers.jobstats import JobTally, bucket_of
from django_iq.managers.queue_metrics import DURATION_BUCKETS_SECONDS, QueueTally, minute_of
from django_iq.models import QueueMinute

JobKey = tuple[str, datetime, int]
# (queue, minute started, latency bucket)
LatencyKey = tuple[str, datetime, int]


class Tally:
    """Thread-safe counts per (queue, minute) and per (job, minute, duration bucket), handed
    together to ``QueueMinute.objects.record``, with the enqueue-to-start latencies per
    (queue, minute, latency bucket)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, datetime], QueueTally] = {}
        self._jobs: dict[JobKey, JobTally] = {}
        self._latencies: dict[LatencyKey, int] = {}

    def add_start(self, queue: str, started_at: datetime, latency_seconds: float) -> None:
        """Count a run started at ``started_at`` that waited ``latency_seconds`` since its
        entry became ready (``series.ready_at``)."""
        key = (queue, minute_of(started_at), bucket_of(max(0.0, latency_seconds)))
        with self._lock:
            self._latencies[key] = self._latencies.get(key, 0) + 1

    def add(
        self, queue: str, job_name: str, seconds: float, ok: bool, now: datetime | None = None
    ) -> None:
        minute = minute_of(now or timezone.now())
        key = (queue, minute)
        job_key = (job_name, minute, bucket_of(seconds))
        first_bucket = bisect.bisect_left(DURATION_BUCKETS_SECONDS, seconds)
        with self._lock:
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = QueueTally(buckets=[0] * len(DURATION_BUCKETS_SECONDS))
            job = self._jobs.get(job_key)
            if job is None:
                job = self._jobs[job_key] = JobTally()
            job.runs += 1
            if ok:
                tally.done += 1
            else:
                tally.failed += 1
                job.failed += 1
            tally.busy_seconds += seconds
            for index in range(first_bucket, len(DURATION_BUCKETS_SECONDS)):
                tally.buckets[index] += 1

    def flush(self) -> int:
        """Write and forget the counts; on a database error they are kept for the next flush."""
        with self._lock:
            taken, self._tallies = self._tallies, {}
            jobs, self._jobs = self._jobs, {}
            latencies, self._latencies = self._latencies, {}
        try:
            QueueMinute.objects.record(taken, jobs, latencies)
        except Exception:  # not swallowed: the counts go back for the next flush, then re-raised
            with self._lock:
                for key, tally in taken.items():
                    self._merge(key, tally)
                for job_key, job in jobs.items():
                    current = self._jobs.setdefault(job_key, JobTally())
                    current.runs += job.runs
                    current.failed += job.failed
                for latency_key, starts in latencies.items():
                    self._latencies[latency_key] = self._latencies.get(latency_key, 0) + starts
            raise
        return sum(t.done + t.failed for t in taken.values())

    def _merge(self, key: tuple[str, datetime], tally: QueueTally) -> None:
        current = self._tallies.get(key)
        if current is None:
            self._tallies[key] = tally
            return
        current.done += tally.done
        current.failed += tally.failed
        current.busy_seconds += tally.busy_seconds
        current.buckets = [a + b for a, b in zip(current.buckets, tally.buckets, strict=True)]
