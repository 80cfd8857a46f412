"""Per-job statistics: runs that ended, failures and a fine duration histogram per job and
minute, added to by workers with their queue tallies; read back over the last hour.

Durations fall into log-spaced buckets: ``[0, 1 ms)``, then ``[1 ms * 1.25**(i-1), 1 ms *
1.25**i)`` up to one hour, then one hour and more. A quantile is taken as the duration of the
run at its rank (the ``ceil(q * n)``-th shortest), whose bucket the counts know exactly, and
reported as the point of that bucket that is nearest to both of its bounds in relative terms
(``2 * low * high / (low + high)``): within ``(1.25 - 1) / (1.25 + 1)`` (1/9, 11.1 %) of the
true duration, whatever the durations are. Runs under 1 ms are reported as 0.5 ms, and runs of
an hour or more as one hour (a lower bound).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models, router
from django.db.models import Sum

from django_iq.appmodels import iq
from django_iq.queries import upsert_add
from django_iq.queries.maintenance import UpsertRows

if TYPE_CHECKING:
    from django_iq.models import JobMinute  # noqa: F401  (the manager's type argument)

BUCKET_RATIO = 1.25
SMALLEST_BUCKET_SECONDS = 0.001
LARGEST_BUCKET_SECONDS = 3600.0
# Upper bounds of the buckets but the last (one hour and more): 1 ms, 1.25 ms, ... 3112 s, 1 h.
_STEPS = math.ceil(math.log(LARGEST_BUCKET_SECONDS / SMALLEST_BUCKET_SECONDS, BUCKET_RATIO))
BUCKET_BOUNDS_SECONDS: tuple[float, ...] = (
    *(SMALLEST_BUCKET_SECONDS * BUCKET_RATIO**i for i in range(_STEPS)),
    LARGEST_BUCKET_SECONDS,
)
BUCKETS = len(BUCKET_BOUNDS_SECONDS) + 1
# The largest relative error of a reported quantile, for durations from 1 ms to an hour.
QUANTILE_RELATIVE_ERROR = (BUCKET_RATIO - 1) / (BUCKET_RATIO + 1)
# The last hour: the current minute and the 59 before it.
WINDOW_MINUTES = 60
QUANTILES = (0.5, 0.95)


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a run of ``seconds``: 0 under 1 ms, BUCKETS - 1 from an hour."""
    return bisect.bisect_right(BUCKET_BOUNDS_SECONDS, seconds)


def bucket_seconds(bucket: int) -> float:
    """The duration reported for a run in ``bucket`` (see the module's docstring)."""
    if bucket <= 0:
        return SMALLEST_BUCKET_SECONDS / 2
    if bucket >= BUCKETS - 1:
        return LARGEST_BUCKET_SECONDS
    low, high = BUCKET_BOUNDS_SECONDS[bucket - 1], BUCKET_BOUNDS_SECONDS[bucket]
    return 2 * low * high / (low + high)


def quantile(counts: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile of the durations counted per bucket in ``counts``; None if none."""
    total = sum(counts.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return bucket_seconds(bucket)
    raise AssertionError("unreachable: the rank is at most the total")


def mean(counts: dict[int, int]) -> float | None:
    """The mean duration of the runs counted per bucket in ``counts``; None without runs."""
    runs = sum(counts.values())
    if not runs:
        return None
    return sum(bucket_seconds(bucket) * n for bucket, n in counts.items()) / runs


@dataclass
class JobTally:
    """Runs of one job that ended in one minute and duration bucket since a worker's last flush,
    and the failures among them."""

    runs: int = 0
    failed: int = 0


@dataclass(frozen=True)
class JobStats:
    """One job's runs that ended over a window, the failures among them, and the median and
    95th percentile of their durations (failures included); None without runs."""

    job_name: str
    runs: int
    failed: int
    p50_seconds: float | None
    p95_seconds: float | None
    # The mean duration, from the same buckets (each run counted at its bucket's duration).
    mean_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_name": self.job_name,
            "runs": self.runs,
            "failed": self.failed,
            "p50_seconds": self.p50_seconds,
            "p95_seconds": self.p95_seconds,
            "mean_seconds": self.mean_seconds,
        }


def window_start(now: datetime) -> datetime:
    """The first minute of the last hour at ``now``: the current minute and the 59 before it."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)


class JobMinuteManager(models.Manager["JobMinute"]):
    def record(self, using: str, tallies: dict[tuple[str, datetime, int], JobTally]) -> None:
        """Add ``tallies`` ((job name, minute, bucket) -> counts) to the per-minute rows on
        ``using``; the caller holds the transaction."""
        upsert_add(using, *self.rows_of(tallies))

    def rows_of(self, tallies: dict[tuple[str, datetime, int], JobTally]) -> UpsertRows:
        """``tallies`` as the rows to add (``upsert_add_all``)."""
        rows = [
            {
                "job_name": job,
                "minute": minute,
                "bucket": bucket,
                "runs": t.runs,
                "failed": t.failed,
            }
            for (job, minute, bucket), t in tallies.items()
        ]
        return iq.JobMinute, ["job_name", "minute", "bucket"], rows

    def last_hour(self, now: datetime) -> list[JobStats]:
        """Each job with runs that ended in the last hour at ``now``, by name. One query."""
        rows = (
            self.using(router.db_for_read(self.model))
            .filter(minute__gte=window_start(now), minute__lte=now)
            .values("job_name", "bucket")
            .annotate(runs=Sum("runs"), failed=Sum("failed"))
            .order_by()
            .values_list("job_name", "bucket", "runs", "failed")
        )
        buckets: dict[str, dict[int, int]] = {}
        failed: dict[str, int] = {}
        for job, bucket, runs, failures in rows:
            counts = buckets.setdefault(job, {})
            counts[bucket] = counts.get(bucket, 0) + runs
            failed[job] = failed.get(job, 0) + failures
        return [
            JobStats(
                job_name=job,
                runs=sum(counts.values()),
                failed=failed[job],
                p50_seconds=quantile(counts, QUANTILES[0]),
                p95_seconds=quantile(counts, QUANTILES[1]),
                mean_seconds=mean(counts),
            )
            for job, counts in sorted(buckets.items())
            if sum(counts.values())
        ]

    def prune(self, older_than: datetime, batch_size: int) -> int:
        ids = list(self.filter(minute__lt=older_than).values_list("pk", flat=True)[:batch_size])
        return self.filter(pk__in=ids).delete()[0] if ids else 0
