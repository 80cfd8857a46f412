"""The compaction duty: merge the waiting entries of groups of jobs declared with ``merge``
(see ``django_iq.compaction``), a bounded pass every ``COMPACT_INTERVAL_SECONDS``."""

from __future__ import annotations

from datetime import datetime

from django_iq.compaction import CompactionPass, compact
from django_iq.conf import iq_settings
from django_iq.duties.base import Fence


class CompactionDuty:
    """Fold each group's waiting entries into one; each group is merged inside the fence."""

    name = "compaction"

    @property
    def interval_seconds(self) -> float:
        return float(iq_settings.COMPACT_INTERVAL_SECONDS)

    def run_once(self, now: datetime, fence: Fence) -> CompactionPass:
        return compact(atomic=fence, now=now)
