"""The operator's view of the system: a status snapshot (queues, workers, the leader) read
through the managers, its JSON and plain-text renderings, and the helpers the ``iq_*``
commands share to check names and report counts."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_iq.managers import QueueStats
from django_iq.models import Entry, LeaderLease, Queue, Worker
from django_iq.registry import declared_queues
from django_iq.states import COUNTED_STATES

STATE_FIELDS = COUNTED_STATES


@dataclass(frozen=True)
class QueueStatus:
    """One queue's counts per state and its oldest entry awaiting compute."""

    stats: QueueStats
    oldest_waiting_at: datetime | None
    oldest_waiting_seconds: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.stats.queue,
            "is_paused": self.stats.is_paused,
            "counts": {name: getattr(self.stats, name) for name in STATE_FIELDS},
            "invariant_holds": self.stats.invariant_holds,
            "oldest_waiting_enqueued_at": self.oldest_waiting_at,
            "oldest_waiting_seconds": self.oldest_waiting_seconds,
        }


@dataclass(frozen=True)
class WorkerStatus:
    """A worker or leader process that has not stopped, as its last heartbeat reported it."""

    name: str
    role: str
    host: str
    pid: int
    queues: list[str]
    is_live: bool
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    processing_threads: int
    busy_threads: int
    cpu_percent: float
    memory_percent: float
    is_throttled: bool

    @property
    def idle_threads(self) -> int:
        """Processing threads free for work; none for a dead process."""
        return max(0, self.processing_threads - self.busy_threads) if self.is_live else 0

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
class LeaderStatus:
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
class Status:
    """Everything ``iq_status`` shows, read at ``now``."""

    now: datetime
    queues: list[QueueStatus]
    workers: list[WorkerStatus]
    leader: LeaderStatus | None

    @property
    def totals(self) -> dict[str, int]:
        """Counts per state summed over the queues shown."""
        return {name: sum(getattr(q.stats, name) for q in self.queues) for name in STATE_FIELDS}

    @property
    def invariant_holds(self) -> bool:
        return all(q.stats.invariant_holds for q in self.queues)

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``iq_status --json``: keys are stable, datetimes stay datetimes
        (``DjangoJSONEncoder`` writes them in ISO 8601)."""
        return {
            "generated_at": self.now,
            "queues": [q.as_dict() for q in self.queues],
            "totals": self.totals,
            "invariant_holds": self.invariant_holds,
            "workers": [w.as_dict() for w in self.workers],
            "leader": self.leader.as_dict() if self.leader is not None else None,
        }


def read_status(queues: Sequence[str] | None = None, now: datetime | None = None) -> Status:
    """Read queue statistics, the oldest waiting entries, running workers and the lease.

    ``queues`` restricts the queues to those names (a declared queue with no row yet shows
    zeros) and the workers to those serving at least one of them. Workers that stopped
    cleanly are left out; a worker that stopped sending heartbeats shows as dead.
    """
    now = now or timezone.now()
    stats = {row.queue: row for row in Queue.objects.stats(queues)}
    for name in queues or ():
        stats.setdefault(name, _empty_stats(name))
    oldest = Entry.objects.oldest_waiting()
    queue_rows = [
        QueueStatus(
            stats=stats[name],
            oldest_waiting_at=oldest.get(name),
            oldest_waiting_seconds=_age(now, oldest[name]) if name in oldest else None,
        )
        for name in sorted(stats)
    ]
    # Liveness is decided by Worker.objects.live() in database time, as a subquery.
    rows = (
        Worker.objects.filter(stopped_at__isnull=True)
        .annotate(is_live=Exists(Worker.objects.live().filter(pk=OuterRef("pk"))))
        .order_by("-is_live", "role", "name")
    )
    wanted = set(queues or ())
    workers = [
        WorkerStatus(
            name=w.name,
            role=w.role,
            host=w.host,
            pid=w.pid,
            queues=list(w.queues or []),
            is_live=bool(w.is_live),
            heartbeat_at=w.heartbeat_at,
            heartbeat_age_seconds=_age(now, w.heartbeat_at),
            processing_threads=w.processing_threads,
            busy_threads=w.busy_threads,
            cpu_percent=w.cpu_percent,
            memory_percent=w.memory_percent,
            is_throttled=w.is_throttled,
        )
        for w in rows
        # A worker with no queue list serves every queue.
        if not wanted or not w.queues or wanted.intersection(w.queues)
    ]
    return Status(now=now, queues=queue_rows, workers=workers, leader=_leader(now))


def _leader(now: datetime) -> LeaderStatus | None:
    lease: LeaderLease | None = LeaderLease.objects.current()
    if lease is None:
        return None
    return LeaderStatus(
        holder=lease.holder,
        epoch=lease.epoch,
        expires_at=lease.expires_at,
        acquired_at=lease.acquired_at,
        is_held=bool(lease.holder) and lease.expires_at > now,
    )


def _empty_stats(name: str) -> QueueStats:
    counts = dict.fromkeys(STATE_FIELDS, 0)
    return QueueStats(queue=name, is_paused=False, **counts)


def _age(now: datetime, then: datetime) -> float:
    """Seconds from ``then`` to ``now``; never negative when clocks differ a little."""
    return max(0.0, (now - then).total_seconds())


# -- rendering -------------------------------------------------------------------------------


def format_seconds(seconds: float | None) -> str:
    """Format a duration compactly for a table: ``42s``, ``3m05s``, ``2h10m``, ``3d04h``;
    ``-`` for None."""
    if seconds is None:
        return "-"
    whole = int(max(0.0, seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86_400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86_400}d{whole % 86_400 // 3600:02d}h"


def format_time(moment: datetime) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}"


def render_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Align ``rows`` under ``columns``; a column whose name starts with ``>`` is right-aligned
    (numbers), the others left-aligned. Return the lines joined, without a final newline."""
    headers = [name.lstrip(">") for name in columns]
    right = [name.startswith(">") for name in columns]
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in [headers, *cells]) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if is_right else value.ljust(width)
            for value, width, is_right in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join(line(values) for values in [headers, *cells])


def render_text(status: Status) -> str:
    """The plain-text report of ``iq_status``: queues, workers and the leader as tables."""
    lines = [f"django_iq status at {format_time(status.now)}", ""]
    lines.append("Queues")
    if status.queues:
        totals = status.totals
        rows: list[list[object]] = [
            [
                q.stats.queue,
                "yes" if q.stats.is_paused else "no",
                *(getattr(q.stats, name) for name in STATE_FIELDS),
                format_seconds(q.oldest_waiting_seconds),
                "ok" if q.stats.invariant_holds else "BROKEN",
            ]
            for q in status.queues
        ]
        rows.append(
            [
                "(total)",
                "",
                *(totals[name] for name in STATE_FIELDS),
                "",
                "ok" if status.invariant_holds else "BROKEN",
            ]
        )
        columns = [
            "QUEUE",
            "PAUSED",
            ">INITIAL",
            ">PENDING",
            ">DISABLED",
            ">COMPUTING",
            ">AWAITING",
            ">FAILED",
            ">OLDEST WAITING",
            "INVARIANT",
        ]
        lines.append(render_table(columns, rows))
    else:
        lines.append("No queues.")
    lines.append("")

    live = sum(1 for w in status.workers if w.is_live)
    lines.append(f"Workers ({live} live, {len(status.workers) - live} dead)")
    if status.workers:
        columns = [
            "NAME",
            "ROLE",
            "STATE",
            ">HEARTBEAT",
            ">BUSY",
            ">IDLE",
            ">CPU",
            ">MEMORY",
            "THROTTLED",
        ]
        worker_rows: list[list[object]] = [
            [
                w.name,
                w.role,
                "live" if w.is_live else "dead",
                f"{format_seconds(w.heartbeat_age_seconds)} ago",
                w.busy_threads,
                w.idle_threads,
                f"{w.cpu_percent:.0f}%",
                f"{w.memory_percent:.0f}%",
                "yes" if w.is_throttled else "no",
            ]
            for w in status.workers
        ]
        lines.append(render_table(columns, worker_rows))
    else:
        lines.append("No running workers.")
    lines.append("")

    lines.append("Leader")
    lines.append(_leader_line(status))
    return "\n".join(lines)


def _leader_line(status: Status) -> str:
    leader = status.leader
    if leader is None or not leader.holder:
        return "None elected: start manage.py runleader."
    left = (leader.expires_at - status.now).total_seconds()
    if leader.is_held:
        return (
            f"{leader.holder}  epoch {leader.epoch}  lease expires in {format_seconds(left)} "
            f"({format_time(leader.expires_at)})"
        )
    return (
        f"None: the lease of {leader.holder} (epoch {leader.epoch}) expired "
        f"{format_seconds(-left)} ago ({format_time(leader.expires_at)}); "
        "is manage.py runleader running?"
    )


# -- helpers shared by the iq_* commands -----------------------------------------------------


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 entry"``, ``"3 entries"``."""
    return f"{count} {singular if count == 1 else plural_form or singular + 's'}"


def split_names(value: str) -> list[str]:
    """Parse a comma-separated option such as ``--queues a,b`` (argparse ``type=``)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {value!r}")
    return names


def known_queues() -> list[str]:
    """Queue names an operator may give: those in the database and those declared."""
    names = set(Queue.objects.values_list("name", flat=True)) | set(declared_queues())
    return sorted(names)


def unknown_queue_message(names: Sequence[str]) -> str | None:
    """Return a message naming each of ``names`` that is no known queue (with a suggestion),
    and listing the known ones; None when every name is known."""
    known = known_queues()
    unknown = [name for name in names if name not in known]
    if not unknown:
        return None
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        described.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return (
        f"Unknown {'queue' if len(unknown) == 1 else 'queues'}: {', '.join(described)}. "
        f"Known queues: {', '.join(known) or 'none'}."
    )
