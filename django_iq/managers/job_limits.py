"""Per-job caps and rate limits: the limits workers declare, the room a claim has under them,
and the starts a rate limit counts (docs/howto/job-limits.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import models, router, transaction
from django.db.models import Count, Q
from django.db.models.functions import Now
from django.utils import timezone

from django_iq.appmodels import iq
from django_iq.options import JobLimits

if TYPE_CHECKING:
    from django_iq.models import JobLimit


@dataclass(frozen=True)
class JobUsage:
    """A limited job now: its limits, entries running (cluster-wide and on the busiest node),
    and starts within the rate limit's current window."""

    job_name: str
    limits: JobLimits
    running: int
    running_on_busiest_node: int
    recent_starts: int


class JobLimitManager(models.Manager["JobLimit"]):
    def publish(self, limits: Mapping[str, JobLimits], unlimited: Iterable[str] = ()) -> None:
        """Write the limits of the caller's registered jobs (a worker, as it starts): one row
        per limited job; the rows of ``unlimited`` jobs (their limits were removed) go."""
        db = router.db_for_write(self.model)
        with transaction.atomic(using=db):
            for job_name, job_limits in sorted(limits.items()):
                values = {
                    "max_concurrency": job_limits.max_concurrency,
                    "max_concurrency_per_node": job_limits.max_concurrency_per_node,
                    "rate_count": job_limits.rate_count,
                    "rate_period_seconds": job_limits.rate_period_seconds,
                }
                # Workers starting together race to create the row: one does, the others read it.
                rows = self.using(db).select_for_update()
                row, created = rows.get_or_create(job_name=job_name, defaults=values)
                if not created and any(
                    getattr(row, name) != value for name, value in values.items()
                ):
                    self.using(db).filter(pk=row.pk).update(updated_at=timezone.now(), **values)
            gone = sorted(set(unlimited) - set(limits))
            if gone:
                self.using(db).filter(job_name__in=gone).delete()

    def room(self, using: str, job_name: str, node: str | None, own: JobLimits) -> tuple[int, bool]:
        """How many entries of ``job_name`` a claim may take now, in the caller's transaction:
        lock the job's row (so claims of the job count one at a time), then count its running
        claims (in the cluster, and on ``node``) and its starts within the rate window. Return
        the room and whether the job has a rate limit (its claims then record their starts).
        The caller's own limits stand in for a row not written yet. A row another claim holds
        is not waited for: the room is 0 for now (``SKIP LOCKED``)."""
        rows = self.using(using).filter(job_name=job_name)
        row = rows.select_for_update(skip_locked=True).first()
        if row is None:
            if rows.exists():
                # Another worker is claiming this job right now: it counts and takes the room.
                # Waiting for it would queue every worker of a fleet on this one row (and hold
                # up their heartbeats, which share the scheduling pass's connection).
                return 0, False
            self.publish({job_name: own})
            row = rows.select_for_update().get()
        limits = _limits(row)
        locks = iq.GroupLock.objects.using(using).filter(job_name=job_name)
        # Only the counts a limit uses are read.
        running = locks.count() if limits.max_concurrency is not None else 0
        on_node = 0
        if limits.max_concurrency_per_node is not None and node is not None:
            on_node = locks.filter(worker__host=node).count()
        recent = 0
        if limits.rate_count is not None and limits.rate_period_seconds is not None:
            recent = self._starts(using, job_name, limits.rate_period_seconds)
        return max(0, limits.room(running, on_node, recent)), limits.rate_count is not None

    def _starts(self, using: str, job_name: str, period_seconds: float) -> int:
        """Starts of the job within the last period, by the database's clock; older ones go."""
        starts = iq.JobStart.objects.using(using).filter(job_name=job_name)
        since = self._db_now(using, job_name) - timedelta(seconds=period_seconds)
        starts.filter(started_at__lte=since).delete()
        return starts.filter(started_at__gt=since).count()

    def record_starts(self, using: str, job_name: str, count: int) -> None:
        """Count ``count`` starts of a rate-limited job now, in the claim's transaction."""
        if count <= 0:
            return
        now = self._db_now(using, job_name)
        iq.JobStart.objects.using(using).bulk_create(
            [iq.JobStart(job_name=job_name, started_at=now) for _ in range(count)]
        )

    def _db_now(self, using: str, job_name: str) -> datetime:
        """The database's clock, read through the job's row the claim holds: rate windows must
        not depend on the hosts' clocks."""
        rows = self.using(using).filter(job_name=job_name).annotate(now=Now())
        return rows.values_list("now", flat=True).get()

    def prune_starts(self, older_than: datetime, batch_size: int) -> int:
        """Delete up to ``batch_size`` rate-limited starts older than ``older_than``."""
        starts = iq.JobStart.objects.filter(started_at__lt=older_than)
        ids = list(starts.values_list("pk", flat=True)[:batch_size])
        return iq.JobStart.objects.filter(pk__in=ids).delete()[0] if ids else 0

    def usage(self) -> list[JobUsage]:
        """Every limited job with what it uses now (the admin, the dashboard, the API)."""
        rows = list(self.get_queryset().order_by("job_name"))
        if not rows:
            return []
        names = [row.job_name for row in rows]
        locks = iq.GroupLock.objects.filter(job_name__in=names)
        running = dict(locks.values_list("job_name").annotate(n=Count("pk")))
        busiest: dict[str, int] = {}
        per_node = locks.values_list("job_name", "worker__host").annotate(n=Count("pk"))
        for job_name, _, count in per_node:
            busiest[job_name] = max(busiest.get(job_name, 0), count)
        now = timezone.now()
        windows = Q()
        for row in rows:
            if row.rate_period_seconds:
                since = now - timedelta(seconds=row.rate_period_seconds)
                windows |= Q(job_name=row.job_name, started_at__gt=since)
        recent: dict[str, int] = {}
        if windows:
            starts = iq.JobStart.objects.filter(windows).values_list("job_name")
            recent = dict(starts.annotate(n=Count("pk")))
        return [
            JobUsage(
                row.job_name,
                _limits(row),
                running.get(row.job_name, 0),
                busiest.get(row.job_name, 0),
                recent.get(row.job_name, 0),
            )
            for row in rows
        ]


def _limits(row: JobLimit) -> JobLimits:
    return JobLimits(
        row.max_concurrency,
        row.max_concurrency_per_node,
        row.rate_count,
        row.rate_period_seconds,
    )
