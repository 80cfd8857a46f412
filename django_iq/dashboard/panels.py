"""The dashboard's panels beyond the operator snapshot: who leads, which entries run where and
since when, the last hour's queue depth and enqueue-to-start latency, and django_iq's tables.
Each is read in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_iq.managers.series import DepthPoint, LatencyPoint
from django_iq.models import Entry, GroupLock, QueueDepthMinute, QueueLatencyMinute, Worker
from django_iq.progress_reports import Progress
from django_iq.snapshot import LeaderView, age_seconds
from django_iq.table_status import TableStatus, read_table_status
from django_iq.wording import duration

# Running entries listed, longest running first; the rest are a link away.
RUNNING_LIMIT = 20


def format_age(seconds: float | None) -> str:
    """``wording.duration``, empty for None (a blank cell)."""
    return duration(seconds, none="")


@dataclass(frozen=True)
class LeaderPanel:
    """The lease as it stands, and the process holding it as its Worker row says (host and pid;
    empty when the row is gone). ``is_live``: a holder with an unexpired lease."""

    holder: str
    host: str
    pid: int | None
    epoch: int
    is_live: bool
    # Seconds since the holder took the lease; None when nobody ever held it.
    held_seconds: float | None
    # Seconds until the lease expires; negative once expired.
    expires_in_seconds: float


def leader_panel(now: datetime, lease: LeaderView | None) -> LeaderPanel | None:
    """The leader panel from the snapshot's lease, plus one query for the holder's row."""
    if lease is None:
        return None
    row = (
        Worker.objects.filter(name=lease.holder).values("host", "pid").first()
        if lease.holder
        else None
    )
    return LeaderPanel(
        holder=lease.holder,
        host=row["host"] if row else "",
        pid=row["pid"] if row else None,
        epoch=lease.epoch,
        is_live=lease.is_held,
        held_seconds=(
            age_seconds(now, lease.acquired_at)
            if lease.acquired_at is not None and lease.holder
            else None
        ),
        expires_in_seconds=(lease.expires_at - now).total_seconds(),
    )


@dataclass(frozen=True)
class RunningEntry:
    """An entry a live worker runs: its group lock's tracked entry."""

    entry_id: int
    job_name: str
    queue: str
    # When its claim took the group lock.
    since: datetime
    running_seconds: float
    worker: str
    host: str
    pid: int
    # Its last progress report, as people read it ("" before the first).
    progress: str = ""


def running_entries(now: datetime, limit: int = RUNNING_LIMIT) -> list[RunningEntry]:
    """Up to ``limit`` entries live workers run, longest running first. Two queries."""
    locks = list(
        GroupLock.objects.filter(
            worker__in=Worker.objects.live().values("pk"), entry_id__isnull=False
        )
        .order_by("locked_at", "pk")
        .values("entry_id", "queue", "locked_at", "worker__name", "worker__host", "worker__pid")[
            : limit * 2
        ]
    )
    # A lock's tracked entry is pending while it runs (Entry.objects.running()).
    rows = (
        Entry.objects.running()
        .filter(pk__in=[lock["entry_id"] for lock in locks])
        .values_list(
            "pk", "job_name", "progress_done", "progress_total", "progress_note", "progress_at"
        )
    )
    jobs = {
        pk: (job_name, Progress.stored(done, total, note, reported_at))
        for pk, job_name, done, total, note, reported_at in rows
    }
    return [
        RunningEntry(
            entry_id=lock["entry_id"],
            job_name=jobs[lock["entry_id"]][0],
            queue=str(lock["queue"]),
            since=lock["locked_at"],
            running_seconds=age_seconds(now, lock["locked_at"]),
            worker=lock["worker__name"],
            host=lock["worker__host"],
            pid=lock["worker__pid"],
            progress=_shown(jobs[lock["entry_id"]][1], now),
        )
        for lock in locks
        if lock["entry_id"] in jobs
    ][:limit]


def _shown(report: Progress | None, now: datetime) -> str:
    return "" if report is None else report.shown(now)


def latency_series(start: datetime, now: datetime) -> list[LatencyPoint]:
    """Enqueue-to-start latency quantiles per minute from ``start`` to ``now``. One query."""
    return QueueLatencyMinute.objects.per_minute(start, now)


def depth_series(start: datetime, now: datetime) -> list[DepthPoint]:
    """The leader's depth samples per minute from ``start`` to ``now``. One query."""
    return QueueDepthMinute.objects.per_minute(start, now)


@dataclass(frozen=True)
class TablesPanel:
    """django_iq's tables with their sizes, oldest records and pruning, and those to warn of."""

    tables: list[TableStatus]

    @property
    def behind(self) -> list[TableStatus]:
        """Tables whose oldest record is older than their retention allows."""
        return [table for table in self.tables if table.is_behind]

    @property
    def unreadable(self) -> list[TableStatus]:
        return [table for table in self.tables if table.error is not None]


def tables_panel(now: datetime) -> TablesPanel:
    """The tables panel at ``now``: one or two queries per table (``read_table_status``)."""
    return TablesPanel(read_table_status(now))
