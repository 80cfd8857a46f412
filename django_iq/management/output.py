"""What the ``iq_*`` commands share: the text rendering of the operator snapshot and of
django_iq's tables with their sizes and pruning (``iq_status``), aligned columns, durations and
times, plurals, and the checks of queue names an operator typed."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from django.core.management.base import CommandError
from django.utils import timezone

from django_iq.autoscale import Demand
from django_iq.models import Queue
from django_iq.registry import declared_queues
from django_iq.snapshot import ServerSessions, Snapshot
from django_iq.states import COUNTED_STATES, WORKER_DEAD, WORKER_LIVE
from django_iq.table_status import TableStatus
from django_iq.wording import close_names, duration


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


def describe_server_sessions(found: ServerSessions) -> str:
    """One line: the server's sessions against its limit, django_iq's share, the room left."""
    reserved = f", {found.reserved} reserved for superusers" if found.reserved else ""
    return (
        f"Database sessions: {found.in_use} of max_connections {found.max_connections} in use"
        f"{reserved}; django_iq processes hold {found.django_iq}; headroom {found.headroom}"
    )


def render_text(status: Snapshot) -> str:
    """The plain-text report of ``iq_status``: queues, workers and the leader as tables."""
    lines = [f"django_iq status at {format_time(status.now)}", ""]
    lines.append("Queues")
    if status.queues:
        totals = status.totals
        rows: list[list[object]] = [
            [
                q.stats.queue,
                "yes" if q.stats.is_paused else "no",
                *(q.counts[name] for name in COUNTED_STATES),
                duration(q.oldest_waiting_seconds),
                q.merged,
                "ok" if q.stats.is_consistent else "BROKEN",
                q.alarm.reason if q.alarm is not None else "-",
            ]
            for q in status.queues
        ]
        rows.append(
            [
                "(total)",
                "",
                *(totals[name] for name in COUNTED_STATES),
                "",
                status.merged,
                "ok" if status.invariant_holds else "BROKEN",
                "",
            ]
        )
        columns = [
            "QUEUE",
            "PAUSED",
            *(">" + state.upper() for state in COUNTED_STATES),
            ">OLDEST WAITING",
            ">MERGED",
            "INVARIANT",
            "ALARM",
        ]
        lines.append(render_table(columns, rows))
    else:
        lines.append("No queues.")
    lines.append("")

    problems = status.problems
    lines.append(f"Alarms ({len(problems)})")
    lines.extend(f"  {problem.describe()}" for problem in problems)
    if not problems:
        lines.append("None: healthy.")
    lines.append("")

    # Stopped processes are left out of the report: the others are live or dead.
    states = Counter(w.state for w in status.workers)
    lines.append(f"Workers ({states[WORKER_LIVE]} live, {states[WORKER_DEAD]} dead)")
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
            ">SESSIONS",
        ]
        worker_rows: list[list[object]] = [
            [
                w.name,
                w.role,
                w.state,
                f"{duration(w.heartbeat_age_seconds)} ago",
                w.busy_threads,
                w.idle_threads,
                f"{w.cpu_percent:.0f}%",
                f"{w.memory_percent:.0f}%",
                "yes" if w.is_throttled else "no",
                w.sessions if w.is_live and w.sessions is not None else "-",
            ]
            for w in sorted(status.workers, key=lambda w: (not w.is_live, w.role, w.name))
        ]
        lines.append(render_table(columns, worker_rows))
    else:
        lines.append("No running workers.")
    if status.server_sessions is not None:
        lines.append(describe_server_sessions(status.server_sessions))
    lines.append("")

    if status.unserved_jobs:
        lines.append("Jobs no live worker has registered (their entries wait, never tried)")
        lines.append(
            render_table(
                ["JOB", ">WAITING", ">OLDEST WAITING"],
                [
                    [j.job_name, j.waiting, duration(j.oldest_waiting_seconds)]
                    for j in status.unserved_jobs
                ],
            )
        )
        lines.append("")

    lines.append("Leader")
    lines.append(_leader_line(status))
    return "\n".join(lines)


def _leader_line(status: Snapshot) -> str:
    leader = status.leader
    if leader is None or not leader.holder:
        return "None elected: start manage.py runleader."
    left = (leader.expires_at - status.now).total_seconds()
    if leader.is_held:
        return (
            f"{leader.holder}  epoch {leader.epoch}  lease expires in {duration(left)} "
            f"({format_time(leader.expires_at)})"
        )
    return (
        f"None: the lease of {leader.holder} (epoch {leader.epoch}) expired "
        f"{duration(-left)} ago ({format_time(leader.expires_at)}); "
        "is manage.py runleader running?"
    )


def render_tables(tables: Sequence[TableStatus]) -> str:
    """The ``Tables`` section of ``iq_status``: each table's estimated rows, size, oldest
    record kept and retention, whether pruning keeps up (``ok``, ``BEHIND``, ``UNREADABLE``;
    ``-`` for a table not pruned by age), then a line per table behind or unreadable."""
    databases = sorted({table.database for table in tables})
    lines = [f"Tables (database {', '.join(databases)})"]
    rows = [
        [
            table.table,
            table.rows,
            table.size,
            table.oldest,
            table.retention,
            {"ok": "ok", "": "-"}.get(table.pruning, table.pruning.upper()),
        ]
        for table in tables
    ]
    columns = ["TABLE", ">EST. ROWS", ">SIZE", ">OLDEST KEPT", ">RETENTION", "PRUNING"]
    lines.append(render_table(columns, rows))
    lines.extend(f"  {table.describe_behind()}" for table in tables if table.is_behind)
    lines.extend(
        f"  unreadable: {table.table}: {table.error}" for table in tables if table.error is not None
    )
    return "\n".join(lines)


def render_demand(demand: Demand) -> str:
    """The ``Autoscaling`` section of ``iq_status``: the threads the pending entries need
    within the target, in all and per queue with pending entries."""
    lines = [
        f"Autoscaling: {demand.threads_needed} processing threads needed to run the pending "
        f"entries within {demand.target_seconds:g} s ({demand.threads_live} live)"
    ]
    if demand.queues:
        rows = [
            [queue.queue, queue.pending, f"{queue.backlog_seconds:.1f}", queue.threads_needed]
            for queue in demand.queues
        ]
        lines.append(render_table(["QUEUE", ">PENDING", ">BACKLOG S", ">THREADS NEEDED"], rows))
    return "\n".join(lines)


# -- names and counts ------------------------------------------------------------------------


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


def refuse_unknown_queues(names: Sequence[str] | None) -> None:
    """Raise ``CommandError`` naming each of ``names`` that is no known queue."""
    message = unknown_queue_message(names) if names else None
    if message:
        raise CommandError(message)


def unknown_queue_message(names: Sequence[str]) -> str | None:
    """Return a message naming each of ``names`` that is no known queue (with a suggestion),
    and listing the known ones; None when every name is known."""
    known = known_queues()
    unknown = [name for name in names if name not in known]
    if not unknown:
        return None
    described = []
    for name in unknown:
        close = close_names(name, known)
        described.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return (
        f"Unknown {'queue' if len(unknown) == 1 else 'queues'}: {', '.join(described)}. "
        f"Known queues: {', '.join(known) or 'none'}."
    )
