"""Vendor-specific SQL, named and kept in one place, with one dispatch on ``connection.vendor``."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import connections
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from django_iq.appmodels import iq
from django_iq.conf import iq_settings

T = TypeVar("T")


def db_now_plus(seconds: float) -> Any:
    """Database time plus ``seconds``, so leases never depend on the hosts' clocks."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


# Insert group locks, skipping keys another claimer holds, and return the keys actually taken.
# PostgreSQL and SQLite (>= 3.35) both speak ON CONFLICT ... RETURNING.
INSERT_LOCKS_ON_CONFLICT = (
    "INSERT INTO {table} ({key}, {queue}, {worker}, {locked_at}, {entry}, {job}) VALUES {values} "
    "ON CONFLICT ({key}) DO NOTHING RETURNING {id}, {key}"
)
# MariaDB (>= 10.5): INSERT IGNORE skips duplicate keys and RETURNING lists only inserted rows.
INSERT_LOCKS_IGNORE = (
    "INSERT IGNORE INTO {table} ({key}, {queue}, {worker}, {locked_at}, {entry}, {job}) "
    "VALUES {values} "
    "RETURNING {id}, {key}"
)

_INSERT_LOCKS_BY_VENDOR = {
    "postgresql": INSERT_LOCKS_ON_CONFLICT,
    "sqlite": INSERT_LOCKS_ON_CONFLICT,
    "mysql": INSERT_LOCKS_IGNORE,
}


def columns(connection: Any, model: Any) -> dict[str, str]:
    """Field name to quoted column name, for each concrete field of ``model``."""
    quote = connection.ops.quote_name
    return {f.name: str(quote(str(f.column))) for f in model._meta.concrete_fields}


def _template(templates: Mapping[str, T], vendor: str, what: str) -> T:
    try:
        return templates[vendor]
    except KeyError:
        raise NotImplementedError(
            f"django_iq cannot {what} on the {vendor!r} database; supported: "
            "PostgreSQL, MariaDB/MySQL and SQLite."
        ) from None


# The database's clock as the row is written (PostgreSQL's CURRENT_TIMESTAMP and NOW() are the
# start of the transaction; CLOCK_TIMESTAMP() is not). A lock's locked_at is stamped this way,
# after its transaction holds every row lock it waited for.
_DB_CLOCK_BY_VENDOR = {
    "postgresql": "CLOCK_TIMESTAMP()",
    "mysql": "CURRENT_TIMESTAMP(6)",
    "sqlite": "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')",
}


def insert_group_locks(
    using: str,
    keys: Mapping[str, int],
    queue: str,
    worker_id: int | None,
    job_name: str | None = None,
) -> dict[str, int]:
    """Insert a lock for each key not already locked; return ``{key: lock id}`` for those taken.

    ``keys`` maps each lock key to the first entry claimed under it; ``job_name`` is the job of
    a claim under a cap (counted against it while the lock lives). ``locked_at`` is the
    database's clock at the insert, not the claimer's clock before it waited for row locks.

    Keys are inserted in sorted order so two claimers waiting on each other's uncommitted
    inserts always wait in the same direction and cannot deadlock.
    """
    if not keys:
        return {}
    connection = connections[using]
    quote = connection.ops.quote_name
    opts = iq.GroupLock._meta
    column = columns(connection, iq.GroupLock)
    ordered = sorted(set(keys))
    sql = _template(_INSERT_LOCKS_BY_VENDOR, connection.vendor, "claim entries").format(
        table=quote(str(opts.db_table)),
        key=column["key"],
        queue=column["queue"],
        worker=column["worker"],
        locked_at=column["locked_at"],
        entry=column["entry_id"],
        job=column["job_name"],
        id=column["id"],
        values=", ".join(
            [f"(%s, %s, %s, {_template(_DB_CLOCK_BY_VENDOR, connection.vendor, 'claim')}, %s, %s)"]
            * len(ordered)
        ),
    )
    params: list[Any] = []
    for key in ordered:
        params.extend((key, queue, worker_id, keys[key], job_name))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {key: lock_id for lock_id, key in cursor.fetchall()}


# Take a unique key with a window (unique_for) in one statement: insert its row, or take the row
# that is there if no window runs (expires_at NULL: its entry was cancelled; or in the past),
# keeping this enqueue's window. The row comes back only if it was taken. ON CONFLICT locks the
# row either way and reads its latest version, so a window started by a finish that committed
# meanwhile is seen. MariaDB has no such statement and takes the ORM's update, then insert.
TAKE_UNIQUE_KEY_ON_CONFLICT = (
    "INSERT INTO {table} ({key}, {expires_at}, {window}) VALUES (%s, NULL, %s) "
    "ON CONFLICT ({key}) DO UPDATE SET {expires_at} = NULL, {window} = EXCLUDED.{window} "
    "WHERE {table}.{expires_at} IS NULL OR {table}.{expires_at} <= {now} RETURNING {id}"
)
# The database's clock as Django's Now() reads it, so the windows the ORM starts compare alike.
_NOW_BY_VENDOR = {
    "postgresql": "STATEMENT_TIMESTAMP()",
    "sqlite": "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')",
}


def take_unique_key(using: str, key: str, window: timedelta) -> bool | None:
    """Take ``key`` for ``window`` unless its window runs; return whether it was taken, or None
    where this takes the ORM instead (MariaDB). Call in the transaction that wrote its entry."""
    connection = connections[using]
    now = _NOW_BY_VENDOR.get(connection.vendor)
    if now is None:
        return None
    quote = connection.ops.quote_name
    sql = TAKE_UNIQUE_KEY_ON_CONFLICT.format(
        table=quote(str(iq.UniqueKey._meta.db_table)), now=now, **columns(connection, iq.UniqueKey)
    )
    stored = iq.UniqueKey._meta.get_field("window").get_db_prep_save(window, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key, stored])
        return cursor.fetchone() is not None


# Claim in one round trip on PostgreSQL, for a queue that is not paused and has no concurrency
# cap (a capped queue takes the general path, which serializes its claimers on the queue row).
# The w CTE holds the claiming worker's row FOR SHARE, and only if that worker is running and
# not silent: a worker declared dead can claim nothing, and the leader's UPDATE declaring it
# dead waits for this claim to commit (then sees its locks) or makes this claim find nothing.
# The candidates CTE locks entries FOR UPDATE SKIP LOCKED; the locks CTE inserts one group lock
# per key (in key order, so waiting claimers cannot deadlock) and ON CONFLICT skips keys another
# claimer holds; only entries whose lock this statement inserted come back. locked_at is
# CLOCK_TIMESTAMP(), read after the worker row lock was granted. CTEs run against one snapshot
# and commit together with the statement.
CLAIM_POSTGRESQL = """
WITH w AS (
    SELECT 1 FROM {worker_table}
    WHERE {worker_id} = %(worker)s AND {stopped_at} IS NULL
      AND {heartbeat_at} >= STATEMENT_TIMESTAMP() - %(silent_seconds)s * INTERVAL '1 second'
    FOR SHARE
), q AS (
    SELECT 1 FROM {queue_table}
    WHERE {queue_name} = %(queue)s AND NOT {is_paused} AND {max_concurrency} IS NULL
), candidates AS (
    SELECT e.{id}, e.{lock_key}, e.{priority} FROM {entry_table} e
    WHERE e.{state} = 'pending' AND e.{entry_queue} = %(queue)s AND EXISTS (SELECT 1 FROM q)
      AND ({worker_check}) AND ({job_check})
      AND NOT EXISTS (SELECT 1 FROM {lock_table} l WHERE l.{key} = e.{lock_key})
      AND NOT EXISTS (SELECT 1 FROM {disabled_table} d WHERE d.{disabled_job} = e.{job_name})
    ORDER BY e.{priority} DESC, e.{id}
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
), locks AS (
    INSERT INTO {lock_table} ({key}, {lock_queue}, {worker}, {locked_at}, {lock_entry})
    SELECT {lock_key}, %(queue)s, %(worker)s, CLOCK_TIMESTAMP(),
           (ARRAY_AGG({id} ORDER BY {priority} DESC, {id}))[1]
    FROM candidates
    GROUP BY {lock_key} ORDER BY {lock_key}
    ON CONFLICT ({key}) DO NOTHING
    RETURNING {lock_id}, {key}
)
SELECT {entry_columns}, locks.{lock_id} FROM {entry_table} e
JOIN candidates c ON c.{id} = e.{id}
JOIN locks ON locks.{key} = c.{lock_key}
ORDER BY e.{priority} DESC, e.{id}
"""


def supports_single_statement_claim(using: str) -> bool:
    """True where ``claim_in_one_statement`` works (PostgreSQL)."""
    return connections[using].vendor == "postgresql"


def claim_in_one_statement(
    using: str,
    queue: str,
    worker_id: int | None,
    limit: int,
    silent_after_seconds: float,
    job_names: Sequence[str] | None = None,
) -> list[tuple[Any, int]]:
    """Claim up to ``limit`` entries of an uncapped, unpaused ``queue`` in one round trip.

    Return ``(entry, lock id)`` pairs in claim order; entries are ``Entry`` instances. Nothing
    is claimed for a worker that is stopped or silent for ``silent_after_seconds``; with
    ``job_names``, only entries of those jobs.
    """
    params = {
        "queue": queue,
        "worker": worker_id,
        "limit": limit,
        "silent_seconds": silent_after_seconds,
        "jobs": list(job_names) if job_names is not None else None,
    }
    sql = claim_sql(using, with_worker=worker_id is not None, with_jobs=job_names is not None)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [(_instance(using, iq.Entry, row[:-1]), row[-1]) for row in rows]


def claim_sql(using: str, *, with_worker: bool, with_jobs: bool = False) -> str:
    """``CLAIM_POSTGRESQL`` for this connection's table and column names; parameters
    ``queue``, ``worker``, ``limit``, ``silent_seconds`` and ``jobs``. Built once per alias."""
    key = (using, with_worker, with_jobs)
    sql = _CLAIM_SQL.get(key)
    if sql is None:
        sql = _CLAIM_SQL[key] = _build_claim_sql(using, with_worker, with_jobs)
    return sql


_CLAIM_SQL: dict[tuple[str, bool, bool], str] = {}


def _build_claim_sql(using: str, with_worker: bool, with_jobs: bool) -> str:
    connection = connections[using]
    quote = connection.ops.quote_name

    def col(model: Any, name: str) -> str:
        return quote(str(model._meta.get_field(name).column))

    fields = iq.Entry._meta.concrete_fields
    return CLAIM_POSTGRESQL.format(
        worker_table=quote(str(iq.Worker._meta.db_table)),
        worker_id=col(iq.Worker, "id"),
        stopped_at=col(iq.Worker, "stopped_at"),
        heartbeat_at=col(iq.Worker, "heartbeat_at"),
        worker_check="EXISTS (SELECT 1 FROM w)" if with_worker else "TRUE",
        job_check=f"e.{col(iq.Entry, 'job_name')} = ANY(%(jobs)s::text[])" if with_jobs else "TRUE",
        queue_table=quote(str(iq.Queue._meta.db_table)),
        queue_name=col(iq.Queue, "name"),
        is_paused=col(iq.Queue, "is_paused"),
        max_concurrency=col(iq.Queue, "max_concurrency"),
        entry_table=quote(str(iq.Entry._meta.db_table)),
        id=col(iq.Entry, "id"),
        lock_key=col(iq.Entry, "lock_key"),
        state=col(iq.Entry, "state"),
        entry_queue=col(iq.Entry, "queue"),
        job_name=col(iq.Entry, "job_name"),
        priority=col(iq.Entry, "priority"),
        lock_table=quote(str(iq.GroupLock._meta.db_table)),
        key=col(iq.GroupLock, "key"),
        lock_queue=col(iq.GroupLock, "queue"),
        worker=col(iq.GroupLock, "worker"),
        locked_at=col(iq.GroupLock, "locked_at"),
        lock_entry=col(iq.GroupLock, "entry_id"),
        lock_id=col(iq.GroupLock, "id"),
        disabled_table=quote(str(iq.DisabledJob._meta.db_table)),
        disabled_job=col(iq.DisabledJob, "job_name"),
        entry_columns=", ".join(f"e.{quote(str(f.column))}" for f in fields),
    )


# A shared row lock: it lets claims of one worker run side by side and makes an UPDATE of the
# row (the leader declaring the worker dead, the worker's heartbeat) wait for them. SQLite needs
# none: its writers are serialized.
_SHARE_LOCK_BY_VENDOR = {"postgresql": " FOR SHARE", "mysql": " LOCK IN SHARE MODE", "sqlite": ""}


def lock_live_worker(using: str, worker_id: int, silent_after_seconds: float) -> bool:
    """In the caller's transaction, take a shared lock on the worker's row if the worker is
    running and has sent a heartbeat within ``silent_after_seconds``; return whether it is.

    A claim made under this lock cannot commit under a worker row declared dead: the UPDATE
    declaring it dead waits for the claim's transaction, and a claim that starts after it
    finds the row stopped.
    """
    connection = connections[using]
    live = iq.Worker.objects.using(using).filter(
        pk=worker_id, stopped_at__isnull=True, heartbeat_at__gte=db_now_plus(-silent_after_seconds)
    )
    sql, params = live.values_list("pk").query.sql_with_params()
    sql += _template(_SHARE_LOCK_BY_VENDOR, connection.vendor, "claim entries")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


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


def upsert_add(using: str, model: Any, keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """For each row, insert it, or add its non-key values to the existing row with its keys.

    Rows are written in key order, so two workers flushing at once cannot deadlock.
    """
    if not rows:
        return
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
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


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


# The channel PostgreSQL NOTIFY wakes idle workers on; the payload is the queue's name. A
# notification is sent only when its transaction commits, and PostgreSQL folds the same
# channel and payload sent many times in one transaction into one.
NOTIFY_CHANNEL = "django_iq"

# Enqueue in one round trip on PostgreSQL: the entries are inserted only if their queue exists, in the state the job's switch
# gives them (disabled or not), and each pending one notifies its queue's listeners. No row
# comes back when the queue does not exist: the caller creates a declared queue and tries
# again, or refuses the enqueue. One statement is one transaction on its own, so a single
# enqueue needs no BEGIN and COMMIT of its own. One entry (the common case) is a plain
# INSERT ... SELECT, which PostgreSQL plans as fast as an INSERT ... VALUES; several are
# read from a VALUES list in call order.
ENQUEUE_ONE_POSTGRESQL = """
INSERT INTO {entry_table} ({columns})
SELECT {values}
WHERE EXISTS (SELECT 1 FROM {queue_table} WHERE {queue_name} = %s){on_conflict}
RETURNING {id}, {state}{notify}
"""
ENQUEUE_MANY_POSTGRESQL = """
INSERT INTO {entry_table} ({columns})
SELECT {selected} FROM (VALUES {rows}) AS v({names})
WHERE EXISTS (SELECT 1 FROM {queue_table} WHERE {queue_name} = %s)
ORDER BY v.iq_ord
RETURNING {id}, {state}{notify}
"""
_DISABLED_OR = (
    "CASE WHEN EXISTS (SELECT 1 FROM {disabled_table} WHERE {disabled_job} = %s) "
    "THEN 'disabled' ELSE {value} END"
)
_ENQUEUE_SQL: dict[tuple[str, int, bool, bool], str] = {}


def supports_single_statement_enqueue(using: str) -> bool:
    """True where ``enqueue_in_one_statement`` works (PostgreSQL)."""
    return connections[using].vendor == "postgresql"


def _stored_fields(model: Any) -> list[Any]:
    """The fields an insert writes: the concrete ones, an auto primary key left out."""
    return [f for f in model._meta.concrete_fields if f is not model._meta.auto_field]


def _enqueue_sql(connection: Any, rows: int, notify: bool, unique: bool = False) -> str:
    """The enqueue statement for ``rows`` entries, built once. ``unique`` (one entry): an
    entry whose unique key is taken is not written."""
    key = (connection.alias, rows, notify, unique)
    sql = _ENQUEUE_SQL.get(key)
    if sql is not None:
        return sql
    quote = connection.ops.quote_name

    def col(model: Any, name: str) -> str:
        return str(quote(str(model._meta.get_field(name).column)))

    def casts(fields: list[Any]) -> list[str]:
        return [f"%s::{f.cast_db_type(connection)}" for f in fields]

    fields = _stored_fields(iq.Entry)
    names = [quote(str(f.column)) for f in fields]
    state = col(iq.Entry, "state")
    disabled_or = _DISABLED_OR.format(
        disabled_table=quote(str(iq.DisabledJob._meta.db_table)),
        disabled_job=col(iq.DisabledJob, "job_name"),
        value="{value}",
    )
    queue_table = quote(str(iq.Queue._meta.db_table))
    queue_name = col(iq.Queue, "name")
    common = {
        "entry_table": quote(str(iq.Entry._meta.db_table)),
        "columns": ", ".join(names),
        "queue_table": queue_table,
        "queue_name": queue_name,
        "id": col(iq.Entry, "id"),
        "state": state,
        "notify": (
            f", CASE WHEN {state} = 'pending' THEN "
            f"pg_notify('{NOTIFY_CHANNEL}', {col(iq.Entry, 'queue')})::text END"
            if notify
            else ""
        ),
    }
    if rows == 1:
        values = [
            disabled_or.format(value=cast) if f.name == "state" else cast
            for f, cast in zip(fields, casts(fields), strict=True)
        ]
        on_conflict = f"\nON CONFLICT ({col(iq.Entry, 'unique_key')}) DO NOTHING" if unique else ""
        sql = ENQUEUE_ONE_POSTGRESQL.format(
            values=", ".join(values), on_conflict=on_conflict, **common
        )
    else:
        selected = [
            disabled_or.format(value=f"v.{name}") if f.name == "state" else f"v.{name}"
            for f, name in zip(fields, names, strict=True)
        ]
        row = "(" + ", ".join([*casts(fields), "%s::integer"]) + ")"
        sql = ENQUEUE_MANY_POSTGRESQL.format(
            selected=", ".join(selected),
            rows=", ".join([row] * rows),
            names=", ".join([*names, "iq_ord"]),
            **common,
        )
    _ENQUEUE_SQL[key] = sql
    return sql


def enqueue_in_one_statement(
    using: str,
    queue: str,
    job_name: str,
    entries: Sequence[Any],
    *,
    unique: bool = False,
) -> list[tuple[int, str]] | None:
    """Insert ``entries`` (unsaved ``Entry`` objects of one job and queue) in one statement;
    return ``(id, state)`` per entry in order, or None, with nothing written, if ``queue`` has
    no row or (``unique``, one entry) the entry's unique key is taken."""
    connection = connections[using]
    params: list[Any] = []
    fields = _stored_fields(iq.Entry)
    one = len(entries) == 1
    if not one:
        params.append(job_name)  # the disabled-job check comes before the rows
    for index, entry in enumerate(entries):
        for f in fields:
            if f.name == "state" and one:
                params.append(job_name)
            params.append(f.get_db_prep_save(getattr(entry, f.attname), connection))
        if not one:
            params.append(index)
    params.append(queue)
    sql = _enqueue_sql(connection, len(entries), notifications_on(using), unique)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        created = [(row[0], row[1]) for row in cursor.fetchall()]
    return created or None


def notifications_on(using: str) -> bool:
    """True where ready work is announced with NOTIFY (PostgreSQL, ``LISTEN_NOTIFY`` on)."""
    return connections[using].vendor == "postgresql" and bool(iq_settings.LISTEN_NOTIFY)


def notify_ready(using: str, queues: Iterable[object]) -> None:
    """In the caller's transaction, wake the listeners of ``queues`` (entries became ready
    there); nothing where the database has no notifications."""
    names = sorted({str(queue) for queue in queues})
    if not names or not notifications_on(using):
        return
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q",
            [NOTIFY_CHANNEL, names],
        )


_LOADERS: dict[Any, tuple[list[str], list[Any]]] = {}


def _instance(using: str, model: Any, row: Sequence[Any]) -> Any:
    """A model instance from a row of its concrete fields, as the ORM would load it (on
    PostgreSQL, whose driver returns dates and numbers typed)."""
    loader = _LOADERS.get(model)
    if loader is None:
        fields = model._meta.concrete_fields
        loader = _LOADERS[model] = (
            [f.attname for f in fields],
            [getattr(f, "from_db_value", None) for f in fields],
        )
    attnames, converters = loader
    connection = connections[using]
    values = [
        value if convert is None else convert(value, None, connection)
        for convert, value in zip(converters, row, strict=True)
    ]
    return model.from_db(using, attnames, values)


# Write plain successes in one statement on PostgreSQL (one round trip, no BEGIN or COMMIT of
# its own): lock the finished entries by id and delete them, then lock the ended claims' group
# locks by id and delete them, in that order as every writer of several rows does (the second
# lock step waits for the first through its sub-select). Returns the lock ids deleted; those
# missing were gone already (recovery released them while their jobs ran). A batch with unique
# keys starts their windows between the two steps (COMPLETE_WINDOWS_POSTGRESQL).
COMPLETE_POSTGRESQL = """
WITH le AS (
    SELECT {entry_id} FROM {entry_table} WHERE {entry_id} = ANY(%(entries)s)
    ORDER BY {entry_id} FOR UPDATE
), de AS (
    DELETE FROM {entry_table} e USING le WHERE e.{entry_id} = le.{entry_id}
    RETURNING e.{entry_id}{returned_key}{returned_outcome}
){windows}{outcomes}, dd AS (
    DELETE FROM {dep_table} d USING de WHERE d.{dep_parent} = de.{entry_id}
    RETURNING d.{dep_child}
), rc AS (
    UPDATE {entry_table} c SET {blockers} = c.{blockers} - n.n,
        {state} = CASE WHEN c.{state} = 'blocked' AND c.{blockers} - n.n <= 0
            THEN CASE WHEN c.{run_at} > STATEMENT_TIMESTAMP() THEN 'initial' ELSE 'pending' END
            ELSE c.{state} END
    FROM (SELECT {dep_child} AS child, COUNT(*) AS n FROM dd GROUP BY {dep_child}) n
    WHERE c.{entry_id} = n.child
    RETURNING c.{queue}, c.{state}
), rn AS (
    SELECT pg_notify('{channel}', q) FROM (SELECT DISTINCT {queue} AS q FROM rc
    WHERE {state} = 'pending') AS ready
), ll AS (
    SELECT {lock_id} FROM {lock_table}
    WHERE {lock_id} = ANY(%(locks)s) AND (SELECT COUNT(*) FROM {before_locks}) >= 0
      AND (SELECT COUNT(*) FROM rn) >= 0
    ORDER BY {lock_id} FOR UPDATE
), dl AS (
    DELETE FROM {lock_table} g USING ll WHERE g.{lock_id} = ll.{lock_id} RETURNING g.{lock_id}
)
SELECT {lock_id} FROM dl
"""
# The entries deleted that held unique keys with a window (unique_for): each window starts now
# (the database's clock, as the ORM path's Now()). Only keys still held (expires_at NULL) are
# touched, and only entries this statement deleted count.
COMPLETE_WINDOWS_POSTGRESQL = """, uk AS (
    UPDATE {key_table} k SET {expires_at} = STATEMENT_TIMESTAMP() + k.{window}
    FROM de WHERE k.{key} = de.{unique_key} AND k.{expires_at} IS NULL
    RETURNING k.{id}
)"""
# The outcome records of the entries this statement deleted (those of jobs that keep them), in
# the same statement: what ran is read from the deleted rows, how it ended from the arrays.
COMPLETE_OUTCOMES_POSTGRESQL = """, oi AS (
    INSERT INTO {table} ({entry_id}, {result_id}, {job_name}, {queue}, {args}, {kwargs},
        {status}, {attempt}, {return_value}, {exception_class}, {traceback}, {worker_name},
        {started_at}, {finished_at}, {enqueued_at}, {duration_seconds})
    SELECT de.{e_id}, de.{e_result_id}, de.{e_job_name}, de.{e_queue}, de.{e_args},
        de.{e_kwargs}, 'succeeded', de.{e_attempts} + 1, v.value::jsonb, '', '', v.worker,
        v.started, v.at, de.{e_enqueued_at}, v.took
    FROM unnest(%(o_entries)s::bigint[], %(o_values)s::text[], %(o_ats)s::timestamptz[],
                %(o_started)s::timestamptz[], %(o_took)s::float8[], %(o_workers)s::text[])
         AS v(entry, value, at, started, took, worker)
    JOIN de ON de.{e_id} = v.entry
)"""
# What the outcome records read from the deleted entries.
_OUTCOME_ENTRY_FIELDS = (
    "job_name",
    "queue",
    "args",
    "kwargs",
    "attempts",
    "result_id",
    "enqueued_at",
)
_COMPLETE_SQL: dict[tuple[str, bool, bool], str] = {}


@dataclass(frozen=True)
class OutcomeDone:
    """A success's outcome record: the entry, its return value as stored (JSON text, or None),
    when the run finished and started, how long it took, and the worker that ran it."""

    entry_id: int
    return_json: str | None
    at: datetime
    started: datetime | None
    duration_seconds: float | None
    worker_name: str


def supports_single_statement_complete(using: str) -> bool:
    """True where ``complete_in_one_statement`` works (PostgreSQL)."""
    return connections[using].vendor == "postgresql"


def complete_in_one_statement(
    using: str,
    entry_ids: Sequence[int],
    lock_ids: Sequence[int],
    *,
    unique_keys: bool = False,
    outcomes: Sequence[OutcomeDone] = (),
) -> set[int]:
    """Delete finished entries and the group locks of the claims they ended, and insert the
    ``outcomes`` records of those deleted, in one statement; return the lock ids that were
    deleted. ``unique_keys``: some entries hold unique keys, whose windows (``unique_for``)
    start."""
    connection = connections[using]
    params: dict[str, Any] = {
        "entries": sorted(set(entry_ids)),
        "locks": sorted(set(lock_ids)),
    }
    if outcomes:
        params.update(
            o_entries=[o.entry_id for o in outcomes],
            o_values=[o.return_json for o in outcomes],
            o_ats=[o.at for o in outcomes],
            o_started=[o.started for o in outcomes],
            o_took=[o.duration_seconds for o in outcomes],
            o_workers=[o.worker_name for o in outcomes],
        )
    sql = _complete_sql(connection, unique_keys, bool(outcomes))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def _complete_sql(connection: Any, with_windows: bool, with_outcomes: bool) -> str:
    key = (connection.alias, with_windows, with_outcomes)
    sql = _COMPLETE_SQL.get(key)
    if sql is None:
        quote = connection.ops.quote_name
        lock_id = quote(str(iq.GroupLock._meta.pk.column))
        unique_key = quote(str(iq.Entry._meta.get_field("unique_key").column))
        windows = ""
        if with_windows:
            windows = COMPLETE_WINDOWS_POSTGRESQL.format(
                key_table=quote(str(iq.UniqueKey._meta.db_table)),
                unique_key=unique_key,
                **columns(connection, iq.UniqueKey),
            )
        entry = columns(connection, iq.Entry)
        dependency = columns(connection, iq.EntryDependency)
        outcomes = returned_outcome = ""
        if with_outcomes:
            returned_outcome = "".join(f", e.{entry[name]}" for name in _OUTCOME_ENTRY_FIELDS)
            outcomes = COMPLETE_OUTCOMES_POSTGRESQL.format(
                table=quote(str(iq.RunOutcome._meta.db_table)),
                e_id=entry["id"],
                **{f"e_{name}": entry[name] for name in _OUTCOME_ENTRY_FIELDS},
                **columns(connection, iq.RunOutcome),
            )
        sql = COMPLETE_POSTGRESQL.format(
            entry_table=quote(str(iq.Entry._meta.db_table)),
            entry_id=quote(str(iq.Entry._meta.pk.column)),
            dep_table=quote(str(iq.EntryDependency._meta.db_table)),
            dep_parent=dependency["parent_id"],
            dep_child=dependency["child_id"],
            blockers=entry["blockers"],
            state=entry["state"],
            run_at=entry["run_at"],
            queue=entry["queue"],
            channel=NOTIFY_CHANNEL,
            returned_key=f", e.{unique_key}" if with_windows else "",
            returned_outcome=returned_outcome,
            outcomes=outcomes,
            windows=windows,
            before_locks="uk" if with_windows else "de",
            lock_table=quote(str(iq.GroupLock._meta.db_table)),
            lock_id=lock_id,
        )
        _COMPLETE_SQL[key] = sql
    return sql


# A bulk enqueue of many entries on PostgreSQL goes through COPY: its ids are taken from the
# table's sequence first (COPY returns nothing), then the rows are streamed, in the caller's
# transaction. The queue and disabled-job checks are one statement before it.
COPY_ENQUEUE_MIN_ROWS = 2000
_COPY_VARYING = frozenset({"id", "args", "kwargs", "lock_key"})
ENQUEUE_CHECKS_POSTGRESQL = (
    "SELECT EXISTS (SELECT 1 FROM {queue_table} WHERE {queue_name} = %s), "
    "EXISTS (SELECT 1 FROM {disabled_table} WHERE {disabled_job} = %s)"
)


def enqueue_by_copy(
    using: str, queue: str, job_name: str, entries: Sequence[Any]
) -> list[tuple[int, str]] | None:
    """Insert ``entries`` (unsaved ``Entry`` objects of one job and queue) with ``COPY``; return
    ``(id, state)`` per entry in order, or None, with nothing written, if ``queue`` has no row.
    Call inside a transaction; pending entries notify their queue when it commits."""
    connection = connections[using]
    quote = connection.ops.quote_name
    model = iq.Entry

    def col(model: Any, name: str) -> str:
        return quote(str(model._meta.get_field(name).column))

    table = quote(str(model._meta.db_table))
    with connection.cursor() as cursor:
        cursor.execute(
            ENQUEUE_CHECKS_POSTGRESQL.format(
                queue_table=quote(str(iq.Queue._meta.db_table)),
                queue_name=col(iq.Queue, "name"),
                disabled_table=quote(str(iq.DisabledJob._meta.db_table)),
                disabled_job=col(iq.DisabledJob, "job_name"),
            ),
            [queue, job_name],
        )
        queue_exists, disabled = cursor.fetchone()
        if not queue_exists:
            return None
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [str(model._meta.db_table), str(model._meta.pk.column), len(entries)],
        )
        ids = [row[0] for row in cursor.fetchall()]
        fields = model._meta.concrete_fields
        columns = ", ".join(quote(str(f.column)) for f in fields)
        if disabled:
            for entry in entries:
                entry.state = "disabled"
        # The entries of one call share every column but these: the others are prepared once.
        varying = [i for i, f in enumerate(fields) if f.name in _COPY_VARYING]
        constant = [i for i in range(len(fields)) if i not in varying]
        first = entries[0]
        shared = [getattr(first, f.attname) for f in fields]
        template = [
            f.get_db_prep_save(value, connection) for f, value in zip(fields, shared, strict=True)
        ]
        pending = False
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for entry, pk in zip(entries, ids, strict=True):
                entry.pk = pk
                pending = pending or entry.state == "pending"
                values = [getattr(entry, f.attname) for f in fields]
                if all(values[i] == shared[i] for i in constant):
                    row = template.copy()
                    for i in varying:
                        row[i] = fields[i].get_db_prep_save(values[i], connection)
                else:
                    row = [
                        f.get_db_prep_save(v, connection)
                        for f, v in zip(fields, values, strict=True)
                    ]
                copy.write_row(row)
    if pending:
        notify_ready(using, [queue])
    return [(entry.pk, entry.state) for entry in entries]


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


# Entries join a batch on PostgreSQL in one statement (see managers/batches.py): the batch's
# row counts them, their edges to the callback are written, and the callback's blockers grow
# by as many. The batch's row is updated first, as every writer of both does: the callback's
# update waits for it through its sub-select. A callback already gone is left alone.
JOIN_BATCH_POSTGRESQL = """
WITH b AS (
    UPDATE {batch_table} SET {total} = {total} + %(n)s WHERE {batch_id} = %(batch)s
    RETURNING {batch_id}
), d AS (
    INSERT INTO {dep_table} ({parent_id}, {child_id}, {run_on_failure})
    SELECT p, %(callback)s, TRUE FROM unnest(%(ids)s::bigint[]) AS p
)
UPDATE {entry_table} SET {blockers} = {blockers} + %(n)s
WHERE {entry_id} = %(callback)s AND (SELECT COUNT(*) FROM b) >= 0
"""


def join_batch(using: str, batch_id: int, callback_id: int, entry_ids: Sequence[int]) -> bool:
    """Make the entries ``entry_ids`` members of batch ``batch_id`` whose callback entry is
    ``callback_id``, in one statement; return False where this takes several (not PostgreSQL)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    quote = connection.ops.quote_name
    batch = columns(connection, iq.Batch)
    sql = JOIN_BATCH_POSTGRESQL.format(
        batch_table=quote(str(iq.Batch._meta.db_table)),
        total=batch["total"],
        batch_id=batch["id"],
        dep_table=quote(str(iq.EntryDependency._meta.db_table)),
        entry_table=quote(str(iq.Entry._meta.db_table)),
        entry_id=quote(str(iq.Entry._meta.pk.column)),
        blockers=columns(connection, iq.Entry)["blockers"],
        **{
            name: column
            for name, column in columns(connection, iq.EntryDependency).items()
            if name != "id"
        },
    )
    params: dict[str, Any] = {
        "n": len(entry_ids),
        "batch": batch_id,
        "callback": callback_id,
        "ids": list(entry_ids),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return True
