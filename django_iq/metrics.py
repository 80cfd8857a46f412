"""A worker's tally of finished work, kept in memory and flushed with each heartbeat, so
counting costs no round trip per job."""

from __future__ import annotations

import bisect
import threading
from datetime import datetime

from django.utils import timezone

from django_iq.managers.metrics import DURATION_BUCKETS_SECONDS, QueueTally, minute_of
from django_iq.models import QueueMinute


class Tally:
    """Thread-safe counts per (queue, minute), handed to ``QueueMinute.objects.record``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, datetime], QueueTally] = {}

    def add(self, queue: str, seconds: float, ok: bool, now: datetime | None = None) -> None:
        key = (queue, minute_of(now or timezone.now()))
        first_bucket = bisect.bisect_left(DURATION_BUCKETS_SECONDS, seconds)
        with self._lock:
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = QueueTally(buckets=[0] * len(DURATION_BUCKETS_SECONDS))
            if ok:
                tally.done += 1
            else:
                tally.failed += 1
            tally.busy_seconds += seconds
            for index in range(first_bucket, len(DURATION_BUCKETS_SECONDS)):
                tally.buckets[index] += 1

    def flush(self) -> int:
        """Write and forget the counts; on a database error they are kept for the next flush."""
        with self._lock:
            taken, self._tallies = self._tallies, {}
        try:
            QueueMinute.objects.record(taken)
        except Exception:  # not swallowed: the counts go back for the next flush, then re-raised
            with self._lock:
                for key, tally in taken.items():
                    self._merge(key, tally)
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
