"""Depth sampling: once a minute, the leader writes each queue's depth (entries ready, running
and deferred) for the dashboard's depth chart. One writer a minute: only the leader samples,
inside its fence, and the first sample of a minute stays (a leader elected within the minute
finds it there)."""

from __future__ import annotations

from datetime import datetime

from django_iq.duties.base import Fence
from django_iq.logs import get_logger
from django_iq.managers.queue_metrics import minute_of
from django_iq.models import Queue, QueueDepthMinute

logger = get_logger(__name__)

# Often enough to sample every minute whatever the leader's pace; a pass in an already sampled
# minute costs nothing (no query).
SAMPLE_CHECK_SECONDS = 10.0


class SamplingDuty:
    """Sample each queue's depth into ``QueueDepthMinute`` once a minute."""

    name = "sampling"

    def __init__(self) -> None:
        self._last_minute: datetime | None = None

    @property
    def interval_seconds(self) -> float:
        return SAMPLE_CHECK_SECONDS

    def run_once(self, now: datetime, fence: Fence) -> int:
        """Sample the minute of ``now`` unless this duty already did; return the rows written
        (0 when the minute was sampled already)."""
        minute = minute_of(now)
        if minute == self._last_minute:
            return 0
        stats = Queue.objects.stats()
        with fence():
            written = QueueDepthMinute.objects.sample(minute, stats)
        self._last_minute = minute
        logger.debug("sampled queue depth minute=%s queues=%s", minute, written)
        return written
