"""The cron duty: one entry per enabled cron job (schedules are ``schedule.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.models import CronJob
from django_iq.registry import catalog

# Logged under the name operators configure: django_iq.cron.
logger = get_logger("django_iq.cron")


@dataclass(frozen=True)
class CronPass:
    synced: int
    removed: int
    created: int
    # Declared cron jobs whose schedule cannot be used, by name: why.
    refused: dict[str, str] = field(default_factory=dict)


class CronDuty:
    """Keep ``DJANGO_IQ["CRON"]`` in the table and exactly one entry per enabled cron job."""

    name = "cron"

    def __init__(self) -> None:
        # The declared cron jobs whose refusal was logged: each is logged once while refused,
        # not on every pass.
        self._refusals_logged: set[str] = set()

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.CRON_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> CronPass:
        """Sync declared cron jobs and create missing entries, under the leader's fence."""
        with fence():
            synced, removed, refused = CronJob.objects.sync_declared(iq_settings.CRON, catalog, now)
            created = CronJob.objects.ensure_entries(now, catalog)
        if synced or removed or created:
            logger.info("cron synced=%s removed=%s entries_created=%s", synced, removed, created)
        for name, reason in refused.items():
            if name not in self._refusals_logged:
                logger.error("cron job refused name=%s: %s", name, reason)
        self._refusals_logged = set(refused)
        return CronPass(synced, removed, created, refused)
