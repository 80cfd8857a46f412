"""The cron duty: one entry per enabled cron job (schedules are ``schedule.py``'s)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.models import CronJob
from django_iq.registry import catalog

# Logged under the name operators configure: django_iq.cron.
logger = logging.getLogger("django_iq.cron")


@dataclass(frozen=True)
class CronPass:
    synced: int
    removed: int
    created: int


class CronDuty:
    """Keep ``DJANGO_IQ["CRON"]`` in the table and exactly one entry per enabled cron job."""

    name = "cron"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.CRON_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> CronPass:
        """Sync declared cron jobs and create missing entries, under the leader's fence."""
        with fence():
            synced, removed = CronJob.objects.sync_declared(iq_settings.CRON, catalog)
            created = CronJob.objects.ensure_entries(now, catalog)
        if synced or removed or created:
            logger.info("cron synced=%s removed=%s entries_created=%s", synced, removed, created)
        return CronPass(synced, removed, created)
