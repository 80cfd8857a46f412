"""The operator's read model: one snapshot of queues, workers, the leader and the alarms, read
in a fixed number of queries in one database snapshot, that ``iq_status``, the dashboard,
Prometheus, the API, the admin and the health endpoint render.

States are spelled once, as ``states.COUNTED_STATES`` names them (``awaiting_compute``), with
``states.STATE_LABELS`` for people; no renderer spells them its own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import Count, Exists, Min, OuterRef, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from django_iq.alarms import (
    INVARIANT_BROKEN,
    NO_LEADER,
    Alarm,
    QueueActivity,
    UnservedWait,
    queue_alarm,
    served,
    unserved_job_alarm,
)
from django_iq.conf import iq_settings
from django_iq.managers import QueueStats
from django_iq.managers.queue_metrics import MINUTE_SECONDS, minute_of
from django_iq.models import Entry, LeaderLease, Queue, QueueMinute, QueueTotal, Worker
from django_iq.queries import server_sessions, snapshot_reads
from django_iq.states import (
    COUNTED_STATES,
    WORKER_DEAD,
    WORKER_LIVE,
    WORKER_STOPPED,
    EntryState,
    worker_state,
)

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
    # The queue's alarm threshold: its own, else ALERT_WAITING_SECONDS.
    alert_waiting_seconds: int = 300
    # The queue's alarm about waiting work, if it raises one.
    alarm: Alarm | None = None
    merged: int = 0

    @property
    def name(self) -> str:
        return self.stats.queue

    @property
    def counts(self) -> dict[str, int]:
        return {state: self.stats.count(state) for state in COUNTED_STATES}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.stats.queue,
            "is_paused": self.stats.is_paused,
            "counts": self.counts,
            "invariant_holds": self.stats.is_consistent,
            "locked_by_dead_workers": self.stats.locked_by_dead_workers,
            "locks_without_entries": self.stats.locks_without_entries,
            "oldest_waiting_enqueued_at": self.oldest_waiting_at,
            "oldest_waiting_seconds": self.oldest_waiting_seconds,
            "alert_waiting_seconds": self.alert_waiting_seconds,
            "alarm": self.alarm.as_dict() if self.alarm is not None else None,
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
    # The database sessions the process had open at its last report of them (None: it keeps
    # none a server could count, as on SQLite, or has not reported them yet).
    sessions: int | None = None

    @property
    def idle_threads(self) -> int:
        """Processing threads free for work; none for a process that is not live."""
        return max(0, self.processing_threads - self.busy_threads) if self.is_live else 0

    @property
    def state(self) -> str:
        """``live``, ``stopped`` (cleanly) or ``dead`` (declared dead, or silent):
        ``states.worker_state``."""
        return worker_state(is_live=self.is_live, stopped=self.has_stopped, died=False)

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
            "sessions": self.sessions,
        }


@dataclass(frozen=True)
class ServerSessions:
    """The database server's connection limit against what is open: the room a fleet of
    workers has left."""

    max_connections: int
    # Slots kept for superusers (PostgreSQL's superuser_reserved_connections).
    reserved: int
    # Client sessions open on the server, every database's and user's.
    in_use: int
    # The sessions the live django_iq processes reported.
    django_iq: int

    @property
    def headroom(self) -> int:
        """Sessions an ordinary user may still open."""
        return max(0, self.max_connections - self.reserved - self.in_use)

    @property
    def is_short(self) -> bool:
        """Less than a tenth of the limit (at least 5 sessions) left: one more worker host
        may meet "too many clients"."""
        return self.headroom < max(5, self.max_connections // 10)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_connections": self.max_connections,
            "reserved": self.reserved,
            "in_use": self.in_use,
            "django_iq": self.django_iq,
            "headroom": self.headroom,
            "is_short": self.is_short,
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
    # The ``unserved_job`` alarms, by job and queue (of the queues asked for, if any); read with
    # ``unserved_jobs`` only.
    job_alarms: list[Alarm] = field(default_factory=list)
    # The server's connection limit and sessions open (None on SQLite).
    server_sessions: ServerSessions | None = None

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
        """Every queue's counts agree: the invariant holds and no lock lacks its entry."""
        return all(q.stats.is_consistent for q in self.queues)

    @property
    def leader_live(self) -> bool:
        """A leader holds an unexpired lease."""
        return self.leader is not None and self.leader.is_held

    @property
    def alarms(self) -> list[Alarm]:
        """The leader missing, then each queue's alarm about waiting work, by queue name, then
        each job no live worker has registered whose entries waited too long (when read)."""
        found = [] if self.leader_live else [Alarm(NO_LEADER)]
        return found + [q.alarm for q in self.queues if q.alarm is not None] + self.job_alarms

    @property
    def problems(self) -> list[Alarm]:
        """What makes the cluster unhealthy: the alarms, then each queue whose counts
        contradict each other (``invariant_broken``, with the counts that should be zero)."""
        broken = [
            Alarm(INVARIANT_BROKEN, q.name, counts=q.stats.broken_counts)
            for q in self.queues
            if not q.stats.is_consistent
        ]
        return self.alarms + broken

    @property
    def is_healthy(self) -> bool:
        return not self.problems

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
            "healthy": self.is_healthy,
            "leader_live": self.leader_live,
            "alarms": [alarm.as_dict() for alarm in self.alarms],
            "problems": [problem.as_dict() for problem in self.problems],
            "workers": [w.as_dict() for w in self.workers],
            "leader": self.leader.as_dict() if self.leader is not None else None,
            "server_sessions": (
                self.server_sessions.as_dict() if self.server_sessions is not None else None
            ),
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
    server_sessions: bool = True,
) -> Snapshot:
    """Read queue statistics, the oldest waiting entries, the workers (listed and counted), the
    lease, the entries merged away per queue and what the alarms are decided from at ``now``,
    in one snapshot of the database (``queries.snapshot_reads``): twelve queries, whatever the
    number of queues, entries or workers, two more on a database server (its connection limit
    and sessions, ``Snapshot.server_sessions``; not read when ``server_sessions`` is false),
    plus the statements opening and closing the
    snapshot when not already inside a transaction.

    Worker rows are listed live first, then by latest heartbeat, at most ``worker_limit`` of
    them (None: all; 0: none, and no query), without those marked stopped (cleanly or declared
    dead) unless ``include_stopped``. Liveness is decided by ``Worker.objects.live()`` in
    database time.

    ``queues`` restricts the queues to those names (a name with no row yet shows zeros) and the
    listed workers to those serving at least one of them (the counts stay cluster-wide).

    ``unserved_jobs`` adds two queries: the jobs with pending entries that no live worker has
    registered, with how many wait and since when (``Snapshot.unserved_jobs``), and the
    ``unserved_job`` alarms they raise (``Snapshot.job_alarms``, among ``alarms``)."""
    now = now or timezone.now()
    with snapshot_reads(router.db_for_read(Entry)):
        return _read(now, queues, worker_limit, include_stopped, unserved_jobs, server_sessions)


def _read(
    now: datetime,
    queues: Sequence[str] | None,
    worker_limit: int | None,
    include_stopped: bool,
    unserved_jobs: bool,
    read_sessions: bool,
) -> Snapshot:
    waiting = Entry.objects.waiting_times()
    stats_by_name = {stats.queue: stats for stats in Queue.objects.stats(queues)}
    merged = QueueTotal.objects.merged_by_queue(queues)
    for name in queues or ():
        stats_by_name.setdefault(name, _empty_stats(name))
    default_threshold: int = iq_settings.ALERT_WAITING_SECONDS
    thresholds = {
        name: stats.alert_waiting_seconds or default_threshold
        for name, stats in stats_by_name.items()
    }
    live_queue_lists = Worker.objects.live_queue_lists()
    finished = QueueMinute.objects.last_finished(
        minute_of(now - timedelta(seconds=max(thresholds.values(), default=0) + MINUTE_SECONDS))
    )
    views = []
    for name, stats in sorted(stats_by_name.items()):
        oldest, ready = waiting.get(name, (None, None))
        activity = QueueActivity(
            queue=name,
            is_paused=stats.is_paused,
            threshold_seconds=thresholds[name],
            waiting_since=ready,
            is_served=served(name, live_queue_lists),
            live_locks=stats.live_locks,
            last_finished_minute=finished.get(name),
        )
        views.append(
            QueueView(
                stats=stats,
                oldest_waiting_at=oldest,
                oldest_waiting_seconds=age_seconds(now, oldest) if oldest is not None else None,
                alert_waiting_seconds=thresholds[name],
                alarm=queue_alarm(activity, now),
                merged=merged.get(name, 0),
            )
        )
    listed = Worker.objects.annotate(
        is_live=Exists(Worker.objects.live().filter(pk=OuterRef("pk")))
    ).order_by("-is_live", "-heartbeat_at", "name")
    if not include_stopped:
        listed = listed.filter(stopped_at__isnull=True)
    rows: list[Any] = []
    if worker_limit != 0:
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
            sessions=len(w.sessions) if w.sessions else None,
        )
        for w in rows[:limit]
    ]
    if queues:
        workers = [w for w in workers if w.serves_any(set(queues))]
    # As states.worker_state says: stopped cleanly, or else dead when not live.
    live = Q(pk__in=Worker.objects.live().values("pk"))
    stopped = Q(stopped_at__isnull=False, died=False)
    counts: dict[tuple[str, str], int] = {}
    throttled = 0
    for row in (
        Worker.objects.values("role")
        .annotate(
            total=Count("pk"),
            live=Count("pk", filter=live),
            stopped=Count("pk", filter=stopped),
            throttled=Count("pk", filter=live & Q(is_throttled=True)),
        )
        .order_by()
    ):
        counts[(row["role"], WORKER_LIVE)] = row["live"]
        counts[(row["role"], WORKER_STOPPED)] = row["stopped"]
        counts[(row["role"], WORKER_DEAD)] = row["total"] - row["live"] - row["stopped"]
        throttled += row["throttled"]
    unserved = _unserved_jobs(now, default_threshold, live_queue_lists) if unserved_jobs else None
    return Snapshot(
        now=now,
        queues=views,
        workers=workers,
        workers_truncated=len(rows) > limit,
        worker_counts=counts,
        throttled_workers=throttled,
        leader=_leader(now),
        server_sessions=_server_sessions() if read_sessions else None,
        unserved_jobs=unserved[0] if unserved is not None else None,
        job_alarms=[a for a in unserved[1] if not queues or a.queue in queues] if unserved else [],
    )


def _unserved_jobs(
    now: datetime, default_threshold: int, live_queue_lists: list[list[str]]
) -> tuple[list[UnservedJob], list[Alarm]]:
    """Pending entries whose job no live worker registered, by job (they wait, never tried),
    oldest first; and the alarms of those that waited past their queue's threshold."""
    served_jobs: set[str] = set()
    live = Worker.objects.live().filter(role=Worker.Role.WORKER)
    for names in live.values_list("job_names", flat=True):
        served_jobs.update(names or [])
    rows = (
        Entry.objects.pending()
        .exclude(job_name__in=sorted(served_jobs))
        .values("job_name", "queue", "queue__is_paused", "queue__alert_waiting_seconds")
        .annotate(
            waiting=Count("pk"),
            oldest=Min("enqueued_at"),
            ready=Min(Greatest("enqueued_at", "run_at")),
        )
        .order_by()
    )
    by_job: dict[str, tuple[int, datetime]] = {}
    alarms: list[Alarm] = []
    for row in rows:
        name = row["job_name"]
        count, oldest = by_job.get(name, (0, row["oldest"]))
        by_job[name] = (count + row["waiting"], min(oldest, row["oldest"]))
        wait = UnservedWait(
            job=name,
            queue=str(row["queue"]),
            is_paused=row["queue__is_paused"],
            threshold_seconds=row["queue__alert_waiting_seconds"] or default_threshold,
            waiting_since=row["ready"],
            is_queue_served=served(str(row["queue"]), live_queue_lists),
        )
        alarm = unserved_job_alarm(wait, now)
        if alarm is not None:
            alarms.append(alarm)
    jobs = [
        UnservedJob(
            job_name=name,
            waiting=count,
            oldest_waiting_at=oldest,
            oldest_waiting_seconds=age_seconds(now, oldest),
        )
        for name, (count, oldest) in sorted(by_job.items(), key=lambda item: (item[1][1], item[0]))
    ]
    alarms.sort(key=lambda alarm: (alarm.job or "", alarm.queue or ""))
    return jobs, alarms


def _server_sessions() -> ServerSessions | None:
    """The server's limit and sessions, beside the sum of the live processes' reports."""
    db = router.db_for_read(Worker)
    found = server_sessions(db)
    if found is None:
        return None
    limit, reserved, in_use = found
    reported = sum(len(sessions or ()) for sessions in Worker.objects.live_sessions())
    return ServerSessions(limit, reserved, in_use, reported)


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
    return QueueStats(
        queue=name,
        is_paused=False,
        stored=dict.fromkeys(EntryState.values, 0),
        computing=0,
        awaiting_compute=0,
        failed=0,
    )
