"""Outcome records partitioned by time on PostgreSQL (docs/howto/outcomes.md#retention-and-cost).

An outcome record is written for every run, about 7 million rows an hour at 2,000 runs a
second. Deleting them row by row once they expire leaves as many dead rows for vacuum to clean
up, under the workers' writes. On PostgreSQL the table is instead partitioned by range of
``finished_at`` (migration 0032): one partition per ``OUTCOME_PARTITION_SECONDS``, aligned to
multiples of it in UTC, and a ``DEFAULT`` partition that takes any row no range covers (the
leader down for hours, a clock far off), so a run's acknowledgement never fails for want of a
partition. The leader's pruning duty (``maintain``):

- creates partitions ahead of the clock, each as a plain table first and then attached, with
  the rows the default partition holds for the new range moved into it, all in one
  transaction under a brief ``ACCESS EXCLUSIVE`` lock on the parent, waited for at most
  ``LOCK_TIMEOUT_MS``. Attaching alone would lock less, but a statement planned before the
  commit with the old list of partitions would run after it and find the moved rows in
  neither partition (a waiter would find an ended entry's record nowhere);
- drops a partition once all of it is past ``OUTCOME_RETENTION_SECONDS``: it is detached (a
  catalog change under a brief ``ACCESS EXCLUSIVE`` lock on the parent, which the leader waits
  for at most ``LOCK_TIMEOUT_MS``, so no insert queues behind it for longer), then dropped as a
  table of its own, which locks nothing the workers use;
- deletes expired rows of the default partition in bounded batches, as on other databases,
  and those of the table as it was before the migration (its first partition, from
  ``MINVALUE``), until all of it is past the retention and it is dropped whole.

A record is therefore kept at least ``OUTCOME_RETENTION_SECONDS``, and at most that plus one
partition's width and a pruning interval. MariaDB and SQLite keep the table whole and the
bounded deletes of ``RunOutcome.objects.prune``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, router
from django.db.utils import OperationalError

from django_iq.conf import iq_settings
from django_iq.logs import get_logger
from django_iq.models import RunOutcome

if TYPE_CHECKING:
    from django_iq.duties.base import Fence

logger = get_logger("django_iq.pruning")

# How long a schema change on the outcome table waits for its lock before giving up until the
# next pass: workers' inserts queued behind it wait no longer than this.
LOCK_TIMEOUT_MS = 20
# Tries of one such change in a pass, a short pause between them.
LOCK_TRIES = 5
LOCK_RETRY_PAUSE_SECONDS = 0.2
# Partitions created in one pass at most (a leader back after a long outage catches up over
# several passes).
MAX_CREATED_PER_PASS = 48

# The partition key: when the run finished.
FINISHED_AT = "finished_at"
# PostgreSQL's error code for a lock not granted within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"

Statement = tuple[str, list[Any]]

# The rows the default partition holds for a new partition's range, moved into it.
MOVE_FROM_DEFAULT = (
    "WITH moved AS (DELETE FROM {default} WHERE {finished} >= %s AND {finished} < %s "
    "RETURNING {columns}) INSERT INTO {partition} ({columns}) SELECT {columns} FROM moved"
)
# One batch of expired rows of the default partition (or of the table before partitioning).
PRUNE_DEFAULT = (
    "DELETE FROM {default} WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM {default} WHERE {finished} < %s LIMIT %s))"
)

_BOUND = re.compile(r"FOR VALUES FROM \((.+)\) TO \((.+)\)")


@dataclass(frozen=True)
class Partition:
    """One partition of the outcome table: its range of ``finished_at`` (None: unbounded on
    that side), or the default partition."""

    name: str
    lower: datetime | None
    upper: datetime | None
    is_default: bool = False


@dataclass
class PartitionPass:
    """What one pass did: partitions created and dropped (by name), rows moved out of the
    default partition into new ones, expired rows deleted from the default partition, and
    changes left for a later pass because their lock was not granted in time."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    moved: int = 0
    deleted: int = 0
    postponed: list[str] = field(default_factory=list)


def table() -> str:
    return str(RunOutcome._meta.db_table)


def default_partition() -> str:
    return f"{table()}_default"


def database() -> str:
    return router.db_for_write(RunOutcome) or "default"


def is_partitioned(db: str | None = None) -> bool:
    """Whether the outcome table is partitioned (PostgreSQL, after migration 0032)."""
    connection = connections[db or database()]
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [table()]
        )
        return cursor.fetchone() is not None


def partitions(db: str | None = None) -> list[Partition]:
    """The outcome table's partitions, oldest range first, the default partition last."""
    connection = connections[db or database()]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [table()],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        if bound == "DEFAULT":
            found.append(Partition(name, None, None, is_default=True))
            continue
        match = _BOUND.fullmatch(bound)
        if match is None:  # not a range this module makes: left alone
            logger.warning("outcome partition with an unknown bound name=%s bound=%s", name, bound)
            continue
        found.append(Partition(name, _bound_value(match[1]), _bound_value(match[2])))
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(found, key=lambda p: (p.is_default, p.lower or epoch))


def _bound_value(text: str) -> datetime | None:
    """A range bound as ``pg_get_expr`` prints it: ``MINVALUE``/``MAXVALUE``, or a quoted
    timestamp with its offset."""
    if text in ("MINVALUE", "MAXVALUE"):
        return None
    return datetime.fromisoformat(text.strip("'"))


def aligned(moment: datetime, width: float) -> datetime:
    """The start of the partition of ``width`` seconds that holds ``moment``: partitions are
    aligned to multiples of their width since the Unix epoch, in UTC."""
    seconds = moment.timestamp()
    return datetime.fromtimestamp(seconds - seconds % width, tz=UTC)


def partition_name(lower: datetime) -> str:
    return f"{table()}_p{lower.astimezone(UTC):%Y%m%d%H%M%S}"


def maintain(now: datetime, fence: Fence, batch_size: int, batches: int) -> PartitionPass:
    """One pass of the leader over the outcome table's partitions (see the module's text):
    drop the expired ones, create the ones due ahead of ``now``, prune the default partition
    (up to ``batches`` batches of ``batch_size`` rows). A change whose lock is not granted
    within ``LOCK_TIMEOUT_MS`` (a long query reading the table, say) is tried again a few
    times, then left for the next pass."""
    db = database()
    result = PartitionPass()
    retention = timedelta(seconds=iq_settings.OUTCOME_RETENTION_SECONDS)
    width = float(iq_settings.OUTCOME_PARTITION_SECONDS)
    cutoff = now - retention
    _drop_detached(db, fence, result)
    existing = partitions(db)
    for partition in existing:
        if not partition.is_default and partition.upper is not None and partition.upper <= cutoff:
            _drop(db, partition, fence, result)
    ranges = [p for p in existing if not p.is_default]
    ahead = max(3 * width, 2 * float(iq_settings.PRUNE_INTERVAL_SECONDS))
    until = now + timedelta(seconds=ahead)
    newest = max((p.upper for p in ranges if p.upper is not None), default=None)
    # No partition is made for a range that ended before now: rows written there while the
    # leader was away (past the partitions made ahead) stay in the default partition, whose
    # rows expire one by one below. The partition made first is the one for now, which takes
    # the workers' writes out of the default partition at once.
    start = aligned(now, width) if newest is None else max(newest, aligned(now, width))
    if any(p.upper is None for p in ranges):
        start = until  # a range open to MAXVALUE (made by hand): nothing can follow it
    while start < until and len(result.created) < MAX_CREATED_PER_PASS:
        end = aligned(start, width) + timedelta(seconds=width)
        if not _create(db, start, end, fence, result):
            break
        start = end
    # Row by row, as on other databases: the default partition, and the table as it was before
    # it was partitioned (its records expire as they did, until all of it goes at once).
    whole = [default_partition()] + [
        p.name
        for p in existing
        if p.lower is None and not p.is_default and p.name not in result.dropped
    ]
    for name in whole:
        for _ in range(batches):
            deleted = _prune_rows(db, name, cutoff, batch_size, fence)
            result.deleted += deleted
            if deleted < batch_size:
                break
    return result


def _locked_change(db: str, what: str, fence: Fence, statements: list[Statement]) -> int | None:
    """Run ``statements`` in one fenced transaction in which a lock is waited for at most
    ``LOCK_TIMEOUT_MS``, up to ``LOCK_TRIES`` times; return the rows the statements touched
    (as far as they count them), or None if a lock was never granted in time."""
    connection = connections[db]
    for attempt in range(LOCK_TRIES):
        if attempt:
            time.sleep(LOCK_RETRY_PAUSE_SECONDS)
        try:
            with fence(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                touched = 0
                for sql, params in statements:
                    cursor.execute(sql, params)
                    touched += max(cursor.rowcount, 0)
                return touched
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            logger.info("outcome partitions: lock not granted what=%s try=%s", what, attempt + 1)
    return None


def _columns() -> str:
    quote = connections[database()].ops.quote_name
    return ", ".join(quote(f.column) for f in RunOutcome._meta.concrete_fields if f.column)


def _create(db: str, lower: datetime, upper: datetime, fence: Fence, result: PartitionPass) -> bool:
    """Create the partition for ``[lower, upper)``, moving into it the rows the default
    partition holds for that range; False if its lock was not granted in time."""
    quote = connections[db].ops.quote_name
    name = partition_name(lower)
    parent, default, columns = quote(table()), quote(default_partition()), _columns()
    finished = quote(FINISHED_AT)
    bounds: list[Any] = [lower, upper]
    moved = _locked_change(
        db,
        f"create {name}",
        fence,
        [
            # The whole table, first: a statement planned before the commit with the old list
            # of partitions would otherwise run after it and find the moved rows in neither
            # (and a write routed to the default partition would break its new constraint).
            (f"LOCK TABLE {parent} IN ACCESS EXCLUSIVE MODE", []),
            (
                f"CREATE TABLE {quote(name)} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
                [],
            ),
            # The range as a constraint first: attaching then skips scanning the new table.
            (
                f"ALTER TABLE {quote(name)} ADD CONSTRAINT {quote(name + '_range')} "
                f"CHECK ({finished} >= %s AND {finished} < %s)",
                bounds,
            ),
            (
                MOVE_FROM_DEFAULT.format(
                    default=default, finished=finished, columns=columns, partition=quote(name)
                ),
                bounds,
            ),
            (
                f"ALTER TABLE {parent} ATTACH PARTITION {quote(name)} FOR VALUES FROM (%s) TO (%s)",
                bounds,
            ),
        ],
    )
    if moved is None:
        result.postponed.append(name)
        return False
    result.created.append(name)
    result.moved += moved
    logger.info("outcome partition created name=%s moved=%s", name, moved)
    return True


def _drop(db: str, partition: Partition, fence: Fence, result: PartitionPass) -> None:
    """Detach ``partition`` (a brief lock on the parent, waited for at most
    ``LOCK_TIMEOUT_MS``), then drop it as a table of its own."""
    quote = connections[db].ops.quote_name
    detached = _locked_change(
        db,
        f"detach {partition.name}",
        fence,
        [(f"ALTER TABLE {quote(table())} DETACH PARTITION {quote(partition.name)}", [])],
    )
    if detached is None:
        result.postponed.append(partition.name)
        return
    with fence(), connections[db].cursor() as cursor:
        cursor.execute(f"DROP TABLE {quote(partition.name)}")
    result.dropped.append(partition.name)
    logger.info("outcome partition dropped name=%s", partition.name)


def _drop_detached(db: str, fence: Fence, result: PartitionPass) -> None:
    """Drop partitions detached by a pass that stopped before dropping them (tables named as
    this module names partitions that are no partition of the table any more)."""
    with connections[db].cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE %s "
            "AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass(%s)) "
            "AND NOT c.relispartition",
            [table().replace("_", r"\_") + r"\_p%", table()],
        )
        leftovers = [name for (name,) in cursor.fetchall()]
    quote = connections[db].ops.quote_name
    for name in leftovers:
        with fence(), connections[db].cursor() as cursor:
            cursor.execute(f"DROP TABLE {quote(name)}")
        result.dropped.append(name)
        logger.info("outcome partition dropped name=%s (detached earlier)", name)


def _prune_rows(db: str, partition: str, cutoff: datetime, batch_size: int, fence: Fence) -> int:
    """Delete up to ``batch_size`` rows of ``partition`` that finished before ``cutoff``;
    return how many."""
    quote = connections[db].ops.quote_name
    default = quote(partition)
    finished = quote(FINISHED_AT)
    with fence(), connections[db].cursor() as cursor:
        cursor.execute(
            PRUNE_DEFAULT.format(default=default, finished=finished), [cutoff, batch_size]
        )
        return max(int(cursor.rowcount), 0)
