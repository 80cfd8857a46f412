"""A worker process's recycling budget (``runworker --max-jobs`` / ``--max-memory-mb``): how
many more entries it may claim before it finishes the jobs in hand and exits to be replaced
(``EXIT_RECYCLE``), as a long-lived process that leaks memory would otherwise grow for good."""

from __future__ import annotations

import threading
import time

import psutil

from django_iq.logs import get_logger

logger = get_logger("django_iq.worker")

# Claims left when no limit is set: more than any worker takes at once.
UNLIMITED = 1 << 30
# How often the resident memory is read, at most.
MEMORY_READ_SECONDS = 1.0


class RecyclingBudget:
    """Entries claimed so far against ``max_jobs``, and the resident memory against
    ``max_memory_mb``; thread-safe."""

    def __init__(self, name: str, max_jobs: int | None, max_memory_mb: int | None) -> None:
        self.name = name
        self.max_jobs = max_jobs
        self.max_memory_bytes = max_memory_mb * 1024 * 1024 if max_memory_mb else None
        self.claimed = 0
        self._over_memory = False
        self._memory_read_at = 0.0
        self._lock = threading.Lock()

    @property
    def limited(self) -> bool:
        return self.max_jobs is not None or self.max_memory_bytes is not None

    def took(self, entries: int) -> None:
        """A claim of ``entries`` entries was handed over."""
        with self._lock:
            self.claimed += entries

    def claims_left(self) -> int:
        """Entries this process may still claim before it is recycled (0 once over memory)."""
        # A process over the limit from the start still runs what it claims first: it would
        # otherwise be replaced by one just like it, forever, and run nothing.
        if self.max_memory_bytes is not None and not self._over_memory and self.claimed:
            now = time.monotonic()
            if now - self._memory_read_at >= MEMORY_READ_SECONDS:
                self._memory_read_at = now
                rss = psutil.Process().memory_info().rss
                if rss > self.max_memory_bytes:
                    self._over_memory = True
                    logger.warning(
                        "memory limit passed name=%s rss_mb=%.0f limit_mb=%.0f: finishing the "
                        "jobs in hand, then exiting to be replaced",
                        self.name,
                        rss / 1048576,
                        self.max_memory_bytes / 1048576,
                    )
        if self._over_memory:
            return 0
        if self.max_jobs is None:
            return UNLIMITED
        with self._lock:
            return max(0, self.max_jobs - self.claimed)

    def spent(self) -> bool:
        """A limit is set and reached: claim nothing more."""
        return self.limited and self.claims_left() == 0
