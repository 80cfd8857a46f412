"""Claims of jobs with caps or rate limits (``@job(max_concurrency=...,
max_concurrency_per_node=..., rate_limit=...)``), for one scheduling thread.

A limited claim locks the job's ``JobLimit`` row so that claims of the job count one at a time
(docs/howto/job-limits.md). In a fleet of dozens of processes that row is what they would all
wait on, so a pass first looks without locking anything: one EXISTS per limited job for an
entry ready in the queue, one query for what they run now (and one for recent starts if a job
has a rate limit). Only a job this look finds room for is claimed under its row's lock, which
counts again, and a row another claim holds is skipped, not waited for. A job found with
nothing ready, or at a limit, is not looked at again for a short while, unless work arrives or
a claim of it finishes here.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta

from django.db.models import Count, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from django_iq.conf import iq_settings
from django_iq.managers import Claim
from django_iq.models import Entry, GroupLock, JobStart, Worker
from django_iq.options import JobLimits

# A job found at its cap or rate limit is looked at again after this long, or at once when a
# claim of it finished here or took entries. A slot freed elsewhere is taken by its own
# worker at once (its claim finished there), so a longer wait costs a capped job little, and a
# fleet of dozens of processes does not count every job's running claims many times a second.
LIMITED_RETRY_SECONDS = 0.5
# ... doubled at each look in a row that finds no room (a random part of it added or taken, so
# that workers spread out), up to this. Dozens of workers looking at a cap of a few twice a
# second each took the server's time, and left their threads to the job instead of claiming
# other work. The worker whose run of the job just finished looks at once, as before.
LIMITED_RETRY_MAX_SECONDS = 4.0


class LimitedClaims:
    """The limited jobs one scheduling thread claims, and when it looks at each again."""

    def __init__(
        self,
        worker: Worker,
        limited_jobs: Mapping[str, JobLimits],
        free_threads: Callable[[], int],
    ) -> None:
        self.worker = worker
        self.jobs = dict(limited_jobs)
        self.free_threads = free_threads
        # finished() and heard_of() come from the processing threads and the listener.
        self._lock = threading.Lock()
        # (queue, job name) -> monotonic time before which it is not looked at.
        self._full_until: dict[tuple[str, str], float] = {}
        # (queue, job name) -> looks in a row that found it with no room here.
        self._misses: dict[tuple[str, str], int] = {}
        self._idle_until: dict[tuple[str, str], float] = {}
        # (queue, job name) found with room while no processing thread was free.
        self._room_seen: set[tuple[str, str]] = set()
        # Whether the last look found a limited job with entries ready and room for them:
        # while it did, other claims leave a processing thread free for it (no prefetch).
        self.wants_a_thread = False

    def claim(self, queue: str, slots: int) -> list[Claim]:
        """Claims of limited jobs with entries ready in ``queue``, within their limits and the
        processing threads free now (a claim counts as a start: none waits in the prefetch).

        A job is looked at (the unlocked queries) at most every ``LIMITED_RETRY_SECONDS``
        unless its last claim here took entries or one of its runs here finished: so a pass
        made because a thread finished costs no query for a job at its limit. A job the last
        look found room for, while no thread was free, is claimed at the next pass with a free
        thread without looking again."""
        self.wants_a_thread = False
        if not self.jobs or slots <= 0:
            return []
        now = time.monotonic()
        with self._lock:
            roomy = sorted(name for q, name in self._room_seen if q == queue)
            due = [
                name
                for name in self.jobs
                if name not in roomy
                and self._full_until.get((queue, name), 0.0) <= now
                and self._idle_until.get((queue, name), 0.0) <= now
            ]
        if due:
            roomy = sorted({*roomy, *self._look(queue, due, now)})
        if not roomy:
            return []
        self.wants_a_thread = True
        claims: list[Claim] = []
        for name in roomy:
            wanted = min(slots - len(claims), self.free_threads() - len(claims))
            if wanted <= 0:
                with self._lock:
                    self._room_seen.add((queue, name))  # claimed once a thread is free
                continue
            with self._lock:
                self._room_seen.discard((queue, name))
            taken = Entry.objects.claim(
                self.worker, wanted, queue, limited=(name, self.jobs[name]), is_capped=True
            )
            with self._lock:
                if taken:
                    self._misses.pop((queue, name), None)
                    delay = 0.0  # there may be more room
                else:
                    delay = self._next_backoff(queue, name)
                self._full_until[(queue, name)] = time.monotonic() + delay
            claims += taken
        return claims

    def _look(self, queue: str, names: list[str], now: float) -> list[str]:
        """The jobs of ``names`` with entries ready in ``queue`` and room by an unlocked count;
        the others are not looked at again for a while."""
        # One look per job for a ready entry, where a DISTINCT over the queue would read every
        # pending entry (and probe its lock) each time. The queue is compared as an expression
        # so that only the job's index (iq_entry_job_state_idx) can serve the look: with
        # statistics taken before a burst of enqueues, PostgreSQL planned a plain filter on the
        # queue's index instead, reading every pending entry of the queue (3 to 8 ms a look,
        # at 24 processes most of the server's time).
        waiting = (
            Entry.objects.awaiting_compute()
            .alias(queue_name=Concat("queue_id", Value("")))
            .filter(queue_name=queue)
            .values_list("pk", flat=True)
        )
        ready = {name for name in names if waiting.filter(job_name=name)[:1]}
        with self._lock:
            for name in names:
                if name not in ready:
                    # Looked for again at the poll interval, as a queue found empty is, or at
                    # once when work is heard of in the queue or promoted here.
                    self._idle_until[(queue, name)] = now + iq_settings.POLL_INTERVAL_SECONDS
        if not ready:
            return []
        room = self._room_by_count(sorted(ready))
        with self._lock:
            for name in ready:
                if room[name] <= 0:
                    self._full_until[(queue, name)] = now + self._next_backoff(queue, name)
        return [name for name in sorted(ready) if room[name] > 0]

    def _room_by_count(self, names: list[str]) -> dict[str, int]:
        """The room of each job by the limits registered here and an unlocked count of its
        running claims and recent starts: a claim under the row's lock counts again."""
        node = self.worker.host
        running: dict[str, int] = {}
        on_node: dict[str, int] = {}
        rows = (
            GroupLock.objects.filter(job_name__in=names)
            .values_list("job_name")
            .annotate(n=Count("pk"), here=Count("pk", filter=Q(worker__host=node)))
        )
        for name, count, here in rows:
            running[name], on_node[name] = count, here
        windows = Q()
        for name in names:
            period = self.jobs[name].rate_period_seconds
            if self.jobs[name].rate_count is not None and period is not None:
                since = timezone.now() - timedelta(seconds=period)
                windows |= Q(job_name=name, started_at__gt=since)
        recent: dict[str, int] = {}
        if windows:
            starts = JobStart.objects.filter(windows).values_list("job_name")
            recent = dict(starts.annotate(n=Count("pk")))
        return {
            name: self.jobs[name].room(
                running.get(name, 0), on_node.get(name, 0), recent.get(name, 0)
            )
            for name in names
        }

    def _next_backoff(self, queue: str, name: str) -> float:
        """Seconds before ``name`` is looked at again in ``queue`` after a look that found no
        room: ``LIMITED_RETRY_SECONDS``, doubled for each such look in a row, up to
        ``LIMITED_RETRY_MAX_SECONDS``, from half to one and a half times that. Called with
        ``_lock`` held."""
        misses = self._misses.get((queue, name), 0)
        self._misses[(queue, name)] = misses + 1
        delay: float = min(LIMITED_RETRY_MAX_SECONDS, LIMITED_RETRY_SECONDS * 2.0**misses)
        return delay * random.uniform(0.5, 1.5)  # noqa: S311 (spreading workers out)

    def finished(self, job_name: str) -> None:
        """A claim of ``job_name`` finished here: it may have room again at once."""
        with self._lock:
            for key in [key for key in self._full_until if key[1] == job_name]:
                del self._full_until[key]
                self._misses.pop(key, None)

    def heard_of(self, queue: str | None) -> None:
        """Work arrived in ``queue`` (None: anywhere): look for its limited jobs again. A job
        limited per key found with no room is looked at again within ``LIMITED_RETRY_SECONDS``
        (not after its longer back-off): the new work may be of a key with room."""
        with self._lock:
            for key in [key for key in self._idle_until if queue is None or key[0] == queue]:
                del self._idle_until[key]
            soon = time.monotonic() + LIMITED_RETRY_SECONDS
            for key, until in list(self._full_until.items()):
                if (queue is None or key[0] == queue) and self.jobs[key[1]].is_keyed:
                    self._full_until[key] = min(until, soon)
