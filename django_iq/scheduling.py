"""The scheduling thread: ask the governor, pick a queue fairly, claim, hand claims to processors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connections
from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_iq.conf import iq_settings
from django_iq.dbconn import refresh_connections
from django_iq.governor import ResourceGovernor
from django_iq.limited_claims import LimitedClaims
from django_iq.logs import get_logger
from django_iq.managers import Claim
from django_iq.models import DisabledJob, Entry, Queue, Worker
from django_iq.options import JobLimits

logger = get_logger(__name__)

# A queue's recorded usage halves every this many seconds, so fairness follows recent load.
USAGE_HALF_LIFE_SECONDS = 30.0
QUEUE_LIST_TTL_SECONDS = 1.0
# A burst worker waits for retries of entries it failed if they are due within this time.
BURST_RETRY_HORIZON_SECONDS = 60.0


@dataclass
class QueuePicker:
    """Order queues for claiming: least recent usage per unit of weight first, then round robin.

    ``usage`` is processing time spent on a queue by this node, decayed over time; dividing by
    the queue's weight makes a weight-2 queue get about twice the share of a weight-1 queue.
    Ties (for instance every queue idle) rotate, so no queue is always asked first.
    """

    usage: dict[str, float] = field(default_factory=dict)
    _rotation: int = 0
    _decayed_at: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, queue: str, seconds: float) -> None:
        with self._lock:
            self.usage[queue] = self.usage.get(queue, 0.0) + seconds

    def _decay(self, now: float) -> None:
        elapsed = now - self._decayed_at
        if elapsed <= 0:
            return
        factor = 0.5 ** (elapsed / USAGE_HALF_LIFE_SECONDS)
        self.usage = {q: u * factor for q, u in self.usage.items() if u * factor > 1e-6}
        self._decayed_at = now

    def order(self, weights: dict[str, int], now: float | None = None) -> list[str]:
        """Return queue names in the order to try them."""
        with self._lock:
            self._decay(time.monotonic() if now is None else now)
            names = sorted(weights)
            if not names:
                return []
            shift = self._rotation % len(names)
            self._rotation += 1
            rotated = names[shift:] + names[:shift]
            position = {name: i for i, name in enumerate(rotated)}
            return sorted(
                rotated, key=lambda q: (self.usage.get(q, 0.0) / max(1, weights[q]), position[q])
            )


@dataclass
class PassResult:
    """What one scheduling pass did and how long to wait before the next."""

    claimed: int
    sleep_seconds: float
    is_idle: bool = False


class Scheduler:
    """One scheduling thread's logic; ``run_once`` does a pass, the worker loops over it."""

    def __init__(
        self,
        *,
        worker: Worker,
        queues: Sequence[str] | None,
        governor: ResourceGovernor,
        picker: QueuePicker,
        idle_threads: Callable[[], int],
        hand_over: Callable[[Claim], None],
        batch_size: int | None = None,
        detect_idle: bool = True,
        job_names: Sequence[str] | None = None,
        limited_jobs: Mapping[str, JobLimits] | None = None,
        free_threads: Callable[[], int] | None = None,
    ) -> None:
        """``detect_idle``: after a pass that claimed nothing, look whether anything claimable
        is left (``PassResult.is_idle``, what ``--burst`` stops on); a worker that runs until
        stopped asks nothing. ``job_names``: claim entries of these jobs only (None: any).

        ``limited_jobs`` (among ``job_names``) have caps or rate limits: they are claimed one
        job at a time under them, first in each queue, and only for a processing thread free
        now (``free_threads``), never to wait in the prefetch: a claim counts as a start."""
        self.worker = worker
        self.job_names = list(job_names) if job_names is not None else None
        self.limited_jobs = dict(limited_jobs or {})
        if self.limited_jobs and self.job_names is None:
            raise ValueError("limited_jobs need job_names: other claims must leave them out")
        self.general_job_names = (
            [name for name in self.job_names if name not in self.limited_jobs]
            if self.job_names is not None
            else None
        )
        self.free_threads = free_threads or idle_threads
        self.limited = LimitedClaims(worker, self.limited_jobs, self.free_threads)
        self.detect_idle = detect_idle
        self.queues = list(queues) if queues else None
        self.governor = governor
        self.picker = picker
        self.idle_threads = idle_threads
        self.hand_over = hand_over
        self.batch_size = batch_size or iq_settings.CLAIM_BATCH_SIZE
        self._weights: dict[str, int] = {}
        self._capped: set[str] = set()
        self._weights_at = 0.0
        self._promoted_at = 0.0

    def served_queues(self) -> dict[str, int]:
        """Unpaused queues this worker serves, name to weight (re-read at most once a second)."""
        now = time.monotonic()
        if now - self._weights_at >= QUEUE_LIST_TTL_SECONDS:
            rows = Queue.objects.filter(is_paused=False)
            if self.queues is not None:
                rows = rows.filter(name__in=self.queues)
            values = list(rows.values_list("name", "weight", "max_concurrency"))
            self._weights = {name: weight for name, weight, _ in values}
            self._capped = {name for name, _, cap in values if cap is not None}
            self._weights_at = now
        return self._weights

    def queue_heard_of(self, queue: str | None) -> None:
        """Work arrived in ``queue`` (None: anywhere): if this scheduler does not know the queue
        yet (it was created after the last reading), read the queues again at the next pass."""
        self.limited.heard_of(queue)
        if queue is None or queue not in self._weights:
            self._weights_at = 0.0

    def run_once(self) -> PassResult:
        """Promote due entries, ask the governor, claim from queues in fair order, hand over."""
        refresh_connections()
        now = timezone.now()
        if time.monotonic() - self._promoted_at >= iq_settings.PROMOTE_INTERVAL_SECONDS:
            promoted = Entry.objects.promote_due(now)
            self._promoted_at = time.monotonic()
            if promoted:
                logger.debug("promoted due entries count=%s", promoted)
                self.limited.heard_of(None)  # limited jobs found idle may have entries now
        decision = self.governor.decide(self.idle_threads())
        if decision.slots <= 0:
            return PassResult(0, iq_settings.POLL_INTERVAL_SECONDS)
        slots = min(decision.slots, self.batch_size)
        claimed = 0
        weights = self.served_queues()
        for queue in self.picker.order(weights):
            if claimed >= slots:
                break
            claims = self.limited.claim(queue, slots - claimed)
            room = slots - claimed - len(claims)
            if self.limited.wants_a_thread:
                # A limited job has entries ready and room: claims of other jobs leave it the
                # next free thread instead of filling the prefetch ahead of it.
                room = min(room, self.free_threads() - len(claims))
            if room > 0:
                claims += Entry.objects.claim(
                    self.worker,
                    room,
                    queue,
                    is_capped=queue in self._capped,
                    job_names=self.general_job_names,
                )
            for claim in claims:
                claimed += 1
                logger.debug(
                    "claimed lock=%s queue=%s entries=%s first=%s job=%s",
                    claim.lock_id,
                    queue,
                    len(claim.entries),
                    claim.entries[0].pk,
                    claim.entries[0].job_name,
                )
                self.hand_over(claim)
        if claimed:
            return PassResult(claimed, 0.0)
        is_idle = self.detect_idle and not self.has_claimable_work(weights)
        return PassResult(0, iq_settings.POLL_INTERVAL_SECONDS, is_idle=is_idle)

    def limited_job_finished(self, job_name: str) -> None:
        """A claim of ``job_name`` finished here: it may have room again at once."""
        self.limited.finished(job_name)

    def has_claimable_work(self, weights: dict[str, int]) -> bool:
        """True if a served queue has a ready unlocked entry of an enabled job, a due deferred
        one, or a retry due within ``BURST_RETRY_HORIZON_SECONDS`` (what ``--burst`` waits for)."""
        if not weights:
            return False
        entries = (
            Entry.objects.get_queryset()
            .filter(queue_id__in=list(weights))
            .exclude(Exists(DisabledJob.objects.filter(job_name=OuterRef("job_name"))))
        )
        if self.job_names is not None:
            entries = entries.filter(job_name__in=self.job_names)
        horizon = timezone.now() + timedelta(seconds=BURST_RETRY_HORIZON_SECONDS)
        return bool(
            entries.awaiting_compute().exists()
            or entries.due(timezone.now()).exists()
            or entries.initial().filter(attempts__gt=0, run_at__lte=horizon).exists()
        )

    def close(self) -> None:
        connections.close_all()


class ClaimGate:
    """Lets scheduling passes run side by side, and lets one change of identity wait for the
    passes under way and hold new ones back (a readers-writer lock, readers first-come)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._passes = 0
        self._closed = False

    @contextmanager
    def scheduling_pass(self) -> Iterator[None]:
        with self._condition:
            while self._closed:
                self._condition.wait()
            self._passes += 1
        try:
            yield
        finally:
            with self._condition:
                self._passes -= 1
                self._condition.notify_all()

    @contextmanager
    def closed(self) -> Iterator[None]:
        with self._condition:
            self._closed = True
            while self._passes:
                self._condition.wait()
        try:
            yield
        finally:
            with self._condition:
                self._closed = False
                self._condition.notify_all()
