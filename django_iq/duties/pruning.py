"""Pruning: delete old error records, long-stopped workers, outcome records, metrics and
audit records, unique keys whose window has passed and finished batches, in bounded batches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.exceptions import LeadershipLost
from django_iq.logs import get_logger
from django_iq.models import (
    ApiToken,
    Batch,
    EntryError,
    JobLimit,
    JobMinute,
    OperatorAction,
    QueueDepthMinute,
    QueueLatencyMinute,
    QueueMinute,
    RunOutcome,
    UniqueKey,
    Worker,
)
from django_iq.options import MAX_RATE_PERIOD_SECONDS
from django_iq.partitions import PartitionPass, is_partitioned, maintain

# Logged under the name operators configure: django_iq.pruning.
logger = get_logger("django_iq.pruning")

# Batches per pass and table, so one pass never holds the leader for long.
MAX_BATCHES_PER_PASS = 10


@dataclass
class PrunePass:
    """Rows deleted per table, and the tables a batch failed on (table to the error): a table
    that cannot be pruned is reported and skipped, and the others are pruned still."""

    errors: int = 0
    workers: int = 0
    outcomes: int = 0
    metrics: int = 0
    job_metrics: int = 0
    latency_metrics: int = 0
    depth_metrics: int = 0
    audit: int = 0
    starts: int = 0
    unique_keys: int = 0
    batches: int = 0
    token_seals: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    # PostgreSQL: what the pass did to the outcome table's partitions (None elsewhere).
    outcome_partitions: PartitionPass | None = None


class PruningDuty:
    """Remove ``EntryError`` rows past ``ERROR_RETENTION_SECONDS``, worker rows stopped longer
    than ``WORKER_RETENTION_SECONDS``, outcome records (Django Tasks results among them) of
    runs finished longer than ``OUTCOME_RETENTION_SECONDS``, throughput rows (per queue and per
    job), latency and depth rows past ``METRICS_RETENTION_SECONDS``,
    operators' audit records past ``AUDIT_RETENTION_SECONDS``, rate-limited starts older than
    the longest rate limit period (a day), the rows of unique keys whose window
    (``unique_for``) has passed (an expired row holds nothing), batches whose callback
    ended longer than ``OUTCOME_RETENTION_SECONDS`` ago, and the halves of new API tokens not
    shown within ten minutes.

    On PostgreSQL, outcome records are partitioned by time: whole partitions past the retention
    are dropped and new ones created ahead instead (``django_iq.partitions.maintain``)."""

    name = "pruning"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.PRUNE_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> PrunePass:
        batch = iq_settings.PRUNE_BATCH_SIZE
        errors_before = now - timedelta(seconds=iq_settings.ERROR_RETENTION_SECONDS)
        minute_before = now - timedelta(seconds=iq_settings.METRICS_RETENTION_SECONDS)
        ran_before = now - timedelta(seconds=iq_settings.OUTCOME_RETENTION_SECONDS)
        acted_before = now - timedelta(seconds=iq_settings.AUDIT_RETENTION_SECONDS)
        # A rate limit's window is at most a day; claims delete their job's older starts, and
        # this the starts of jobs that stopped running.
        started_before = now - timedelta(seconds=MAX_RATE_PERIOD_SECONDS)
        tables: dict[str, Callable[[], int]] = {
            "errors": lambda: EntryError.objects.prune(errors_before, batch),
            "workers": lambda: Worker.objects.prune(iq_settings.WORKER_RETENTION_SECONDS, batch),
            "metrics": lambda: QueueMinute.objects.prune(minute_before, batch),
            "job_metrics": lambda: JobMinute.objects.prune(minute_before, batch),
            "latency_metrics": lambda: QueueLatencyMinute.objects.prune(minute_before, batch),
            "depth_metrics": lambda: QueueDepthMinute.objects.prune(minute_before, batch),
            "outcomes": lambda: RunOutcome.objects.prune(ran_before, batch),
            "audit": lambda: OperatorAction.objects.prune(acted_before, batch),
            "starts": lambda: JobLimit.objects.prune_starts(started_before, batch),
            "unique_keys": lambda: UniqueKey.objects.prune(now, batch),
            "batches": lambda: Batch.objects.prune(ran_before, batch),
            "token_seals": lambda: ApiToken.objects.drop_seals(now, batch),
        }
        result = PrunePass()
        partitioned = is_partitioned()
        if partitioned:
            del tables["outcomes"]
        for table, prune in tables.items():
            try:
                deleted = _in_batches(prune, batch, fence)
            except LeadershipLost:
                raise
            except Exception as exc:  # one table it cannot prune must not stop the others
                logger.exception("pruning skipped table=%s", table)
                result.skipped[table] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            setattr(result, table, deleted)
        if partitioned:
            try:
                result.outcome_partitions = maintain(now, fence, batch, MAX_BATCHES_PER_PASS)
            except LeadershipLost:
                raise
            except Exception as exc:  # as for a table above: reported, the rest went on
                logger.exception("pruning skipped table=outcomes (partitions)")
                result.skipped["outcomes"] = f"{type(exc).__name__}: {exc}"[:500]
            else:
                result.outcomes = result.outcome_partitions.deleted
        if result.errors or result.workers or result.outcomes:
            logger.info(
                "pruned errors=%s workers=%s outcomes=%s",
                result.errors,
                result.workers,
                result.outcomes,
            )
        return result


def _in_batches(prune: Callable[[], int], batch: int, fence: Fence) -> int:
    """Run ``prune`` (one batch, fenced) until a batch comes back short, at most
    ``MAX_BATCHES_PER_PASS`` times; return the rows deleted."""
    total = 0
    for _ in range(MAX_BATCHES_PER_PASS):
        with fence():
            deleted = prune()
        total += deleted
        if deleted < batch:
            break
    return total
