"""Completion: a batch of successes written in one statement on PostgreSQL (entries deleted,
unique-key windows started, outcome records written, children released, locks deleted)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections

from django_iq.appmodels import iq
from django_iq.queries.common import ENDED_CHANNEL, NOTIFY_CHANNEL, columns

# Write plain successes in one statement on PostgreSQL (one round trip, no BEGIN or COMMIT of
# its own): lock the finished entries by id and delete them, then lock the ended claims' group
# locks by id and delete them, in that order as every writer of several rows does (the second
# lock step waits for the first through its sub-select). Entries a caller waits on (awaited)
# are announced on ENDED_CHANNEL. Returns the lock ids deleted; those
# missing were gone already (recovery released them while their jobs ran). A batch with unique
# keys starts their windows between the two steps (COMPLETE_WINDOWS_POSTGRESQL).
COMPLETE_POSTGRESQL = """
WITH le AS (
    SELECT {entry_id} FROM {entry_table} WHERE {entry_id} = ANY(%(entries)s)
    ORDER BY {entry_id} FOR UPDATE
), de AS (
    DELETE FROM {entry_table} e USING le WHERE e.{entry_id} = le.{entry_id}
    RETURNING e.{entry_id}, e.{awaited}{returned_key}{returned_outcome}
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
), wn AS (
    SELECT pg_notify('{ended_channel}', de.{entry_id}::text) FROM de WHERE de.{awaited}
), ll AS (
    SELECT {lock_id} FROM {lock_table}
    WHERE {lock_id} = ANY(%(locks)s) AND (SELECT COUNT(*) FROM {before_locks}) >= 0
      AND (SELECT COUNT(*) FROM rn) >= 0 AND (SELECT COUNT(*) FROM wn) >= 0
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
            ended_channel=ENDED_CHANNEL,
            awaited=entry["awaited"],
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
