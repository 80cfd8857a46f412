"""Metrics: per-minute and lifetime counts of finished work, added to by workers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, models, router, transaction
from django.db.models import Max, Q, Sum

from django_iq.appmodels import iq
from django_iq.managers.jobstats import JobTally
from django_iq.queries import upsert_add_all
from django_iq.queries.maintenance import UpsertRows

if TYPE_CHECKING:
    from django_iq.models import QueueMinute, QueueTotal  # noqa: F401  (the managers' type arguments)


# Upper bounds, in seconds, of the job duration histogram kept in QueueTotal (Prometheus "le").
DURATION_BUCKETS_SECONDS = (0.01, 0.1, 1.0, 10.0, 60.0, 600.0)
BUCKET_FIELDS = ("le_0_01", "le_0_1", "le_1", "le_10", "le_60", "le_600")


@dataclass
class QueueTally:
    """What one worker finished in one queue and minute since its last flush."""

    done: int = 0
    failed: int = 0
    busy_seconds: float = 0.0
    # Waiting entries merged away by compaction.
    merged: int = 0
    # Jobs at or under each bound of DURATION_BUCKETS_SECONDS (cumulative, as Prometheus wants).
    buckets: list[int] = field(default_factory=list)


class QueueMinuteManager(models.Manager["QueueMinute"]):
    def record(
        self,
        tallies: dict[tuple[str, datetime], QueueTally],
        jobs: dict[tuple[str, datetime, int], JobTally] | None = None,
        latencies: dict[tuple[str, datetime, int], int] | None = None,
    ) -> None:
        """Add ``tallies`` ((queue, minute) -> counts) to the per-minute rows and the totals,
        ``jobs`` ((job name, minute, bucket) -> counts) to ``JobMinute`` and ``latencies``
        ((queue, minute, latency bucket) -> starts) to ``QueueLatencyMinute``, in one
        transaction (a savepoint inside the caller's)."""
        if not tallies and not jobs and not latencies:
            return
        db = router.db_for_write(self.model)
        minutes = [
            {
                "queue": queue,
                "minute": minute,
                "done": t.done,
                "failed": t.failed,
                "busy_seconds": t.busy_seconds,
                "merged": t.merged,
            }
            for (queue, minute), t in tallies.items()
        ]
        totals: dict[str, dict[str, Any]] = {}
        for (queue, _), tally in tallies.items():
            row = totals.setdefault(
                queue,
                {"queue": queue, "done": 0, "failed": 0, "busy_seconds": 0.0, "merged": 0}
                | dict.fromkeys(BUCKET_FIELDS, 0),
            )
            row["done"] += tally.done
            row["failed"] += tally.failed
            row["busy_seconds"] += tally.busy_seconds
            row["merged"] += tally.merged
            for name, count in zip(BUCKET_FIELDS, tally.buckets, strict=False):
                row[name] += count
        tables: list[UpsertRows] = [
            (iq.QueueMinute, ["queue", "minute"], minutes),
            (iq.QueueTotal, ["queue"], list(totals.values())),
            iq.JobMinute.objects.rows_of(jobs or {}),
            iq.QueueLatencyMinute.objects.rows_of(latencies or {}),
        ]
        # Every worker adds to the same rows (this minute of a queue, its totals): on
        # PostgreSQL one statement that commits by itself holds their locks only while it
        # runs, so flushes of many workers do not queue behind each other's round trips.
        if connections[db].vendor == "postgresql" and not connections[db].in_atomic_block:
            upsert_add_all(db, tables)
            return
        with transaction.atomic(using=db):
            upsert_add_all(db, tables)

    def per_minute(self, start: datetime) -> dict[datetime, dict[str, int]]:
        """Done and failed per minute over all queues since ``start``."""
        rows = (
            self.filter(minute__gte=start)
            .values("minute")
            .annotate(done=Sum("done"), failed=Sum("failed"))
            .order_by("minute")
        )
        return {
            row["minute"]: {"done": row["done"] or 0, "failed": row["failed"] or 0} for row in rows
        }

    def last_finished(self, since: datetime) -> dict[str, datetime]:
        """Per queue, the latest minute since ``since`` in which a job finished (done or
        failed); queues with none are left out."""
        rows = (
            self.filter(minute__gte=since)
            .filter(Q(done__gt=0) | Q(failed__gt=0))
            .values("queue")
            .annotate(last=Max("minute"))
            .order_by()
            .values_list("queue", "last")
        )
        return {str(queue): last for queue, last in rows}

    def prune(self, older_than: datetime, batch_size: int) -> int:
        ids = list(self.filter(minute__lt=older_than).values_list("pk", flat=True)[:batch_size])
        return self.filter(pk__in=ids).delete()[0] if ids else 0


class QueueTotalManager(models.Manager["QueueTotal"]):
    def by_queue(self, queues: Iterable[str] | None = None) -> dict[str, QueueTotal]:
        rows = self.all() if queues is None else self.filter(queue__in=list(queues))
        return {row.queue: row for row in rows}

    def merged_by_queue(self, queues: Iterable[str] | None = None) -> dict[str, int]:
        """Entries merged away by compaction per queue, since each queue's first."""
        rows = self.all() if queues is None else self.filter(queue__in=list(queues))
        return dict(rows.values_list("queue", "merged"))


MINUTE_SECONDS = 60


def minute_of(moment: datetime) -> datetime:
    """``moment`` truncated to its minute."""
    return moment.replace(second=0, microsecond=0)
