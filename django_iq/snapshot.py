"""The operator's read model: one snapshot of queues, workers and the leader, read in a fixed
number of queries, that ``iq_status``, the dashboard, Prometheus, the API and the admin render.

States are spelled once, as ``states.COUNTED_STATES`` names them (``awaiting_compute``), with
``states.STATE_LABELS`` for people; no renderer spells them its own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, Min, OuterRef, Q
from django.utils import timezone

from django_iq.managers import QueueStats
from django_iq.models import Entry, LeaderLease, Queue, QueueTotal, Worker
from django_iq.states import COUNTED_STATES

# Worker rows listed, live ones first; stopped rows are kept for WORKER_RETENTION_SECONDS.
WORKER_LIMIT = 100


def age_seconds(now: datetime, then: datetime) -> float:
    """Seconds from ``then`` to ``now``; never negative when clocks differ a little."""
    return max(0.0, (now - then).total_seconds())


@dataclass(frozen=True)
class QueueView:
    """One queue's counts per state, its oldest entry awaiting compute, and how many waiting
    entries compaction merged away since the queue's first (a lifetime counter)."""

    stats: QueueStats
    oldest_waiting_at: datetime | None
    oldest_waiting_seconds: float | None
    merged: int = 0

    @property
    def name(self) -> str:
        return self.stats.queue

    @property
    def counts(self) -> dict[str, int]:
        return {state: getattr(self.stats, state) for state in COUNTED_STATES}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.stats.queue,
            "is_paused": self.stats.is_paused,
            "counts": self.counts,
            "invariant_holds": self.stats.invariant_holds,
            "oldest_waiting_enqueued_at": self.oldest_waiting_at,
            "oldest_waiting_seconds": self.oldest_waiting_seconds,
            "merged": self.merged,
        }


@dataclass(frozen=True)
class WorkerView:
    """A worker or leader process as its last heartbeat reported it."""

    name: str
    role: str
    host: str
    pid: int
    queues: list[str]
    is_live: bool
    # Stopped cleanly (as opposed to declared dead, or silent).
    has_stopped: bool
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    processing_threads: int
    busy_threads: int
    cpu_percent: float
    memory_percent: float
    is_throttled: bool

    @property
    def idle_threads(self) -> int:
        """Processing threads free for work; none for a process that is not live."""
        return max(0, self.processing_threads - self.busy_threads) if self.is_live else 0

    @property
    def state(self) -> str:
        """``live``, ``stopped`` (cleanly) or ``dead`` (declared dead, or silent)."""
        if self.is_live:
            return "live"
        return "stopped" if self.has_stopped else "dead"

    def serves_any(self, names: set[str]) -> bool:
        """Whether it serves one of ``names``; a worker with no queue list serves them all."""
        return not self.queues or bool(names.intersection(self.queues))

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "host": self.host,
            "pid": self.pid,
            "queues": self.queues,
            "is_live": self.is_live,
            "heartbeat_at": self.heartbeat_at,
            "heartbeat_age_seconds": self.heartbeat_age_seconds,
            "processing_threads": self.processing_threads,
            "busy_threads": self.busy_threads,
            "idle_threads": self.idle_threads,
            "cpu_percent": self.cpu_percent,
            "memory_percent": self.memory_percent,
            "is_throttled": self.is_throttled,
        }


@dataclass(frozen=True)
class UnservedJob:
    """A job with ready entries that no live worker has registered: they wait, never tried."""

    job_name: str
    waiting: int
    oldest_waiting_at: datetime
    oldest_waiting_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_name": self.job_name,
            "waiting": self.waiting,
            "oldest_waiting_enqueued_at": self.oldest_waiting_at,
            "oldest_waiting_seconds": self.oldest_waiting_seconds,
        }


@dataclass(frozen=True)
class LeaderView:
    """The leadership lease: who holds it, under which epoch, until when."""

    holder: str
    epoch: int
    expires_at: datetime
    acquired_at: datetime | None
    # A holder whose lease has not expired at the time of the snapshot.
    is_held: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "epoch": self.epoch,
            "expires_at": self.expires_at,
            "acquired_at": self.acquired_at,
            "is_held": self.is_held,
        }


@dataclass(frozen=True)
class Snapshot:
    """Queues, workers and the leader, read at ``now``."""

    now: datetime
    queues: list[QueueView] = field(default_factory=list)
    # Live first, then by latest heartbeat; at most WORKER_LIMIT rows.
    workers: list[WorkerView] = field(default_factory=list)
    workers_truncated: bool = False
    # (role, "live" | "dead") -> every Worker row, counted in the database (no limit).
    worker_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    throttled_workers: int = 0
    leader: LeaderView | None = None
    # Read only when asked for (``read_snapshot(unserved_jobs=True)``); None otherwise.
    unserved_jobs: list[UnservedJob] | None = None

    @property
    def totals(self) -> dict[str, int]:
        """Counts per state summed over the queues."""
        return {state: sum(q.counts[state] for q in self.queues) for state in COUNTED_STATES}

    @property
    def merged(self) -> int:
        """Entries merged away by compaction, summed over the queues."""
        return sum(q.merged for q in self.queues)

    @property
    def invariant_holds(self) -> bool:
        return all(q.stats.invariant_holds for q in self.queues)

    @property
    def live_workers(self) -> list[WorkerView]:
        return [w for w in self.workers if w.is_live]

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``iq_status --json``: keys are stable, datetimes stay datetimes
        (``DjangoJSONEncoder`` writes them in ISO 8601)."""
        return {
            "generated_at": self.now,
            "queues": [q.as_dict() for q in self.queues],
            "totals": self.totals,
            "merged": self.merged,
            "invariant_holds": self.invariant_holds,
            "workers": [w.as_dict() for w in self.workers],
            "leader": self.leader.as_dict() if self.leader is not None else None,
            "unserved_jobs": (
                [job.as_dict() for job in self.unserved_jobs]
                if self.unserved_jobs is not None
                else None
            ),
        }


def read_snapshot(
    now: datetime | None = None,
    *,
    queues: Sequence[str] | None = None,
    worker_limit: int | None = WORKER_LIMIT,
    include_stopped: bool = True,
    unserved_jobs: bool = False,
) -> Snapshot:
    """Read queue statistics, the oldest waiting entries, the workers (listed and counted) and
    the lease at ``now``, and the entries merged away per queue: nine queries, whatever the number of queues, entries or workers.

    Worker rows are listed live first, then by latest heartbeat, at most ``worker_limit`` of
    them (None: all), without those marked stopped (cleanly or declared dead) unless
    ``include_stopped``. Liveness
    is decided by ``Worker.objects.live()`` in database time.

    ``queues`` restricts the queues to those names (a name with no row yet shows zeros) and the
    listed workers to those serving at least one of them (the counts stay cluster-wide).

    ``unserved_jobs`` adds two queries: the jobs with pending entries that no live worker has
    registered, with how many wait and since when (``Snapshot.unserved_jobs``)."""
    now = now or timezone.now()
    oldest = Entry.objects.oldest_waiting()
    stats_by_name = {stats.queue: stats for stats in Queue.objects.stats(queues)}
    merged = QueueTotal.objects.merged_by_queue(queues)
    for name in queues or ():
        stats_by_name.setdefault(name, _empty_stats(name))
    views = [
        QueueView(
            stats=stats,
            oldest_waiting_at=oldest.get(stats.queue),
            oldest_waiting_seconds=(
                age_seconds(now, oldest[stats.queue]) if stats.queue in oldest else None
            ),
            merged=merged.get(stats.queue, 0),
        )
        for _, stats in sorted(stats_by_name.items())
    ]
    listed = Worker.objects.annotate(
        is_live=Exists(Worker.objects.live().filter(pk=OuterRef("pk")))
    ).order_by("-is_live", "-heartbeat_at", "name")
    if not include_stopped:
        listed = listed.filter(stopped_at__isnull=True)
    rows = list(listed if worker_limit is None else listed[: worker_limit + 1])
    limit = len(rows) if worker_limit is None else worker_limit
    workers = [
        WorkerView(
            name=w.name,
            role=w.role,
            host=w.host,
            pid=w.pid,
            queues=list(w.queues or []),
            is_live=bool(w.is_live),
            has_stopped=w.stopped_at is not None and not w.died,
            heartbeat_at=w.heartbeat_at,
            heartbeat_age_seconds=age_seconds(now, w.heartbeat_at),
            processing_threads=w.processing_threads,
            busy_threads=w.busy_threads,
            cpu_percent=w.cpu_percent,
            memory_percent=w.memory_percent,
            is_throttled=w.is_throttled,
        )
        for w in rows[:limit]
    ]
    if queues:
        workers = [w for w in workers if w.serves_any(set(queues))]
    # "Dead" is every row not live: stopped, or silent past WORKER_SILENT_AFTER_SECONDS.
    live = Q(pk__in=Worker.objects.live().values("pk"))
    counts: dict[tuple[str, str], int] = {}
    throttled = 0
    for row in (
        Worker.objects.values("role")
        .annotate(
            total=Count("pk"),
            live=Count("pk", filter=live),
            throttled=Count("pk", filter=live & Q(is_throttled=True)),
        )
        .order_by()
    ):
        counts[(row["role"], "live")] = row["live"]
        counts[(row["role"], "dead")] = row["total"] - row["live"]
        throttled += row["throttled"]
    return Snapshot(
        now=now,
        queues=views,
        workers=workers,
        workers_truncated=len(rows) > limit,
        worker_counts=counts,
        throttled_workers=throttled,
        leader=_leader(now),
        unserved_jobs=_unserved_jobs(now) if unserved_jobs else None,
    )


def _unserved_jobs(now: datetime) -> list[UnservedJob]:
    """Pending entries whose job no live worker registered, by job: they wait, never tried."""
    served: set[str] = set()
    live = Worker.objects.live().filter(role=Worker.Role.WORKER)
    for names in live.values_list("job_names", flat=True):
        served.update(names or [])
    rows = (
        Entry.objects.pending()
        .exclude(job_name__in=sorted(served))
        .values("job_name")
        .annotate(waiting=Count("pk"), oldest=Min("enqueued_at"))
        .order_by("oldest")
    )
    return [
        UnservedJob(
            job_name=row["job_name"],
            waiting=row["waiting"],
            oldest_waiting_at=row["oldest"],
            oldest_waiting_seconds=age_seconds(now, row["oldest"]),
        )
        for row in rows
    ]


def _leader(now: datetime) -> LeaderView | None:
    lease: LeaderLease | None = LeaderLease.objects.current()
    if lease is None:
        return None
    return LeaderView(
        holder=lease.holder,
        epoch=lease.epoch,
        expires_at=lease.expires_at,
        acquired_at=lease.acquired_at,
        is_held=bool(lease.holder) and lease.expires_at > now,
    )


def _empty_stats(name: str) -> QueueStats:
    return QueueStats(queue=name, is_paused=False, **dict.fromkeys(COUNTED_STATES, 0))
