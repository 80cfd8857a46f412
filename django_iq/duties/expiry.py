"""The expiry duty: entries not started before their expiry (``expires``) end as ``expired``,
whether or not a worker serves their queue."""

from __future__ import annotations

from datetime import datetime

from django_iq.conf import iq_settings
from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.models import Entry
from django_iq.registry import catalog

logger = get_logger("django_iq.leader")

# Entries ended per transaction; a pass goes on while whole batches come back.
BATCH = 1000
# At most this many batches per pass, so that one pass cannot hold the other duties back.
MAX_BATCHES = 20


class ExpiryDuty:
    """End waiting entries past their expiry, in batches (see ``Entry.objects.expire_due``)."""

    name = "expiry"

    @property
    def interval_seconds(self) -> float:
        # As often as deferred entries are promoted: an expiry is a time like a run_at.
        return float(iq_settings.PROMOTE_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> int:
        ended = 0
        for _ in range(MAX_BATCHES):
            with fence():
                count = Entry.objects.expire_due(now, jobs=catalog, limit=BATCH)
            ended += count
            if count < BATCH:
                break
        if ended:
            logger.info("expired entries count=%s", ended)
        return ended
