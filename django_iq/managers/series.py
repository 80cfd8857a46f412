"""Time series the dashboard charts beside throughput: enqueue-to-start latency per queue and
minute, tallied by workers with the same log-spaced histogram as job durations
(``managers.jobstats``) and written with their heartbeat's metrics; and queue depth, sampled
once a minute by the leader.

Latency is the start of a run minus the moment its entry became ready: the later of its
enqueue time and its ``run_at`` (a deferred entry, or a retry waiting out its backoff, is not
late before it is due). A reported quantile is within 11.1 % of the true latency, as job
durations are (``jobstats.QUANTILE_RELATIVE_ERROR``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from django.db import models, router
from django.db.models import Sum

from django_iq.appmodels import iq
from django_iq.managers.jobstats import QUANTILES, quantile
from django_iq.queries import upsert_add
from django_iq.queries.maintenance import UpsertRows

if TYPE_CHECKING:
    from django_iq.managers.queues import QueueStats
    from django_iq.models import QueueDepthMinute, QueueLatencyMinute  # noqa: F401

# (queue, minute, bucket) -> runs started.
LatencyKey = tuple[str, datetime, int]
_M = TypeVar("_M", bound=models.Model)


def ready_at(enqueued_at: datetime, run_at: datetime | None) -> datetime:
    """When an entry became ready to run: the later of its enqueue time and its ``run_at``."""
    return enqueued_at if run_at is None else max(enqueued_at, run_at)


@dataclass(frozen=True)
class LatencyPoint:
    """The median and 95th percentile of the latencies of runs started in one minute, over
    every queue (None in a minute without starts), and how many started."""

    minute: datetime
    starts: int
    p50_seconds: float | None
    p95_seconds: float | None


@dataclass(frozen=True)
class DepthPoint:
    """The leader's sample of one minute, summed over the queues: entries ready and waiting
    for a thread (awaiting compute), running, and deferred; None in a minute not sampled."""

    minute: datetime
    ready: int | None
    running: int | None
    deferred: int | None


class _MinuteRows(models.Manager[_M]):
    """Rows keyed by minute, pruned oldest first in bounded batches."""

    def prune(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` rows of minutes before ``older_than``."""
        ids = list(self.filter(minute__lt=older_than).values_list("pk", flat=True)[:batch_size])
        return self.filter(pk__in=ids).delete()[0] if ids else 0


class QueueLatencyMinuteManager(_MinuteRows["QueueLatencyMinute"]):
    def record(self, using: str, tallies: dict[LatencyKey, int]) -> None:
        """Add ``tallies`` ((queue, minute, bucket) -> starts) to the rows on ``using``; the
        caller holds the transaction."""
        upsert_add(using, *self.rows_of(tallies))

    def rows_of(self, tallies: dict[LatencyKey, int]) -> UpsertRows:
        """``tallies`` as the rows to add (``upsert_add_all``)."""
        rows = [
            {"queue": queue, "minute": minute, "bucket": bucket, "starts": starts}
            for (queue, minute, bucket), starts in tallies.items()
        ]
        return iq.QueueLatencyMinute, ["queue", "minute", "bucket"], rows

    def over(self, start: datetime, end: datetime) -> LatencyPoint:
        """The quantiles of every latency counted from minute ``start`` to minute ``end``, over
        all queues (``minute`` is ``start``). One query."""
        counts = dict(
            self.using(router.db_for_read(self.model))
            .filter(minute__gte=start, minute__lte=end)
            .values("bucket")
            .annotate(starts=Sum("starts"))
            .order_by()
            .values_list("bucket", "starts")
        )
        return LatencyPoint(
            minute=start,
            starts=sum(counts.values()),
            p50_seconds=quantile(counts, QUANTILES[0]),
            p95_seconds=quantile(counts, QUANTILES[1]),
        )

    def per_minute(self, start: datetime, end: datetime) -> list[LatencyPoint]:
        """Each minute from ``start`` to ``end`` (both truncated to minutes), oldest first,
        with the quantiles of the latencies over all queues. One query."""
        rows = (
            self.using(router.db_for_read(self.model))
            .filter(minute__gte=start, minute__lte=end)
            .values("minute", "bucket")
            .annotate(starts=Sum("starts"))
            .order_by()
            .values_list("minute", "bucket", "starts")
        )
        counts: dict[datetime, dict[int, int]] = {}
        for minute, bucket, starts in rows:
            per_bucket = counts.setdefault(minute, {})
            per_bucket[bucket] = per_bucket.get(bucket, 0) + starts
        points = []
        for minute in _minutes(start, end):
            found = counts.get(minute, {})
            points.append(
                LatencyPoint(
                    minute=minute,
                    starts=sum(found.values()),
                    p50_seconds=quantile(found, QUANTILES[0]),
                    p95_seconds=quantile(found, QUANTILES[1]),
                )
            )
        return points


class QueueDepthMinuteManager(_MinuteRows["QueueDepthMinute"]):
    def sample(self, minute: datetime, stats: list[QueueStats]) -> int:
        """Write one row per queue for ``minute`` from ``stats``, unless that minute was
        sampled already (by this leader or the one before it): the first sample of a minute
        stays. Return the rows written."""
        db = router.db_for_write(self.model)
        if self.using(db).filter(minute=minute).exists():
            return 0
        rows = [
            self.model(
                queue=s.queue,
                minute=minute,
                # Waiting to run: awaiting compute, and the computing entries not running
                # (in a worker's prefetch, or behind their group's running entry).
                ready=s.awaiting_compute + s.computing - s.running,
                running=s.running,
                deferred=s.count("initial"),
            )
            for s in stats
        ]
        # A leader elected within the minute may sample it too: the unique key keeps the first.
        self.using(db).bulk_create(rows, ignore_conflicts=True)
        return len(rows)

    def per_minute(self, start: datetime, end: datetime) -> list[DepthPoint]:
        """Each minute from ``start`` to ``end``, oldest first, summed over the queues. One
        query."""
        rows = (
            self.using(router.db_for_read(self.model))
            .filter(minute__gte=start, minute__lte=end)
            .values("minute")
            .annotate(ready=Sum("ready"), running=Sum("running"), deferred=Sum("deferred"))
            .order_by()
            .values_list("minute", "ready", "running", "deferred")
        )
        found = {minute: (ready, running, deferred) for minute, ready, running, deferred in rows}
        return [
            DepthPoint(minute, *found.get(minute, (None, None, None)))
            for minute in _minutes(start, end)
        ]


def _minutes(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(second=0, microsecond=0)
    last = end.replace(second=0, microsecond=0)
    count = int((last - first).total_seconds() // 60) + 1
    return [first + timedelta(minutes=offset) for offset in range(max(0, count))]
