"""A worker's tally of finished work, kept in memory and flushed with each heartbeat, so
counting costs no round trip per job."""

from __future__ import annotations

import bisect
import threading
from datetime import datetime

from django.utils import timezone

from django_iq.managers.jobstats import JobTally, bucket_of
from django_iq.managers.metrics import DURATION_BUCKETS_SECONDS, QueueTally, minute_of
from django_iq.models import QueueMinute

JobKey = tuple[str, datetime, int]


class Tally:
    """Thread-safe counts per (queue, minute) and per (job, minute, duration bucket), handed
    together to ``QueueMinute.objects.record``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, datetime], QueueTally] = {}
        self._jobs: dict[JobKey, JobTally] = {}

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
        try:
            QueueMinute.objects.record(taken, jobs)
        except Exception:  # not swallowed: the counts go back for the next flush, then re-raised
            with self._lock:
                for key, tally in taken.items():
                    self._merge(key, tally)
                for job_key, job in jobs.items():
                    current = self._jobs.setdefault(job_key, JobTally())
                    current.runs += job.runs
                    current.failed += job.failed
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
