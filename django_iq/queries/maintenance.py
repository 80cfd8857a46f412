"""Housekeeping and reads: additive metric upserts, the leader's transaction bounds,
snapshot reads, row estimates, dead rows and vacuum."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections

from django_iq.queries.common import _template

# Add counts to per-key rows, creating them as needed, in one statement.
# PostgreSQL and SQLite: ON CONFLICT ... DO UPDATE with EXCLUDED; MariaDB: ON DUPLICATE KEY UPDATE.
UPSERT_ADD_ON_CONFLICT = (
    "INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT ({keys}) DO UPDATE SET {sets}"
)


UPSERT_ADD_DUPLICATE_KEY = (
    "INSERT INTO {table} ({columns}) VALUES {values} ON DUPLICATE KEY UPDATE {sets}"
)


_UPSERT_ADD_BY_VENDOR = {
    "postgresql": UPSERT_ADD_ON_CONFLICT,
    "sqlite": UPSERT_ADD_ON_CONFLICT,
    "mysql": UPSERT_ADD_DUPLICATE_KEY,
}


# (model, key fields, rows): the rows to add to one table, as upsert_add takes them.
UpsertRows = tuple[Any, Sequence[str], Sequence[dict[str, Any]]]


def upsert_add(using: str, model: Any, keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """For each row, insert it, or add its non-key values to the existing row with its keys.

    Rows are written in key order, so two workers flushing at once cannot deadlock.
    """
    if not rows:
        return
    sql, params = _upsert_add_sql(using, model, keys, rows)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)


def upsert_add_all(using: str, tables: Sequence[UpsertRows]) -> None:
    """``upsert_add`` of several tables, always in the order given, so that writers adding to
    the same rows cannot deadlock. PostgreSQL: one statement (each table's upsert a ``WITH``
    part): rows every worker adds to (this minute's counts of a queue) are locked only while
    the statement runs, never across the writer's round trips; elsewhere one per table.
    Outside a transaction the statement commits by itself; the caller of several statements
    holds the transaction."""
    tables = [table for table in tables if table[2]]
    if not tables:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        for model, keys, rows in tables:
            upsert_add(using, model, keys, rows)
        return
    parts: list[str] = []
    params: list[Any] = []
    for model, keys, rows in tables:
        sql, values = _upsert_add_sql(using, model, keys, rows)
        parts.append(f"u{len(parts)} AS ({sql} RETURNING 1)")
        params.extend(values)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(parts)} SELECT 1", params)


def _upsert_add_sql(
    using: str, model: Any, keys: Sequence[str], rows: Sequence[dict[str, Any]]
) -> tuple[str, list[Any]]:
    connection = connections[using]
    quote = connection.ops.quote_name
    opts = model._meta
    table = quote(str(opts.db_table))
    names = list(rows[0])
    columns = {name: quote(str(opts.get_field(name).column)) for name in names}
    added = [name for name in names if name not in keys]
    vendor = connection.vendor
    if vendor == "mysql":
        sets = ", ".join(f"{columns[n]} = {columns[n]} + VALUES({columns[n]})" for n in added)
    else:
        sets = ", ".join(
            f"{columns[n]} = {table}.{columns[n]} + EXCLUDED.{columns[n]}" for n in added
        )
    ordered = sorted(rows, key=lambda row: tuple(str(row[k]) for k in keys))
    sql = _template(_UPSERT_ADD_BY_VENDOR, vendor, "record metrics").format(
        table=table,
        columns=", ".join(columns[n] for n in names),
        values=", ".join(["(" + ", ".join(["%s"] * len(names)) + ")"] * len(ordered)),
        keys=", ".join(columns[k] for k in keys),
        sets=sets,
    )
    params: list[Any] = []
    for row in ordered:
        for name in names:
            params.append(opts.get_field(name).get_db_prep_value(row[name], connection))
    return sql, params


# Bound a leader's transaction: the server ends it once left idle (its process paused or hung)
# for {idle}, so the row locks it holds (the lease row) do not block its successor, and a
# statement waiting {lock_wait} for a row lock fails instead of stalling a duty past the lease.
# PostgreSQL: set_config(..., true) lasts until the transaction ends, so it is set in every
# transaction that needs it, and nothing reaches another client's transaction through a pooler
# in transaction mode (PgBouncer), which hands a server connection to a new client after every
# transaction. MariaDB: session variables (it has no transaction-local form); sent again in
# every transaction, so a connection replaced since the last one is bounded too.
_TRANSACTION_TIMEOUTS_BY_VENDOR = {
    "postgresql": (
        "SELECT set_config('idle_in_transaction_session_timeout', %s, true), "
        "set_config('lock_timeout', %s, true)"
    ),
    "mysql": "SET SESSION idle_transaction_timeout = %s, SESSION innodb_lock_wait_timeout = %s",
}


def bound_transaction(using: str, idle_seconds: float, lock_wait_seconds: float) -> bool:
    """In the current transaction on ``using``, have the server end it after ``idle_seconds``
    idle and fail a statement after ``lock_wait_seconds`` waiting for a row lock; return False
    where the database has no such settings (SQLite, whose writers wait on the file).

    Call it inside ``atomic()``: on PostgreSQL the bounds end with the transaction.
    """
    connection = connections[using]
    sql = _TRANSACTION_TIMEOUTS_BY_VENDOR.get(connection.vendor)
    if sql is None:
        return False
    if connection.vendor == "postgresql":
        params: list[Any] = [f"{int(idle_seconds * 1000)}ms", f"{int(lock_wait_seconds * 1000)}ms"]
    else:
        params = [max(1, int(idle_seconds)), max(1, int(lock_wait_seconds))]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return True


# Open a read-only transaction whose reads all see one snapshot of committed data, so that counts
# read by several statements cannot contradict each other (a claim committed between two of them
# would otherwise be seen by one and not the other). PostgreSQL: REPEATABLE READ takes the
# snapshot at the first read. MariaDB/MySQL: SET TRANSACTION only applies to the next
# transaction and is refused inside one, so it is sent before START TRANSACTION; Django's
# sessions run at READ COMMITTED, where WITH CONSISTENT SNAPSHOT would be ignored. SQLite: a
# deferred read transaction in WAL mode reads one snapshot and, unlike the IMMEDIATE mode a
# project may configure for atomic(), takes no write lock, so workers keep writing meanwhile.
_SNAPSHOT_BEGIN_BY_VENDOR = {
    "postgresql": ("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",),
    "mysql": (
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    ),
    "sqlite": ("BEGIN DEFERRED",),
}


# The aliases whose connection (one per thread) is inside ``snapshot_reads`` now.
_in_snapshot = threading.local()


@contextmanager
def snapshot_reads(using: str) -> Iterator[None]:
    """Run the reads of the ``with`` block in one read-only transaction that sees one snapshot.

    Inside a transaction of the caller's (``atomic()``, or an enclosing ``snapshot_reads``) the
    block runs in it, and its isolation decides what is seen. The transaction is opened and
    closed with plain statements, not ``atomic()``, which cannot set an isolation level and on
    SQLite would take the write lock when the project configures ``"transaction_mode":
    "IMMEDIATE"``; nothing in the block may write or open ``atomic()``.
    """
    connection = connections[using]
    active: set[str] = getattr(_in_snapshot, "aliases", set())
    if connection.in_atomic_block or not connection.get_autocommit() or using in active:
        yield
        return
    statements = _template(_SNAPSHOT_BEGIN_BY_VENDOR, connection.vendor, "read a snapshot")
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)
    _in_snapshot.aliases = active | {using}
    try:
        yield
    except BaseException:
        _in_snapshot.aliases = active
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")
        raise
    _in_snapshot.aliases = active
    with connection.cursor() as cursor:
        cursor.execute("COMMIT")


# The planner's estimate of a table's rows (pg_class.reltuples, kept up to date by VACUUM and
# ANALYZE): read in constant time, where COUNT(*) reads the whole table. -1 until first analyzed.
ESTIMATED_ROWS_POSTGRESQL = "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)"


# MariaDB's information_schema estimate can be off by half on InnoDB and SQLite keeps none, so
# callers count (with a cap) there instead.
_ESTIMATED_ROWS_BY_VENDOR = {"postgresql": ESTIMATED_ROWS_POSTGRESQL}


def estimated_row_count(using: str, table: str) -> int | None:
    """Return the database's estimate of how many rows ``table`` holds, without counting them.

    None where the database keeps no usable estimate (MariaDB, SQLite) or has not made one
    yet (a PostgreSQL table never vacuumed or analyzed).
    """
    connection = connections[using]
    sql = _ESTIMATED_ROWS_BY_VENDOR.get(connection.vendor)
    if sql is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql, [connection.ops.quote_name(table)])
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


# Dead rows per table, from PostgreSQL's statistics (what autovacuum reads): every claim, success
# and heartbeat leaves one, and a queue's hot tables are small but churn all day.
DEAD_ROWS_POSTGRESQL = (
    "SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)"
)


def dead_rows(using: str, tables: Sequence[str]) -> dict[str, tuple[int, int]] | None:
    """``{table: (live rows, dead rows)}`` as the server last counted them; None where the
    database keeps no such statistics (SQLite, MariaDB: their engines clean up as they go)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(DEAD_ROWS_POSTGRESQL, [list(tables)])
        return {name: (int(live), int(dead)) for name, live, dead in cursor.fetchall()}


def vacuum(using: str, table: str) -> None:
    """``VACUUM (ANALYZE)`` one table; outside any transaction (PostgreSQL refuses it inside)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")
