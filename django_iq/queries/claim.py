"""Claiming: group locks, the single-statement claim on PostgreSQL, the portable claim's SQL,
and the live-worker check a claim makes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections

from django_iq.appmodels import iq
from django_iq.queries.common import _DB_CLOCK_BY_VENDOR, _instance, _template, columns, db_now_plus

# Insert group locks, skipping keys another claimer holds, and return the keys actually taken.
# PostgreSQL and SQLite (>= 3.35) both speak ON CONFLICT ... RETURNING.
INSERT_LOCKS_ON_CONFLICT = (
    "INSERT INTO {table} ({key}, {queue}, {worker}, {locked_at}, {entry}, {job}, {ckey}) "
    "VALUES {values} ON CONFLICT ({key}) DO NOTHING RETURNING {id}, {key}"
)


# MariaDB (>= 10.5): INSERT IGNORE skips duplicate keys and RETURNING lists only inserted rows.
INSERT_LOCKS_IGNORE = (
    "INSERT IGNORE INTO {table} ({key}, {queue}, {worker}, {locked_at}, {entry}, {job}, {ckey}) "
    "VALUES {values} "
    "RETURNING {id}, {key}"
)


_INSERT_LOCKS_BY_VENDOR = {
    "postgresql": INSERT_LOCKS_ON_CONFLICT,
    "sqlite": INSERT_LOCKS_ON_CONFLICT,
    "mysql": INSERT_LOCKS_IGNORE,
}


def insert_group_locks(
    using: str,
    keys: Mapping[str, int],
    queue: str,
    worker_id: int | None,
    job_name: str | None = None,
    concurrency_keys: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Insert a lock for each key not already locked; return ``{key: lock id}`` for those taken.

    ``keys`` maps each lock key to the first entry claimed under it; ``job_name`` is the job of
    a claim under a cap (counted against it while the lock lives), ``concurrency_keys`` each
    lock key's concurrency key (a job capped per key; "" when not given). ``locked_at`` is the
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
        ckey=column["concurrency_key"],
        id=column["id"],
        values=", ".join(
            [
                f"(%s, %s, %s, {_template(_DB_CLOCK_BY_VENDOR, connection.vendor, 'claim')}, "
                "%s, %s, %s)"
            ]
            * len(ordered)
        ),
    )
    params: list[Any] = []
    for key in ordered:
        ckey = (concurrency_keys or {}).get(key, "")
        params.extend((key, queue, worker_id, keys[key], job_name, ckey))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {key: lock_id for lock_id, key in cursor.fetchall()}


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
    connection = connections[using]
    with connection.cursor() as cursor:
        if _binds_on_the_client(connection):
            cursor.execute(INDEX_LOOKUPS_ONLY + sql, params)
            if cursor.description is None:  # psycopg 3: the SET's result comes first
                cursor.nextset()
        else:
            cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [(_instance(using, iq.Entry, row[:-1]), row[-1]) for row in rows]


# Sent with the claim, in the same implicit transaction (so it ends with it, behind a pooler
# in transaction mode too): every table the claim reads is reached through an index. With
# statistics taken while the queue was empty (a burst after a quiet spell, which is when a
# drain's speed counts), PostgreSQL expected one entry and read the group lock table from
# start to end for every pending entry it passed: at 24 worker processes with their claims
# in hand that was several thousand rows a claim, and most of the server's time.
INDEX_LOOKUPS_ONLY = "SET LOCAL enable_seqscan = off; "


def _binds_on_the_client(connection: Any) -> bool:
    """Whether parameters are bound on the client (psycopg 2, and psycopg 3 unless
    ``server_side_binding``): only then may one execute() carry two statements."""
    return not connection.settings_dict.get("OPTIONS", {}).get("server_side_binding")


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
