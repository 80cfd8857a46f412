"""Pruning: delete old error records and long-stopped workers in bounded batches."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_iq.conf import iq_settings
from django_iq.cron import Fence
from django_iq.models import EntryError, QueueMinute, Result, Worker

logger = logging.getLogger(__name__)

# Batches per pass and table, so one pass never holds the leader for long.
MAX_BATCHES_PER_PASS = 10


@dataclass(frozen=True)
class PrunePass:
    errors: int
    workers: int
    results: int = 0
    metrics: int = 0


class PruningDuty:
    """Remove ``EntryError`` rows past ``ERROR_RETENTION_SECONDS``, worker rows stopped longer
    than ``WORKER_RETENTION_SECONDS`` and task results finished longer than
    ``RESULT_RETENTION_SECONDS``."""

    name = "pruning"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.PRUNE_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> PrunePass:
        batch = iq_settings.PRUNE_BATCH_SIZE
        before = now - timedelta(seconds=iq_settings.ERROR_RETENTION_SECONDS)
        errors = workers = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            with fence():
                deleted = EntryError.objects.prune(before, batch)
            errors += deleted
            if deleted < batch:
                break
        for _ in range(MAX_BATCHES_PER_PASS):
            with fence():
                deleted = Worker.objects.prune(iq_settings.WORKER_RETENTION_SECONDS, batch)
            workers += deleted
            if deleted < batch:
                break
        metrics = 0
        minute_before = now - timedelta(seconds=iq_settings.METRICS_RETENTION_SECONDS)
        for _ in range(MAX_BATCHES_PER_PASS):
            with fence():
                deleted = QueueMinute.objects.prune(minute_before, batch)
            metrics += deleted
            if deleted < batch:
                break
        results = 0
        finished_before = now - timedelta(seconds=iq_settings.RESULT_RETENTION_SECONDS)
        for _ in range(MAX_BATCHES_PER_PASS):
            with fence():
                deleted = Result.objects.prune(finished_before, batch)
            results += deleted
            if deleted < batch:
                break
        if errors or workers or results:
            logger.info("pruned errors=%s workers=%s results=%s", errors, workers, results)
        return PrunePass(errors, workers, results, metrics)
