"""The cancel duty: entries whose cancel was requested while a worker held them, and that no
worker holds any more, end as a cancel of a waiting entry ends them."""

from __future__ import annotations

from datetime import datetime

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.models import Entry
from django_iq.registry import catalog

logger = get_logger("django_iq.leader")


class CancelDuty:
    """End requested cancels no worker carries out (see ``Entry.objects.end_requested_cancels``)."""

    name = "cancels"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.PROMOTE_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> int:
        with fence():
            ended = Entry.objects.end_requested_cancels(jobs=catalog)
        if ended:
            logger.info("cancelled entries no worker held any more count=%s", ended)
        return ended
