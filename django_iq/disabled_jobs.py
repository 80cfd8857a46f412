"""The disabled jobs as a worker's processing threads see them: the claim statement skips
disabled jobs, but a claim taken just before a job was disabled may still wait in the worker's
hand-over queue. Before starting an entry a thread looks its job up here, read again from
``DisabledJob`` at most every ``MAX_AGE_SECONDS``, so the drain costs one small read per
interval, not one per entry."""

from __future__ import annotations

import threading
import time

from django.db import DatabaseError, router

from django_iq.dbconn import close_idle_connections, refresh_connections
from django_iq.logs import get_logger
from django_iq.models import DisabledJob

logger = get_logger(__name__)

# How stale the set may be: a run may still start this long after its job was disabled.
MAX_AGE_SECONDS = 0.2


class DisabledJobs:
    """The names of the disabled jobs, shared by a worker's processing threads."""

    def __init__(self, max_age: float = MAX_AGE_SECONDS) -> None:
        self.max_age = max_age
        self._names: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        """The disabled jobs as read at most ``max_age`` seconds ago; after a database error,
        the set read last (the next call reads again)."""
        if time.monotonic() - self._read_at < self.max_age:
            return self._names
        with self._lock:
            if time.monotonic() - self._read_at < self.max_age:  # another thread read it
                return self._names
            read_at = time.monotonic()  # before the read: a disable after it is caught next time
            db = router.db_for_write(DisabledJob)
            try:
                refresh_connections()
                self._names = frozenset(
                    DisabledJob.objects.using(db).values_list("job_name", flat=True)
                )
            except DatabaseError as exc:
                # The queue's own read must never cost a run or the worker: the set read last
                # stands, and the next start reads again on a fresh connection.
                logger.warning("could not read the disabled jobs error=%s; reading again", exc)
                close_idle_connections()
                return self._names
            self._read_at = read_at
            return self._names
