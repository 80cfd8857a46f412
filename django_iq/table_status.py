"""The size of each of django_iq's tables, and for those the leader prunes, the oldest record
kept and whether pruning has fallen behind: what ``iq_status`` and the dashboard show.

Each table is read on the database its model is routed to (``DJANGO_IQ["DATABASE"]``), in
two queries at most: the catalog's figures (``queries.table_size``), then the oldest record by
the column pruning goes by, an index read for every table but the workers' (a small one). A
table that cannot be read is reported as such and logged; the others are read still.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections, router, transaction
from django.db.models import Min, Model, QuerySet
from django.utils import timezone

from django_iq.conf import iq_settings
from django_iq.logs import get_logger
from django_iq.models import (
    EntryError,
    JobMinute,
    OperatorAction,
    QueueDepthMinute,
    QueueLatencyMinute,
    QueueMinute,
    RunOutcome,
    Worker,
)
from django_iq.queries import table_size
from django_iq.routers import APP_LABEL
from django_iq.wording import byte_size, duration

logger = get_logger(__name__)

# Added to every retention before a table counts as behind: pruning runs every
# PRUNE_INTERVAL_SECONDS, so a record past its retention waits for the next pass, and a pass
# may come late (a busy leader, a new leader taking the lease); one more minute for the clocks.
SLACK_INTERVALS = 2
SLACK_SECONDS = 60.0


@dataclass(frozen=True)
class Retention:
    """How the leader's pruning duty picks a table's old records: by ``column``, once older
    than the setting ``setting``; ``prunable`` narrows the rows to those it may delete."""

    column: str
    setting: str
    prunable: Callable[[QuerySet[Any]], QuerySet[Any]] = lambda rows: rows
    # Outcome records on PostgreSQL may live in partitions, dropped whole (see retention_behind).
    may_be_partitioned: bool = False

    @property
    def seconds(self) -> float:
        return float(getattr(iq_settings, self.setting))


def retentions() -> dict[type[Model], Retention]:
    """The tables ``duties/pruning.py`` deletes from by age, as it chooses their records.

    Left out: rate-limited starts (claims delete them as they go; their index leads with the
    job), unique keys (kept until their own window ends, no setting), batches (gone with their
    callback entry, whichever of two columns ended them) and the halves of new API tokens.
    """
    # Every column here but the workers' stopped_at leads an index (the models' Meta), so each
    # MIN() reads one end of an index; stopped_at is not indexed, but the workers' table holds
    # a row per process that ran within WORKER_RETENTION_SECONDS.
    minutes = Retention("minute", "METRICS_RETENTION_SECONDS")
    return {
        RunOutcome: Retention("finished_at", "OUTCOME_RETENTION_SECONDS", may_be_partitioned=True),
        # Every error record, final or not: pruning goes by failed_at alone.
        EntryError: Retention("failed_at", "ERROR_RETENTION_SECONDS"),
        # A stopped worker naming database sessions still to be ended is kept until they are.
        Worker: Retention(
            "stopped_at",
            "WORKER_RETENTION_SECONDS",
            prunable=lambda rows: rows.filter(sessions=[]),
        ),
        QueueMinute: minutes,
        JobMinute: minutes,
        QueueLatencyMinute: minutes,
        QueueDepthMinute: minutes,
        OperatorAction: Retention("at", "AUDIT_RETENTION_SECONDS"),
    }


def retention_behind(
    oldest_age_seconds: float | None, retention_seconds: float, partition_seconds: float = 0.0
) -> bool:
    """Whether pruning has fallen behind on a table whose oldest record is
    ``oldest_age_seconds`` old (None: the table is empty) and whose records are kept
    ``retention_seconds``.

    It has when that record is older than the retention plus a slack of two pruning passes
    (2 x PRUNE_INTERVAL_SECONDS) and a minute: a record just past its retention waits for the
    next pass, which may come late. A partitioned table (outcome records on PostgreSQL) loses
    a partition only once all of it is past the retention, so its oldest record may be a
    partition older still: ``partition_seconds`` (OUTCOME_PARTITION_SECONDS) is added then.
    """
    if oldest_age_seconds is None:
        return False
    slack = SLACK_INTERVALS * float(iq_settings.PRUNE_INTERVAL_SECONDS) + SLACK_SECONDS
    return oldest_age_seconds > retention_seconds + slack + partition_seconds


@dataclass(frozen=True)
class TableStatus:
    """One of django_iq's tables as read at one moment. The sizes are the database's own
    figures: ``None`` where it gives none (rows on SQLite, a PostgreSQL table never analyzed,
    sizes on an SQLite without ``dbstat``). The retention fields are empty for tables the
    leader does not prune by age. ``error``: why the table could not be read (its other
    fields are then empty)."""

    model: str
    table: str
    database: str
    size_bytes: int | None = None
    estimated_rows: int | None = None
    # The column pruning goes by, and the setting that says for how long records are kept.
    time_column: str = ""
    retention_setting: str = ""
    retention_seconds: float | None = None
    # The oldest record pruning may delete, and its age; None when there is none.
    oldest_at: datetime | None = None
    oldest_age_seconds: float | None = None
    is_behind: bool = False
    error: str | None = None

    @property
    def pruning(self) -> str:
        """``"ok"`` or ``"behind"`` for a table pruned by age, ``"unreadable"`` for one that
        could not be read, ``""`` for the others."""
        if self.error is not None:
            return "unreadable"
        if not self.retention_setting:
            return ""
        return "behind" if self.is_behind else "ok"

    @property
    def size(self) -> str:
        return byte_size(self.size_bytes)

    @property
    def rows(self) -> str:
        return "-" if self.estimated_rows is None else f"{self.estimated_rows:,}"

    @property
    def oldest(self) -> str:
        """The oldest record's age (``"2 d 1 h ago"``), ``"-"`` without one."""
        if self.oldest_age_seconds is None:
            return "-"
        return f"{duration(self.oldest_age_seconds)} ago"

    @property
    def retention(self) -> str:
        return duration(self.retention_seconds)

    def describe_behind(self) -> str:
        """The warning shown for a table whose pruning is behind."""
        return (
            f"retention behind: {self.table} keeps records from {self.oldest}, retention is "
            f"{self.retention} ({self.retention_setting})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The table in ``iq_status --json``: datetimes stay datetimes."""
        return {
            "model": self.model,
            "table": self.table,
            "database": self.database,
            "size_bytes": self.size_bytes,
            "estimated_rows": self.estimated_rows,
            "time_column": self.time_column or None,
            "retention_setting": self.retention_setting or None,
            "retention_seconds": self.retention_seconds,
            "oldest_at": self.oldest_at,
            "oldest_age_seconds": self.oldest_age_seconds,
            "retention_behind": self.is_behind,
            "error": self.error,
        }


def watched_models() -> list[type[Model]]:
    """Every model of django_iq with a table of its own (proxies share their parent's)."""
    return [
        model
        for model in apps.get_app_config(APP_LABEL).get_models()
        if not model._meta.proxy and model._meta.managed
    ]


def read_table_status(now: datetime | None = None) -> list[TableStatus]:
    """Read each of django_iq's tables at ``now`` (default: the current time), by table name.
    A fixed number of queries: one or two per table."""
    now = now or timezone.now()
    kept = retentions()
    found = [_read_table(model, kept.get(model), now) for model in watched_models()]
    return sorted(found, key=lambda status: status.table)


def _read_table(model: type[Model], retention: Retention | None, now: datetime) -> TableStatus:
    table = str(model._meta.db_table)
    database = router.db_for_read(model) or "default"
    named = TableStatus(model=model.__name__, table=table, database=database)
    try:
        with _own_failure(database):
            size = table_size(database, table)
            if size is None:
                return replace(named, error="no such table (are django_iq's migrations applied?)")
            if retention is None:
                return replace(
                    named, size_bytes=size.size_bytes, estimated_rows=size.estimated_rows
                )
            rows = retention.prunable(model._default_manager.using(database).all())
            oldest: datetime | None = rows.aggregate(oldest=Min(retention.column))["oldest"]
    except DatabaseError as exc:
        logger.exception("table status unreadable table=%s database=%s", table, database)
        return replace(named, error=f"{type(exc).__name__}: {exc}"[:500])
    age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
    partition_seconds = (
        float(iq_settings.OUTCOME_PARTITION_SECONDS)
        if retention.may_be_partitioned and size.is_partitioned
        else 0.0
    )
    return replace(
        named,
        size_bytes=size.size_bytes,
        estimated_rows=size.estimated_rows,
        time_column=retention.column,
        retention_setting=retention.setting,
        retention_seconds=retention.seconds,
        oldest_at=oldest,
        oldest_age_seconds=age,
        is_behind=retention_behind(age, retention.seconds, partition_seconds),
    )


def _own_failure(database: str) -> AbstractContextManager[Any]:
    """Keep a failed read from spoiling the caller's transaction: inside one, the table's reads
    run in a savepoint (PostgreSQL refuses every later statement of a transaction in which one
    failed). Outside, each read commits on its own and a savepoint is not needed; not opening
    a transaction there also keeps SQLite from taking its write lock when ``atomic()`` is
    configured to (``"transaction_mode": "IMMEDIATE"``)."""
    if connections[database].in_atomic_block:
        return transaction.atomic(using=database)
    return nullcontext()
