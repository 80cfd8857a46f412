"""Enqueueing: the single-statement enqueue (with its ``NOTIFY``) and ``COPY`` on PostgreSQL,
unique keys' windows, notifications, and a batch's members joining it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.db import connections

from django_iq.appmodels import iq
from django_iq.conf import iq_settings
from django_iq.queries.common import ENDED_CHANNEL, NOTIFY_CHANNEL, _stored_fields, columns

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
    notify(using, NOTIFY_CHANNEL, queues)


def notify_ended(using: str, entry_ids: Iterable[int]) -> None:
    """In the caller's transaction, tell whoever waits that these entries ended (see
    ``ENDED_CHANNEL``); nothing where the database has no notifications."""
    notify(using, ENDED_CHANNEL, entry_ids)


def notify(using: str, channel: str, payloads: Iterable[object]) -> None:
    """In the caller's transaction, one ``NOTIFY`` on ``channel`` per distinct payload; nothing
    where the database has no notifications."""
    texts = sorted({str(payload) for payload in payloads})
    if not texts or not notifications_on(using):
        return
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [channel, texts])


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
