"""The promotion duty: deferred entries become ``pending`` when their time comes."""

from __future__ import annotations

from datetime import datetime

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.models import Entry

# Promotion logs with the cron duty, as it always has.
logger = get_logger("django_iq.cron")


class PromotionDuty:
    """Make deferred entries (cron fires, scheduled runs, retries) ``pending`` when due."""

    name = "promotion"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.PROMOTE_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> int:
        with fence():
            promoted = Entry.objects.promote_due(now)
        if promoted:
            logger.debug("promoted due entries count=%s", promoted)
        return promoted
